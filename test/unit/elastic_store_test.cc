// SPDX-License-Identifier: Apache-2.0
// The elastic snapshot file (format, authentication, atomic replacement, damage, planted files
// and directories, a full file system), the resume plan and the elastic variables
// (hvd/optim/elastic_store.h). The Sampler's tests are in
// test/torch/test_elastic_sampler.cc (its shuffle is libtorch's randperm).
#include "hvd/optim/elastic_store.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "hvd/core/elastic_config.h"
#include "hvd/optim/elastic_progress.h"
#include "hvd_catch.h"

using namespace hvd::elastic;

namespace {

// A fresh directory under /tmp, removed (with what the test wrote) when the test ends.
std::string temp_dir() {
  struct Dirs {
    std::vector<std::string> paths;
    ~Dirs() {
      for (const auto& p : paths) std::filesystem::remove_all(p);
    }
  };
  static Dirs dirs;
  char tmpl[] = "/tmp/hvd_elastic_unit_XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  dirs.paths.emplace_back(d);
  return d;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

constexpr size_t kHeader = 64;  // magic, commit id, world size, length, HMAC-SHA256
constexpr const char* kKeyHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

// The key kKeyHex spells: bytes 0..31.
SnapshotKey test_key() {
  SnapshotKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<unsigned char>(i);
  return k;
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

// Little-endian bytes of v, written independently of the library.
std::string le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

}  // namespace

TEST_CASE("a snapshot key is 64 hex digits, and a bad one is not repeated in the error", "[unit]") {
  const auto key = parse_snapshot_key(kKeyHex);
  REQUIRE(key.ok());
  CHECK(key.value() == test_key());
  std::string upper = kKeyHex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHECK(parse_snapshot_key(upper).ok());
  for (const std::string& bad :
       {std::string(), std::string(kKeyHex).substr(2), std::string(kKeyHex) + "00",
        "zz" + std::string(kKeyHex).substr(2)}) {
    const auto r = parse_snapshot_key(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == hvd::StatusCode::kElasticState);
    CHECK_THAT(r.status().message(), hvd::test::Contains("HVD_ELASTIC_KEY is not 64 hex"));
    if (bad.size() > 8) CHECK(r.status().message().find(bad) == std::string::npos);
  }
}

TEST_CASE("a snapshot's bytes are magic, id, world size, length, HMAC-SHA256, payload", "[unit]") {
  const std::string payload("ab\0c", 4);
  // The HMAC computed independently (Python: hmac.new(bytes(range(32)), header + payload,
  // hashlib.sha256)) over "HVDSNAP2", 7, 4, 4 and the payload.
  const std::string expect =
      std::string("HVDSNAP2") + le(7, 8) + le(4, 8) + le(4, 8) +
      unhex("97ab7f87051a75b6d30da6aeb899c31da6679d7f31b519399753b6db54bb4ab0") + payload;
  CHECK(encode_snapshot({7, 4, payload}, test_key()).value() == expect);
  const auto back = decode_snapshot(expect, test_key(), "f");
  REQUIRE(back.ok());
  CHECK(back.value().commit_id == 7);
  CHECK(back.value().world_size == 4);
  CHECK(back.value().payload == payload);
  const auto empty =
      decode_snapshot(encode_snapshot({1, 2, ""}, test_key()).value(), test_key(), "f");
  REQUIRE(empty.ok());
  CHECK(empty.value().payload.empty());
}

TEST_CASE("a changed, truncated, foreign or old-format snapshot is refused by name", "[unit]") {
  const std::string good = encode_snapshot({3, 2, std::string(100, 'x')}, test_key()).value();
  const std::string path = "/dev/shm/hvd-elastic-x/snapshot";
  auto refused = [&](const std::string& bytes, const SnapshotKey& key, const std::string& why) {
    const auto r = decode_snapshot(bytes, key, path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == hvd::StatusCode::kElasticState);
    CHECK_THAT(r.status().message(),
               hvd::test::Contains("hvd.elastic: refusing the snapshot '" + path + "': " + why));
    CHECK_THAT(r.status().message(), hvd::test::Contains("nothing in it is used"));
  };
  const std::string not_verified = "its HMAC-SHA256 does not verify with this job's key";
  std::string bit = good;
  bit[kHeader + 50] ^= 0x01;  // one payload bit
  refused(bit, test_key(), not_verified);
  std::string id = good;
  id[8] ^= 0x40;  // the commit id: 3 -> 67, payload intact
  refused(id, test_key(), not_verified);
  std::string world = good;
  world[16] = 9;
  refused(world, test_key(), not_verified);
  std::string mac = good;
  mac[40] ^= 0x80;
  refused(mac, test_key(), not_verified);
  SnapshotKey other = test_key();
  other[31] ^= 1;
  refused(good, other, not_verified);
  // The payload's length in the header changed together with the file: still not authentic.
  std::string longer = good + "z";
  longer[24] = 101;
  refused(longer, test_key(), not_verified);
  refused(good.substr(0, good.size() - 1), test_key(),
          "it is truncated: its header announces 100 payload bytes, the file holds 99");
  refused(good + "z", test_key(),
          "it is longer than its header: its header announces 100 payload bytes, the file holds "
          "101");
  refused(good.substr(0, 20), test_key(), "it is truncated: 20 bytes, shorter than the 64-byte");
  refused("", test_key(), "it is not an hvd snapshot (0 bytes");
  refused(std::string(200, '\0'), test_key(), "it is not an hvd snapshot (200 bytes");
  // Format 1 (an older hvd: CRC-32, no key): refused whatever its CRC says.
  const std::string v1 =
      std::string("HVDSNAP1") + le(3, 8) + le(2, 8) + le(4, 8) + le(0x12345678, 4) + "abcd";
  refused(v1, test_key(), "it is a format-1 snapshot (\"HVDSNAP1\", CRC-32");
}

TEST_CASE("write_snapshot replaces the host's file atomically and read_snapshot reads it",
          "[unit]") {
  const std::string dir = temp_dir();  // the wrapper creates it (write_snapshot never does)
  const auto none = read_snapshot(dir, test_key());
  REQUIRE(none.ok());
  CHECK_FALSE(none.value());
  REQUIRE(write_snapshot(dir, {1, 2, "first"}, test_key()).ok());
  REQUIRE(write_snapshot(dir, {2, 2, std::string(1 << 20, 'q')}, test_key()).ok());
  const auto got = read_snapshot(dir, test_key());
  REQUIRE(got.ok());
  REQUIRE(got.value());
  CHECK(got.value()->commit_id == 2);
  CHECK(got.value()->payload == std::string(1 << 20, 'q'));
  CHECK(slurp(snapshot_path(dir)) ==
        encode_snapshot({2, 2, std::string(1 << 20, 'q')}, test_key()).value());
  struct stat st;
  REQUIRE(::stat(snapshot_path(dir).c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  // A writer killed before its rename leaves a temporary: the live file is untouched, and
  // remove_stale_temporaries deletes only the temporary.
  spit(snapshot_path(dir) + ".tmp.99999", "half a snap");
  CHECK(read_snapshot(dir, test_key()).value()->commit_id == 2);
  remove_stale_temporaries(dir);
  CHECK(::stat((snapshot_path(dir) + ".tmp.99999").c_str(), &st) != 0);
  CHECK(read_snapshot(dir, test_key()).value()->commit_id == 2);
  // A damaged file is an error that names it, not "no snapshot".
  std::string bytes = slurp(snapshot_path(dir));
  bytes[kHeader + 40] ^= 1;
  spit(snapshot_path(dir), bytes);
  const auto damaged = read_snapshot(dir, test_key());
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.status().code() == hvd::StatusCode::kElasticState);
  CHECK_THAT(damaged.status().message(),
             hvd::test::Contains("'" + snapshot_path(dir) + "': its HMAC-SHA256 does not verify"));
}

TEST_CASE("the job's key comes from HVD_ELASTIC_KEY; without it the store refuses to work",
          "[unit]") {
  const std::string dir = temp_dir();
  ::setenv("HVD_ELASTIC_KEY", kKeyHex, 1);
  REQUIRE(write_snapshot(dir, {4, 1, "mine"}).ok());
  CHECK(read_snapshot(dir, test_key()).value()->payload == "mine");  // the same key
  CHECK(read_snapshot(dir).value()->commit_id == 4);
  ::unsetenv("HVD_ELASTIC_KEY");
  const std::string want =
      "HVD_ELASTIC_STATE_DIR is set but HVD_ELASTIC_KEY is not: elastic state is hvdrun's; run "
      "under hvdrun --min-np";
  const hvd::Status w = write_snapshot(dir, {5, 1, "x"});
  CHECK(w.code() == hvd::StatusCode::kElasticState);
  CHECK_THAT(w.message(), hvd::test::Contains(want));
  const auto r = read_snapshot(dir);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), hvd::test::Contains(want));
  ::setenv("HVD_ELASTIC_KEY", "not a key", 1);
  CHECK_THAT(read_snapshot(dir).status().message(),
             hvd::test::Contains("HVD_ELASTIC_KEY is not 64 hexadecimal digits"));
  ::unsetenv("HVD_ELASTIC_KEY");
  CHECK(read_snapshot(dir, test_key()).value()->commit_id == 4);  // nothing was overwritten
}

TEST_CASE("a state directory that is not the job's private directory is refused", "[unit]") {
  auto refused_read_and_write = [](const std::string& dir, const std::string& why) {
    const auto r = read_snapshot(dir, test_key());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == hvd::StatusCode::kElasticState);
    CHECK_THAT(
        r.status().message(),
        hvd::test::Contains("hvd.elastic: refusing the state directory: '" + dir + "' " + why));
    const hvd::Status w = write_snapshot(dir, {9, 1, "p"}, test_key());
    CHECK(w.code() == hvd::StatusCode::kElasticState);
    CHECK_THAT(w.message(),
               hvd::test::Contains("refusing the state directory: '" + dir + "' " + why));
  };
  SECTION("open to others (mode 0755), holding a genuine snapshot") {
    const std::string dir = temp_dir();
    REQUIRE(write_snapshot(dir, {1, 1, "p"}, test_key()).ok());
    REQUIRE(::chmod(dir.c_str(), 0755) == 0);
    refused_read_and_write(dir, "has mode 0755, not 0700");
    spit(snapshot_path(dir) + ".tmp.1", "x");
    remove_stale_temporaries(dir);  // touches nothing in a refused directory
    struct stat st;
    CHECK(::stat((snapshot_path(dir) + ".tmp.1").c_str(), &st) == 0);
  }
  SECTION("a symbolic link to a private directory") {
    const std::string real = temp_dir();
    REQUIRE(write_snapshot(real, {1, 1, "p"}, test_key()).ok());
    const std::string link = temp_dir() + "/state";
    REQUIRE(::symlink(real.c_str(), link.c_str()) == 0);
    refused_read_and_write(link, "is a symbolic link");
  }
  SECTION("owned by another user (uid 65534)") {
    if (::geteuid() != 0) {
      WARN("skipped: chown to another uid needs root");
      return;
    }
    const std::string dir = temp_dir();
    REQUIRE(write_snapshot(dir, {1, 1, "p"}, test_key()).ok());
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    refused_read_and_write(dir, "belongs to uid 65534, not to this job's uid 0");
  }
  SECTION("missing") {
    const std::string dir = temp_dir() + "/hvd-elastic-removed";
    const auto r = read_snapshot(dir, test_key());
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), hvd::test::Contains("'" + dir + "' cannot be examined"));
  }
}

