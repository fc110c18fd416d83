// SPDX-License-Identifier: Apache-2.0
// Host buffers that MPI moves between processes, backed by transparent huge pages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvd::core {

/// Host memory for the buffers hvd's collectives send and receive from (the executor's fusion
/// and staging buffers, the optimizer's gradient buckets). A mapping of its own that starts on
/// a 2 MiB boundary, advised MADV_HUGEPAGE where it holds a whole 2 MiB page: Open MPI's
/// shared-memory transport copies between processes page by page (CMA pins the peer's pages),
/// and on this project's measurements a huge-page buffer halves the time of a 4 MiB or 16 MiB
/// allreduce at np 2 (docs/performance.md, "Huge pages"). Where the kernel has transparent huge
/// pages off (or with `HVD_HUGE_PAGES=0`, which init() passes to set_huge_pages()), the
/// mapping is plain 4 KiB pages: nothing fails.
///
/// Length: `bytes` rounded up to 4 KiB, except that 1 MiB to 2 MiB rounds up to one whole huge
/// page (never more than the buffer itself unused); at least `min_bytes` when given.
class HostBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  HostBuffer() = default;
  explicit HostBuffer(size_t bytes, size_t min_bytes = 0);
  ~HostBuffer();
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  uint8_t* data() const { return data_; }
  /// The usable length (at least what was asked for; zero-filled when new).
  size_t size() const { return size_; }
  /// Grows to at least `bytes`, keeping the contents (nothing happens when large enough).
  void grow(size_t bytes, size_t min_bytes = 0);
  /// Frees the mapping (size() becomes 0).
  void reset();

  /// The mapping behind HostBuffer, for owners that free it themselves (a tensor's deleter):
  /// returns the start and sets `*length` to what free_mapping() must be given. Throws
  /// std::bad_alloc when the kernel refuses.
  static uint8_t* map(size_t bytes, size_t min_bytes, size_t* length);
  static void free_mapping(void* p, size_t length);
  /// The length map() gives for `bytes` (pure; for tests).
  static size_t mapped_length(size_t bytes, size_t min_bytes = 0);
  /// Whether map() aligns and advises huge pages (default on; init() sets Config::huge_pages).
  static bool huge_pages_enabled();
  static void set_huge_pages(bool on);

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hvd::core
