// SPDX-License-Identifier: Apache-2.0
#include "hvd/core/host_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

namespace hvd::core {

namespace {
constexpr size_t kPage = size_t{4} << 10;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

size_t HostBuffer::mapped_length(size_t bytes, size_t min_bytes) {
  size_t n = std::max(bytes, min_bytes);
  if (n >= kHugePage / 2 && n < kHugePage) n = kHugePage;
  return round_up(std::max<size_t>(n, 1), kPage);
}

namespace {
std::atomic<bool> g_huge_pages{true};
}  // namespace

bool HostBuffer::huge_pages_enabled() { return g_huge_pages.load(std::memory_order_relaxed); }

void HostBuffer::set_huge_pages(bool on) { g_huge_pages.store(on, std::memory_order_relaxed); }

uint8_t* HostBuffer::map(size_t bytes, size_t min_bytes, size_t* length) {
  const size_t len = mapped_length(bytes, min_bytes);
  const bool huge = len >= kHugePage && huge_pages_enabled();
  // Map a huge page more than needed, then unmap what lies before the first 2 MiB boundary
  // and after the buffer's end.
  const size_t span = huge ? len + kHugePage : len;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* start = static_cast<uint8_t*>(p);
  if (huge) {
    const auto addr = reinterpret_cast<uintptr_t>(start);
    const size_t lead = round_up(addr, kHugePage) - addr;
    if (lead) munmap(start, lead);
    start += lead;
    const size_t tail = span - lead - len;
    if (tail) munmap(start + len, tail);
    // Advice only: a kernel without transparent huge pages (or with them off) says EINVAL and
    // the buffer stays in 4 KiB pages.
    (void)madvise(start, len - len % kHugePage, MADV_HUGEPAGE);
  }
  *length = len;
  return start;
}

void HostBuffer::free_mapping(void* p, size_t length) {
  if (p) munmap(p, length);
}

HostBuffer::HostBuffer(size_t bytes, size_t min_bytes) {
  if (bytes == 0 && min_bytes == 0) return;
  data_ = map(bytes, min_bytes, &size_);
}

HostBuffer::~HostBuffer() { reset(); }

HostBuffer::HostBuffer(HostBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void HostBuffer::grow(size_t bytes, size_t min_bytes) {
  if (bytes <= size_ && data_) return;
  HostBuffer bigger(bytes, min_bytes);
  if (size_) std::memcpy(bigger.data_, data_, size_);
  *this = std::move(bigger);
}

void HostBuffer::reset() {
  free_mapping(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace hvd::core