TEST_CASE("a snapshot file that is a link, not a regular file or another user's is refused",
          "[unit]") {
  const std::string dir = temp_dir();
  const std::string path = snapshot_path(dir);
  SECTION("a symbolic link to a genuine snapshot") {
    const std::string elsewhere = temp_dir();
    REQUIRE(write_snapshot(elsewhere, {8, 1, "genuine"}, test_key()).ok());
    REQUIRE(::symlink(snapshot_path(elsewhere).c_str(), path.c_str()) == 0);
    const auto r = read_snapshot(dir, test_key());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == hvd::StatusCode::kElasticState);
    CHECK_THAT(r.status().message(),
               hvd::test::Contains("refusing the snapshot '" + path + "': it is a symbolic link"));
    // A commit replaces the link itself (rename), never writes through it.
    REQUIRE(write_snapshot(dir, {9, 1, "new"}, test_key()).ok());
    CHECK(read_snapshot(elsewhere, test_key()).value()->payload == "genuine");
    CHECK(read_snapshot(dir, test_key()).value()->payload == "new");
  }
  SECTION("a FIFO: refused without waiting for a writer") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    const auto r = read_snapshot(dir, test_key());
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), hvd::test::Contains("it is not a regular file"));
  }
  SECTION("a genuine snapshot owned by uid 65534") {
    if (::geteuid() != 0) {
      WARN("skipped: chown to another uid needs root");
      return;
    }
    REQUIRE(write_snapshot(dir, {1, 1, "p"}, test_key()).ok());
    REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
    CHECK_THAT(read_snapshot(dir, test_key()).status().message(),
               hvd::test::Contains("'" + path + "': it belongs to uid 65534"));
  }
  SECTION("a planted link at the temporary's name: the commit fails, the target is untouched") {
    const std::string target = temp_dir() + "/victim";
    spit(target, "precious");
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    REQUIRE(::symlink(target.c_str(), tmp.c_str()) == 0);
    const hvd::Status st = write_snapshot(dir, {1, 1, "p"}, test_key());
    CHECK(st.code() == hvd::StatusCode::kElasticState);
    CHECK_THAT(st.message(), hvd::test::Contains("cannot create the snapshot '" + tmp + "'"));
    CHECK(slurp(target) == "precious");
  }
}

