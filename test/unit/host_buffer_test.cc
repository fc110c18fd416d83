// SPDX-License-Identifier: Apache-2.0
// [unit] HostBuffer: lengths (4 KiB pages; 1-2 MiB rounded up to one huge page), 2 MiB-aligned
// starts for buffers of a huge page or more, zero-filled memory, growth keeping the contents,
// the huge-page advice the kernel recorded for the mapping.
#include "hvd/core/host_buffer.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "hvd_catch.h"

namespace hvd::core {
namespace {

constexpr size_t kKi = 1024, kMi = 1024 * 1024;

/// The VmFlags line of /proc/self/smaps for the mapping that starts at `p` ("" if none).
std::string vm_flags(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool ours = false;
  const auto want = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      ours = lo == want;
      continue;
    }
    if (ours && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

}  // namespace

TEST_CASE("HostBuffer lengths: whole 4 KiB pages, 1-2 MiB one whole huge page", "[unit]") {
  CHECK(HostBuffer::mapped_length(1) == 4 * kKi);
  CHECK(HostBuffer::mapped_length(4 * kKi + 1) == 8 * kKi);
  CHECK(HostBuffer::mapped_length(256 * kKi) == 256 * kKi);
  CHECK(HostBuffer::mapped_length(kMi - 1) == kMi);
  CHECK(HostBuffer::mapped_length(kMi) == 2 * kMi);
  CHECK(HostBuffer::mapped_length(2 * kMi - 1) == 2 * kMi);
  CHECK(HostBuffer::mapped_length(2 * kMi + 1) == 2 * kMi + 4 * kKi);
  CHECK(HostBuffer::mapped_length(5 * kMi) == 5 * kMi);
  CHECK(HostBuffer::mapped_length(16, 2 * kMi) == 2 * kMi);
  CHECK(HostBuffer::mapped_length(3 * kMi, 2 * kMi) == 3 * kMi);
}

TEST_CASE("HostBuffer maps zeroed memory, huge ones on a 2 MiB boundary, advised", "[unit]") {
  const bool was = HostBuffer::huge_pages_enabled();
  const bool on = GENERATE(true, false);  // false: HVD_HUGE_PAGES=0
  CAPTURE(on);
  HostBuffer::set_huge_pages(on);
  int looked_up = 0;
  for (size_t bytes : {size_t{100}, 300 * kKi, kMi + 5, 2 * kMi, 5 * kMi + 3}) {
    CAPTURE(bytes);
    HostBuffer b(bytes);
    REQUIRE(b.data() != nullptr);
    CHECK(b.size() == HostBuffer::mapped_length(bytes));
    size_t nonzero = 0;
    for (size_t i = 0; i < b.size(); ++i) nonzero += b.data()[i] != 0;
    CHECK(nonzero == 0);
    b.data()[b.size() - 1] = 7;  // the whole length is writable
    const bool huge = b.size() >= HostBuffer::kHugePage && on;
    if (huge) CHECK(reinterpret_cast<uintptr_t>(b.data()) % HostBuffer::kHugePage == 0);
    // The kernel lists the advice as "hg" in the mapping's flags (the mapping may have merged
    // with a neighbour; then it starts elsewhere and the flags are not looked up).
    const std::string flags = vm_flags(b.data());
    if (!flags.empty()) {
      CAPTURE(flags);
      CHECK((flags.find(" hg") != std::string::npos) == huge);  // off: never advised
      looked_up += huge;
    }
  }
  // A huge buffer's mapping is its own (its flags differ from its neighbours'): found.
  if (on) CHECK(looked_up > 0);
  HostBuffer::set_huge_pages(was);
}

TEST_CASE("HostBuffer grows keeping its contents, resets, and moves", "[unit]") {
  HostBuffer b;
  CHECK(b.size() == 0);
  CHECK(b.data() == nullptr);
  b.grow(10);
  REQUIRE(b.size() == 4 * kKi);
  for (int i = 0; i < 10; ++i) b.data()[i] = static_cast<uint8_t>(i + 1);
  uint8_t* before = b.data();
  b.grow(100);  // fits: same memory
  CHECK(b.data() == before);
  b.grow(3 * kMi);
  REQUIRE(b.size() == 3 * kMi);
  for (int i = 0; i < 10; ++i) CHECK(b.data()[i] == i + 1);
  CHECK(b.data()[3 * kMi - 1] == 0);
  HostBuffer moved(std::move(b));
  CHECK(b.size() == 0);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  CHECK(moved.size() == 3 * kMi);
  CHECK(moved.data()[9] == 10);
  moved.reset();
  CHECK(moved.size() == 0);
  CHECK(moved.data() == nullptr);
}

TEST_CASE("HostBuffer::map's memory outlives the object through free_mapping", "[unit]") {
  size_t length = 0;
  uint8_t* p = HostBuffer::map(4 * kMi, 0, &length);
  REQUIRE(p != nullptr);
  CHECK(length == 4 * kMi);
  p[0] = 1;
  p[length - 1] = 2;
  CHECK(p[0] + p[length - 1] == 3);
  HostBuffer::free_mapping(p, length);
}

}  // namespace hvd::core
