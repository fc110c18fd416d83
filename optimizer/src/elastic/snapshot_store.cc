// SPDX-License-Identifier: Apache-2.0
// The snapshot file (format, atomic replacement, reading) and the resume planning; see
// hvd/optim/elastic_store.h for the format and the protocol.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "hvd/core/elastic_config.h"
#include "hvd/optim/elastic_store.h"

namespace hvd::elastic {
namespace {

constexpr char kMagic[8] = {'H', 'V', 'D', 'S', 'N', 'A', 'P', '1'};
constexpr size_t kHeaderSize = 8 + 8 + 8 + 8 + 4;
constexpr const char* kFileName = "snapshot";

// Slicing-by-8 tables: table[0] is the byte-wise CRC table, table[k][i] the CRC of byte i
// followed by k zero bytes (8 bytes per step: a 2 MiB commit's CRC takes about a millisecond).
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

CrcTables make_crc_tables() {
  CrcTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
  return t;
}

uint32_t load_le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void put_le(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + static_cast<size_t>(i)]))
         << (8 * i);
  }
  return v;
}

Status io_error(const std::string& what, const std::string& path) {
  return internal_error("hvd.elastic: cannot " + what + " '" + path + "': " + std::strerror(errno));
}

Status write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

}  // namespace

uint32_t crc32(std::string_view bytes) {
  static const CrcTables t = make_crc_tables();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) {
    const uint32_t one = load_le32(p) ^ c, two = load_le32(p + 4);
    c = t[7][one & 0xff] ^ t[6][(one >> 8) & 0xff] ^ t[5][(one >> 16) & 0xff] ^ t[4][one >> 24] ^
        t[3][two & 0xff] ^ t[2][(two >> 8) & 0xff] ^ t[1][(two >> 16) & 0xff] ^ t[0][two >> 24];
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string encode_snapshot(const Snapshot& s) {
  std::string out(kMagic, sizeof(kMagic));
  out.reserve(kHeaderSize + s.payload.size());
  put_le(&out, s.commit_id, 8);
  put_le(&out, s.world_size, 8);
  put_le(&out, s.payload.size(), 8);
  put_le(&out, crc32(s.payload), 4);
  out += s.payload;
  return out;
}

std::optional<Snapshot> decode_snapshot(std::string_view bytes) {
  if (bytes.size() < kHeaderSize || bytes.substr(0, 8) != std::string_view(kMagic, 8)) {
    return std::nullopt;
  }
  Snapshot s;
  s.commit_id = get_le(bytes, 8, 8);
  s.world_size = get_le(bytes, 16, 8);
  const uint64_t length = get_le(bytes, 24, 8);
  const auto crc = static_cast<uint32_t>(get_le(bytes, 32, 4));
  const std::string_view payload = bytes.substr(kHeaderSize);
  if (payload.size() != length || crc32(payload) != crc) return std::nullopt;
  s.payload.assign(payload);
  return s;
}

std::string snapshot_path(const std::string& dir) { return dir + "/" + kFileName; }

Status write_snapshot(const std::string& dir, const Snapshot& s) {
  const std::string final_path = snapshot_path(dir);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  // Header and payload written separately: no copy of a large payload.
  std::string header = encode_snapshot(Snapshot{s.commit_id, s.world_size, {}});
  header.resize(kHeaderSize - 12);
  put_le(&header, s.payload.size(), 8);
  put_le(&header, crc32(s.payload), 4);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    return internal_error("hvd.elastic: the state directory '" + dir +
                          "' does not exist (hvdrun's rank wrapper creates it, and removes it when "
                          "hvdrun is lost); the snapshot is not written");
  }
  if (fd < 0) return io_error("create", tmp);
  Status st = write_all(fd, header.data(), header.size(), tmp);
  if (st.ok()) st = write_all(fd, s.payload.data(), s.payload.size(), tmp);
  if (::close(fd) != 0 && st.ok()) st = io_error("close", tmp);
  if (st.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) st = io_error("rename", tmp);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

std::optional<Snapshot> read_snapshot(const std::string& dir) {
  const int fd = ::open(snapshot_path(dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  std::string bytes;
  if (::fstat(fd, &st) == 0) bytes.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  bytes.resize(got);
  return decode_snapshot(bytes);
}

void remove_stale_temporaries(const std::string& dir) {
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
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream text;
  text << f.rdbuf();
  return parse_host_update(text.str());
}

Environment environment() {
  const core::ElasticConfig c = core::ElasticConfig::from_process_env();
  return Environment{c.state_dir, c.completion_file, c.hosts_file, c.progress_file};
}

}  // namespace hvd::elastic