TEST_CASE("the progress file is never opened through a planted link", "[unit]") {
  const std::string target = temp_dir() + "/victim";
  spit(target, "precious");
  const std::string link = temp_dir() + "/progress.0";
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  ProgressReporter reporter(link, [] { return std::optional<uint64_t>(); });
  const hvd::Status st = reporter.start();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), hvd::test::Contains("'" + link + "'"));
  reporter.report();
  CHECK(slurp(target) == "precious");
}

TEST_CASE("write_snapshot never creates the state directory", "[unit]") {
  // The wrapper removed the job's directory (hvdrun lost) while its rank was committing: the
  // commit fails instead of bringing the directory back as a leftover in /dev/shm.
  const std::string dir = temp_dir() + "/hvd-elastic-removed";
  const hvd::Status st = write_snapshot(dir, {1, 1, "p"}, test_key());
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == hvd::StatusCode::kElasticState);
  CHECK_THAT(st.message(), hvd::test::Contains("'" + dir + "' does not exist"));
  struct stat sb;
  CHECK(::stat(dir.c_str(), &sb) != 0);
  CHECK(errno == ENOENT);
}

TEST_CASE("a commit that does not fit says where, how much and what to do", "[unit]") {
  // A real full file system: a 256 KiB tmpfs (mounting needs root).
  const std::string dir = temp_dir();
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k,mode=0700") != 0) {
    WARN("skipped: cannot mount a small tmpfs here (" << std::strerror(errno) << ")");
    return;
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir};
  REQUIRE(write_snapshot(dir, {1, 1, std::string(100 << 10, 'a')}, test_key()).ok());
  const hvd::Status st = write_snapshot(dir, {2, 1, std::string(1 << 20, 'b')}, test_key());
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == hvd::StatusCode::kElasticState);
  const std::string& m = st.message();
  CHECK_THAT(m, hvd::test::Contains("cannot write the snapshot '" + snapshot_path(dir) + ".tmp."));
  CHECK_THAT(m,
             hvd::test::Contains("(" + std::to_string((1 << 20) + kHeader) + " bytes, 1.0 MiB)"));
  CHECK_THAT(m, hvd::test::Contains(std::strerror(ENOSPC)));
  CHECK_THAT(m, hvd::test::Contains("the state directory '" + dir + "' has "));
  CHECK_THAT(m, hvd::test::Contains(" KiB) free"));  // with the failed temporary removed
  CHECK_THAT(m, hvd::test::Contains("hvdrun --elastic-state-dir DIR"));
  // The failed commit left the previous snapshot and no temporary.
  CHECK(read_snapshot(dir, test_key()).value()->commit_id == 1);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  CHECK(entries == 1);
}

