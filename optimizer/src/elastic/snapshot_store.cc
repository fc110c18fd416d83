// SPDX-License-Identifier: Apache-2.0
// The snapshot file (format, authentication, atomic replacement, reading) and the resume
// planning; see hvd/optim/elastic_store.h for the format, the trust rules and the protocol.
#include <dirent.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "hvd/core/disk_space.h"
#include "hvd/core/elastic_config.h"
#include "hvd/core/private_dir.h"
#include "hvd/optim/elastic_store.h"

namespace hvd::elastic {
namespace {

constexpr char kMagic[8] = {'H', 'V', 'D', 'S', 'N', 'A', 'P', '2'};
constexpr char kMagicV1[8] = {'H', 'V', 'D', 'S', 'N', 'A', 'P', '1'};
constexpr size_t kMacSize = 32;
constexpr size_t kSignedHeader = 8 + 8 + 8 + 8;  // magic, commit id, world size, length
constexpr size_t kHeaderSize = kSignedHeader + kMacSize;
constexpr const char* kFileName = "snapshot";
constexpr const char* kWhatToDo =
    "; nothing in it is used. The job cannot resume from it: start the job again (hvdrun makes a "
    "fresh state directory). A snapshot changes only when someone changes it: if you did not, "
    "another user on this host may be interfering (tell your administrator)";

using Mac = std::array<unsigned char, kMacSize>;

void put_le(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return v;
}

// magic, commit id, world size, payload length: the header bytes the MAC covers.
std::string signed_header(uint64_t commit_id, uint64_t world_size, uint64_t length) {
  std::string h(kMagic, sizeof(kMagic));
  h.reserve(kHeaderSize);
  put_le(&h, commit_id);
  put_le(&h, world_size);
  put_le(&h, length);
  return h;
}

// HMAC-SHA256 under `key` of `header` then `payload` (OpenSSL 3's EVP_MAC).
Result<Mac> hmac(const SnapshotKey& key, std::string_view header, std::string_view payload) {
  std::unique_ptr<EVP_MAC, decltype(&EVP_MAC_free)> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr),
                                                        &EVP_MAC_free);
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(
      mac ? EVP_MAC_CTX_new(mac.get()) : nullptr, &EVP_MAC_CTX_free);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  Mac out{};
  size_t n = 0;
  const bool ok = ctx && EVP_MAC_init(ctx.get(), key.data(), key.size(), params) == 1 &&
                  EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(header.data()),
                                 header.size()) == 1 &&
                  EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(payload.data()),
                                 payload.size()) == 1 &&
                  EVP_MAC_final(ctx.get(), out.data(), &n, out.size()) == 1 && n == out.size();
  if (!ok) {
    char why[256] = "no reason given";
    if (const unsigned long e = ERR_get_error()) ERR_error_string_n(e, why, sizeof why);
    return internal_error(std::string("hvd.elastic: OpenSSL cannot compute HMAC-SHA256: ") + why);
  }
  return out;
}

// A write of `bytes` to `path` in `dir` failed with `err`: what failed, the bytes, the free
// space of the file system holding `dir` and how to give the job more room.
Status write_failure(const std::string& dir, const std::string& path, const char* what, int err,
                     uint64_t bytes) {
  std::string free_space = "unknown free space";
  if (const auto avail = core::free_bytes(dir)) {
    free_space = std::to_string(*avail) + " bytes" +
                 (*avail >= 1024 ? " (" + core::size_text(*avail) + ")" : std::string()) + " free";
  }
  return elastic_state_error(
      "hvd.elastic: cannot " + std::string(what) + " the snapshot '" + path + "' (" +
      std::to_string(bytes) + " bytes, " + core::size_text(bytes) + "): " + std::strerror(err) +
      "; the state directory '" + dir + "' has " + free_space +
      ". A commit needs room for two snapshots (the old one stays until the new one is whole): "
      "run the job again with hvdrun --elastic-state-dir DIR, DIR on a local file system with "
      "that much room");
}

// 0 when all `n` bytes went to `fd`, otherwise the errno of the failed write.
int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

// OK when `dir` may hold the job's state; otherwise the ElasticState error that refuses it.
Status check_directory(const std::string& dir) {
  const std::string problem = core::private_directory_problem(dir);
  if (problem.empty()) return Status::OK();
  return elastic_state_error(
      "hvd.elastic: refusing the state directory: " + problem +
      ". Elastic state is kept only in a private directory of the job's user (a real directory, "
      "mode 0700), so no snapshot is read from or written to it. Start the job again (hvdrun "
      "makes a fresh one); if this recurs, another user on this host may be interfering (tell "
      "your administrator)");
}

