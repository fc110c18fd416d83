// SPDX-License-Identifier: Apache-2.0
// A hash that is the same on every rank and every build (std::hash is neither guaranteed).
#pragma once

#include <cstdint>
#include <string_view>

namespace hvd::core {

inline constexpr uint64_t kFnv1aStart = 14695981039346656037ULL;
inline constexpr uint64_t kFnv1aPrime = 1099511628211ULL;

/// FNV-1a of `bytes`, continuing from `h` (kFnv1aStart for a fresh hash): hashing two strings
/// in turn equals hashing their concatenation.
inline uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnv1aStart) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnv1aPrime;
  return h;
}

}  // namespace hvd::core