TEST_CASE("write_snapshot into an impossible directory fails naming the path", "[unit]") {
  const std::string file = temp_dir() + "/plain_file";
  spit(file, "x");
  const hvd::Status st = write_snapshot(file + "/sub", {1, 1, "p"}, test_key());
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), hvd::test::Contains(file + "/sub"));
}

TEST_CASE("the newest commit wins, sent by the lowest rank holding it", "[unit]") {
  const RestorePlan p = plan_restore({3, 5, -1, 5});
  CHECK(p.commit_id == 5);
  CHECK(p.root == 1);
  CHECK(plan_restore({-1, -1, 0}).root == 2);
  CHECK(plan_restore({-1, -1}).root == -1);
  CHECK(plan_restore({-1, -1}).commit_id == -1);
  CHECK(plan_restore({}).root == -1);
}

TEST_CASE("hvdrun's host-change file reads as <seq> <bits>, anything else as none", "[unit]") {
  const auto u = parse_host_update("12 2\n");
  REQUIRE(u);
  CHECK(u->seq == 12);
  CHECK(u->bits == 2);
  CHECK_FALSE(parse_host_update(""));
  CHECK_FALSE(parse_host_update("12"));  // a write caught half done
  CHECK_FALSE(parse_host_update("12 2 7"));
  CHECK_FALSE(parse_host_update("x 2"));
  const std::string path = temp_dir() + "/hosts";
  CHECK_FALSE(read_host_update(path));
  spit(path, "3 1\n");
  REQUIRE(read_host_update(path));
  CHECK(read_host_update(path)->seq == 3);
  // Through a planted link: never followed (O_NOFOLLOW).
  const std::string link = temp_dir() + "/hosts";
  REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
  CHECK_FALSE(read_host_update(link));
}

TEST_CASE("ElasticConfig reads the elastic variables hvdrun sets", "[unit]") {
  std::map<std::string, std::string> env{{"HVD_ELASTIC_STATE_DIR", "/dev/shm/x"},
                                         {"HVD_ELASTIC_COMPLETION_FILE", "/tmp/done"},
                                         {"HVD_ELASTIC_HOSTS_FILE", "/tmp/hosts"},
                                         {"HVD_ELASTIC_PROGRESS_FILE", "/tmp/progress"},
                                         {"HVD_ELASTIC_KEY", kKeyHex}};
  const auto c =
      hvd::core::ElasticConfig::from_env([&](const std::string& n) -> std::optional<std::string> {
        auto it = env.find(n);
        if (it == env.end()) return std::nullopt;
        return it->second;
      });
  CHECK(c.state_dir == "/dev/shm/x");
  CHECK(c.completion_file == "/tmp/done");
  CHECK(c.hosts_file == "/tmp/hosts");
  CHECK(c.progress_file == "/tmp/progress");
  CHECK(c.key == kKeyHex);
  const auto none =
      hvd::core::ElasticConfig::from_env([](const std::string&) { return std::nullopt; });
  CHECK(none.state_dir.empty());
  CHECK(none.key.empty());
}