Status refuse_file(const std::string& path, const std::string& why) {
  return elastic_state_error("hvd.elastic: refusing the snapshot '" + path + "': " + why +
                             kWhatToDo);
}

}  // namespace

Result<SnapshotKey> parse_snapshot_key(std::string_view hex) {
  SnapshotKey key{};
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  bool ok = hex.size() == 2 * key.size();
  for (size_t i = 0; ok && i < key.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    key[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  if (!ok) {
    return elastic_state_error(
        "hvd.elastic: HVD_ELASTIC_KEY is not 64 hexadecimal digits (it has " +
        std::to_string(hex.size()) +
        " characters): hvdrun --min-np sets it for every rank; run the job under hvdrun "
        "--min-np N and leave HVD_ELASTIC_KEY to it");
  }
  return key;
}

Result<SnapshotKey> job_snapshot_key() {
  const core::ElasticConfig c = core::ElasticConfig::from_process_env();
  if (c.key.empty()) {
    return elastic_state_error(
        "hvd.elastic: HVD_ELASTIC_STATE_DIR is set but HVD_ELASTIC_KEY is not: elastic state is "
        "hvdrun's; run under hvdrun --min-np N (it sets both for every rank), or unset "
        "HVD_ELASTIC_STATE_DIR to run without elastic state");
  }
  return parse_snapshot_key(c.key);
}

Result<std::string> encode_snapshot(const Snapshot& s, const SnapshotKey& key) {
  std::string out = signed_header(s.commit_id, s.world_size, s.payload.size());
  const Result<Mac> mac = hmac(key, out, s.payload);
  if (!mac.ok()) return mac.status();
  out.append(reinterpret_cast<const char*>(mac.value().data()), kMacSize);
  out += s.payload;
  return out;
}

Result<Snapshot> decode_snapshot(std::string_view bytes, const SnapshotKey& key,
                                 const std::string& path) {
  const std::string_view magic = bytes.substr(0, sizeof(kMagic));
  if (magic == std::string_view(kMagicV1, sizeof(kMagicV1))) {
    return refuse_file(path,
                       "it is a format-1 snapshot (\"HVDSNAP1\", CRC-32, written by an older "
                       "hvd), which proves nothing about who wrote it; this hvd reads only "
                       "format 2, authenticated with the job's key");
  }
  if (magic != std::string_view(kMagic, sizeof(kMagic))) {
    return refuse_file(path, "it is not an hvd snapshot (" + std::to_string(bytes.size()) +
                                 " bytes that do not start with \"HVDSNAP2\")");
  }
  if (bytes.size() < kHeaderSize) {
    return refuse_file(path, "it is truncated: " + std::to_string(bytes.size()) +
                                 " bytes, shorter than the " + std::to_string(kHeaderSize) +
                                 "-byte header");
  }
  const uint64_t length = get_le(bytes, 24);
  const std::string_view payload = bytes.substr(kHeaderSize);
  if (payload.size() != length) {
    return refuse_file(
        path,
        std::string(payload.size() < length ? "it is truncated" : "it is longer than its header") +
            ": its header announces " + std::to_string(length) + " payload bytes, the file holds " +
            std::to_string(payload.size()));
  }
  const Result<Mac> mac = hmac(key, bytes.substr(0, kSignedHeader), payload);
  if (!mac.ok()) return mac.status();
  if (CRYPTO_memcmp(mac.value().data(), bytes.data() + kSignedHeader, kMacSize) != 0) {
    return refuse_file(path,
                       "its HMAC-SHA256 does not verify with this job's key (it was changed "
                       "after this job wrote it, or written by someone without the key)");
  }
  return Snapshot{get_le(bytes, 8), get_le(bytes, 16), std::string(payload)};
}

std::string snapshot_path(const std::string& dir) { return dir + "/" + kFileName; }

Status write_snapshot(const std::string& dir, const Snapshot& s, const SnapshotKey& key) {
  const std::string final_path = snapshot_path(dir);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  struct stat dir_st {};
  if (::lstat(dir.c_str(), &dir_st) != 0 && errno == ENOENT) {
    return elastic_state_error(
        "hvd.elastic: the state directory '" + dir +
        "' does not exist (hvdrun's rank wrapper creates it, and removes it when hvdrun is "
        "lost); the snapshot is not written");
  }
  HVD_RETURN_IF_ERROR(check_directory(dir));
  // Header and payload written separately: no copy of a large payload.
  std::string header = signed_header(s.commit_id, s.world_size, s.payload.size());
  const Result<Mac> mac = hmac(key, header, s.payload);
  if (!mac.ok()) return mac.status();
  header.append(reinterpret_cast<const char*>(mac.value().data()), kMacSize);
  const uint64_t total = header.size() + s.payload.size();
  const int fd = core::open_private_file(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return write_failure(dir, tmp, "create", errno, total);
  std::string what = "write";
  int err = write_all(fd, header.data(), header.size());
  if (err == 0) err = write_all(fd, s.payload.data(), s.payload.size());
  if (::close(fd) != 0 && err == 0) {
    what = "close";
    err = errno;
  }
  if (err == 0 && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    what = "rename over '" + final_path + "'";
    err = errno;
  }
  if (err == 0) return Status::OK();
  ::unlink(tmp.c_str());  // first: the free space reported is what the next try would have
  return write_failure(dir, tmp, what.c_str(), err, total);
}

Status write_snapshot(const std::string& dir, const Snapshot& s) {
  const Result<SnapshotKey> key = job_snapshot_key();
  if (!key.ok()) return key.status();
  return write_snapshot(dir, s, key.value());
}

Result<std::optional<Snapshot>> read_snapshot(const std::string& dir, const SnapshotKey& key) {
  HVD_RETURN_IF_ERROR(check_directory(dir));
  const std::string path = snapshot_path(dir);
  // O_NONBLOCK: a FIFO in its place must not hang the open (it is refused below).
  const int fd = core::open_private_file(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return std::optional<Snapshot>();
  if (fd < 0 && errno == ELOOP) {
    return refuse_file(path, "it is a symbolic link (the job writes only regular files)");
  }
  if (fd < 0) {
    return refuse_file(path, std::string("it cannot be opened: ") + std::strerror(errno));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return refuse_file(path, std::string("it cannot be examined: ") + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return refuse_file(path, "it is not a regular file");
  if (st.st_uid != ::geteuid()) {
    return refuse_file(path, "it belongs to uid " + std::to_string(st.st_uid) +
                                 ", not to this job's uid " + std::to_string(::geteuid()));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return refuse_file(path, std::string("reading it failed: ") + std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  bytes.resize(got);
  Result<Snapshot> s = decode_snapshot(bytes, key, path);
  if (!s.ok()) return s.status();
  return std::optional<Snapshot>(std::move(s).value());
}

Result<std::optional<Snapshot>> read_snapshot(const std::string& dir) {
  const Result<SnapshotKey> key = job_snapshot_key();
  if (!key.ok()) return key.status();
  return read_snapshot(dir, key.value());
}

void remove_stale_temporaries(const std::string& dir) {
  if (!core::private_directory_problem(dir).empty()) return;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = std::string(kFileName) + ".tmp.";
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      ::unlink((dir + "/" + e->d_name).c_str());
    }
  }
  ::closedir(d);
}

RestorePlan plan_restore(const std::vector<int64_t>& commit_ids) {
  RestorePlan plan;
  for (size_t r = 0; r < commit_ids.size(); ++r) {
    if (commit_ids[r] > plan.commit_id) {
      plan.commit_id = commit_ids[r];
      plan.root = static_cast<int>(r);
    }
  }
  return plan;
}

std::optional<LauncherHostUpdate> parse_host_update(std::string_view text) {
  std::istringstream in{std::string(text)};
  LauncherHostUpdate u;
  std::string rest;
  if (!(in >> u.seq >> u.bits) || (in >> rest)) return std::nullopt;
  return u;
}

std::optional<LauncherHostUpdate> read_host_update(const std::string& path) {
  // In the state directory: never through a link (O_NOFOLLOW), never a FIFO's wait.
  const int fd = core::open_private_file(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  char text[64];
  ssize_t n;
  do {
    n = ::read(fd, text, sizeof text);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0 || static_cast<size_t>(n) == sizeof text) return std::nullopt;
  return parse_host_update(std::string_view(text, static_cast<size_t>(n)));
}

Environment environment() {
  const core::ElasticConfig c = core::ElasticConfig::from_process_env();
  return Environment{c.state_dir, c.completion_file, c.hosts_file, c.progress_file};
}

}  // namespace hvd::elastic
