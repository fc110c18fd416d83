// SPDX-License-Identifier: Apache-2.0
// The elastic snapshot file (format, atomic replacement, damage), the resume plan and the
// elastic variables (hvd/optim/elastic_store.h). The Sampler's tests are in
// test/torch/test_elastic_sampler.cc (its shuffle is libtorch's randperm).
#include "hvd/optim/elastic_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "hvd/core/elastic_config.h"
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

// Little-endian bytes of v, written independently of the library.
std::string le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

}  // namespace

TEST_CASE("crc32 is zlib's CRC-32", "[unit]") {
  CHECK(crc32("") == 0u);
  CHECK(crc32("123456789") == 0xCBF43926u);
  CHECK(crc32("The quick brown fox jumps over the lazy dog") == 0x414FA339u);
}

TEST_CASE("a snapshot's bytes are magic, id, world size, length, CRC-32, payload", "[unit]") {
  const std::string payload("ab\0c", 4);
  const std::string expect =
      std::string("HVDSNAP1") + le(7, 8) + le(4, 8) + le(4, 8) + le(crc32(payload), 4) + payload;
  CHECK(encode_snapshot({7, 4, payload}) == expect);
  const auto back = decode_snapshot(expect);
  REQUIRE(back);
  CHECK(back->commit_id == 7);
  CHECK(back->world_size == 4);
  CHECK(back->payload == payload);
  const auto empty = decode_snapshot(encode_snapshot({1, 2, ""}));
  REQUIRE(empty);
  CHECK(empty->payload.empty());
}

TEST_CASE("a damaged, truncated or foreign snapshot decodes as none", "[unit]") {
  const std::string good = encode_snapshot({3, 2, std::string(100, 'x')});
  std::string flipped = good;
  flipped.back() = 'y';
  CHECK_FALSE(decode_snapshot(flipped));
  CHECK_FALSE(decode_snapshot(good.substr(0, good.size() - 1)));
  CHECK_FALSE(decode_snapshot(good.substr(0, 20)));
  CHECK_FALSE(decode_snapshot(good + "z"));
  std::string magic = good;
  magic[7] = '2';
  CHECK_FALSE(decode_snapshot(magic));
}

TEST_CASE("write_snapshot replaces the host's file atomically and read_snapshot reads it",
          "[unit]") {
  const std::string dir = temp_dir();  // the wrapper creates it (write_snapshot never does)
  CHECK_FALSE(read_snapshot(dir));
  REQUIRE(write_snapshot(dir, {1, 2, "first"}).ok());
  REQUIRE(write_snapshot(dir, {2, 2, std::string(1 << 20, 'q')}).ok());
  const auto got = read_snapshot(dir);
  REQUIRE(got);
  CHECK(got->commit_id == 2);
  CHECK(got->payload == std::string(1 << 20, 'q'));
  CHECK(slurp(snapshot_path(dir)) == encode_snapshot({2, 2, std::string(1 << 20, 'q')}));
  // A writer killed before its rename leaves a temporary: the live file is untouched, and
  // remove_stale_temporaries deletes only the temporary.
  spit(snapshot_path(dir) + ".tmp.99999", "half a snap");
  CHECK(read_snapshot(dir)->commit_id == 2);
  remove_stale_temporaries(dir);
  struct stat st;
  CHECK(::stat((snapshot_path(dir) + ".tmp.99999").c_str(), &st) != 0);
  CHECK(read_snapshot(dir)->commit_id == 2);
  // Damage reads as none.
  std::string bytes = slurp(snapshot_path(dir));
  bytes[40] ^= 1;
  spit(snapshot_path(dir), bytes);
  CHECK_FALSE(read_snapshot(dir));
}

TEST_CASE("write_snapshot never creates the state directory", "[unit]") {
  // The wrapper removed the job's directory (hvdrun lost) while its rank was committing: the
  // commit fails instead of bringing the directory back as a leftover in /dev/shm.
  const std::string dir = temp_dir() + "/hvd-elastic-removed";
  const hvd::Status st = write_snapshot(dir, {1, 1, "p"});
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), hvd::test::Contains("'" + dir + "' does not exist"));
  struct stat sb;
  CHECK(::stat(dir.c_str(), &sb) != 0);
  CHECK(errno == ENOENT);
}

TEST_CASE("write_snapshot into an impossible directory fails naming the path", "[unit]") {
  const std::string file = temp_dir() + "/plain_file";
  spit(file, "x");
  const hvd::Status st = write_snapshot(file + "/sub", {1, 1, "p"});
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
}

TEST_CASE("ElasticConfig reads the elastic variables hvdrun sets", "[unit]") {
  std::map<std::string, std::string> env{{"HVD_ELASTIC_STATE_DIR", "/dev/shm/x"},
                                         {"HVD_ELASTIC_COMPLETION_FILE", "/tmp/done"},
                                         {"HVD_ELASTIC_HOSTS_FILE", "/tmp/hosts"},
                                         {"HVD_ELASTIC_PROGRESS_FILE", "/tmp/progress"}};
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
  const auto none =
      hvd::core::ElasticConfig::from_env([](const std::string&) { return std::nullopt; });
  CHECK(none.state_dir.empty());
}
