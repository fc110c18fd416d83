// SPDX-License-Identifier: Apache-2.0
// ResponseCache: lookups, LRU eviction, bit reuse and a disabled cache.
#include "hvd/core/cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;

namespace {

Request req(const std::string& name, std::vector<int64_t> shape = {4}) {
  Request r;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

uint32_t bit_of(const ResponseCache& c, const std::string& name) {
  uint32_t bit = 9999;
  REQUIRE(c.lookup(req(name), &bit) == ResponseCache::Lookup::kHit);
  return bit;
}

/// One pass over the names prefix0..prefix<n-1> as a controller uses the cache (a hit is
/// touched, a miss is put); returns the misses.
int pass_misses(ResponseCache& c, const std::string& prefix, int n) {
  int misses = 0;
  for (int i = 0; i < n; ++i) {
    const Request r = req(prefix + std::to_string(i));
    uint32_t bit = 0;
    if (c.lookup(r, &bit) == ResponseCache::Lookup::kHit) {
      c.touch(bit);
    } else {
      ++misses;
      (void)c.put(r);
    }
  }
  return misses;
}

}  // namespace

TEST_CASE("cache lookup is a miss, then a hit with the same parameters", "[unit]") {
  ResponseCache c(4);
  uint32_t bit = 9999;
  REQUIRE(c.lookup(req("a"), &bit) == ResponseCache::Lookup::kMiss);
  REQUIRE_FALSE(c.put(req("a")).has_value());
  REQUIRE(c.size() == 1);
  REQUIRE(c.lookup(req("a"), &bit) == ResponseCache::Lookup::kHit);
  REQUIRE(bit == 0);
  REQUIRE(c.contains(0));
  REQUIRE(c.at(0).name == "a");
}

TEST_CASE("cache lookup ignores the rank", "[unit]") {
  ResponseCache c(4);
  Request r0 = req("a");
  r0.rank = 0;
  (void)c.put(r0);
  Request r3 = req("a");
  r3.rank = 3;
  uint32_t bit = 9999;
  REQUIRE(c.lookup(r3, &bit) == ResponseCache::Lookup::kHit);
}

TEST_CASE("cache lookup with different parameters is a mismatch on the cached bit", "[unit]") {
  ResponseCache c(4);
  (void)c.put(req("a"));
  (void)c.put(req("b"));
  uint32_t bit = 9999;
  REQUIRE(c.lookup(req("b", {5}), &bit) == ResponseCache::Lookup::kMismatch);
  REQUIRE(bit == 1);
  Request other_dtype = req("b");
  other_dtype.dtype = DataType::kInt32;
  REQUIRE(c.lookup(other_dtype, &bit) == ResponseCache::Lookup::kMismatch);
}

TEST_CASE("bits are handed out lowest first", "[unit]") {
  ResponseCache c(3);
  for (const char* n : {"a", "b", "c"}) (void)c.put(req(n));
  REQUIRE(bit_of(c, "a") == 0);
  REQUIRE(bit_of(c, "b") == 1);
  REQUIRE(bit_of(c, "c") == 2);
}

TEST_CASE("a full cache evicts the least recently used entry", "[unit]") {
  ResponseCache c(3);
  for (const char* n : {"a", "b", "c"}) (void)c.put(req(n));
  c.touch(bit_of(c, "a"));  // LRU order now (oldest first): b, c, a
  auto ev = c.put(req("d"));
  REQUIRE(ev == std::optional<uint32_t>(1));  // b's bit
  uint32_t bit = 9999;
  REQUIRE(c.lookup(req("b"), &bit) == ResponseCache::Lookup::kMiss);
  REQUIRE(bit_of(c, "d") == 1);  // the freed bit is reused
  REQUIRE(c.size() == 3);
  ev = c.put(req("e"));  // oldest now c
  REQUIRE(ev == std::optional<uint32_t>(2));
  ev = c.put(req("f"));  // then a
  REQUIRE(ev == std::optional<uint32_t>(0));
  REQUIRE(bit_of(c, "f") == 0);
}

TEST_CASE("re-putting a cached name replaces its parameters in place and refreshes it", "[unit]") {
  ResponseCache c(2);
  (void)c.put(req("a"));
  (void)c.put(req("b"));
  REQUIRE_FALSE(c.put(req("a", {9})).has_value());
  REQUIRE(c.size() == 2);
  uint32_t bit = 9999;
  REQUIRE(c.lookup(req("a", {9}), &bit) == ResponseCache::Lookup::kHit);
  REQUIRE(bit == 0);
  REQUIRE(c.put(req("c")) == std::optional<uint32_t>(1));  // b was least recent
}

TEST_CASE("erase frees the bit and the lowest free bit is reused first", "[unit]") {
  ResponseCache c(4);
  for (const char* n : {"a", "b", "c", "d"}) (void)c.put(req(n));
  c.erase(2);
  c.erase(0);
  REQUIRE_FALSE(c.contains(0));
  REQUIRE_FALSE(c.contains(2));
  REQUIRE(c.size() == 2);
  REQUIRE_FALSE(c.put(req("x")).has_value());
  REQUIRE(bit_of(c, "x") == 0);
  REQUIRE_FALSE(c.put(req("y")).has_value());
  REQUIRE(bit_of(c, "y") == 2);
  c.erase(2);
  c.erase(2);  // erasing a free bit is harmless
  REQUIRE(c.size() == 3);
  REQUIRE_FALSE(c.put(req("z")).has_value());
  REQUIRE(bit_of(c, "z") == 2);
}

TEST_CASE("erased entries leave the LRU order", "[unit]") {
  ResponseCache c(2);
  (void)c.put(req("a"));
  (void)c.put(req("b"));
  c.erase(0);                                              // a gone
  REQUIRE_FALSE(c.put(req("c")).has_value());              // takes bit 0, no eviction
  REQUIRE(c.put(req("d")) == std::optional<uint32_t>(1));  // b is oldest
}

TEST_CASE("at() on a free bit throws", "[unit]") {
  ResponseCache c(2);
  REQUIRE_THROWS_AS(c.at(0), std::out_of_range);
  REQUIRE_THROWS_AS(c.at(5), std::out_of_range);
  REQUIRE_FALSE(c.contains(5));
}

TEST_CASE("a cache of capacity 0 stores nothing", "[unit]") {
  ResponseCache c(0);
  REQUIRE(c.num_words() == 0);
  REQUIRE_FALSE(c.put(req("a")).has_value());
  REQUIRE(c.size() == 0);
  uint32_t bit = 9999;
  REQUIRE(c.lookup(req("a"), &bit) == ResponseCache::Lookup::kMiss);
  ResponseCache negative(-5);
  REQUIRE(negative.capacity() == 0);
}

TEST_CASE("num_words covers every bit", "[unit]") {
  REQUIRE(ResponseCache(1).num_words() == 1);
  REQUIRE(ResponseCache(64).num_words() == 1);
  REQUIRE(ResponseCache(65).num_words() == 2);
  REQUIRE(ResponseCache(1024).num_words() == 16);
}

TEST_CASE("cache lookup with a hint: the hinted bit when it still holds the name", "[unit]") {
  ResponseCache c(4);
  (void)c.put(req("a"));
  (void)c.put(req("b"));
  uint32_t bit = 9999;
  REQUIRE(c.lookup(req("b"), 1, &bit) == ResponseCache::Lookup::kHit);
  REQUIRE(bit == 1);
  // A stale hint (another name there, out of range, none) falls back to the name.
  REQUIRE(c.lookup(req("b"), 0, &bit) == ResponseCache::Lookup::kHit);
  REQUIRE(bit == 1);
  REQUIRE(c.lookup(req("b"), 77, &bit) == ResponseCache::Lookup::kHit);
  REQUIRE(c.lookup(req("b"), -1, &bit) == ResponseCache::Lookup::kHit);
  REQUIRE(bit == 1);
  // Different parameters on the hinted bit: a mismatch there.
  REQUIRE(c.lookup(req("b", {9}), 1, &bit) == ResponseCache::Lookup::kMismatch);
  REQUIRE(bit == 1);
  // Evicted: a miss even with the old hint.
  c.erase(1);
  REQUIRE(c.lookup(req("b"), 1, &bit) == ResponseCache::Lookup::kMiss);
}

TEST_CASE("eviction follows an independent LRU model through many touches and erasures", "[unit]") {
  // The model: names oldest first in a list; the cache must evict its front every time.
  ResponseCache c(64, 64);
  std::vector<std::string> model;
  auto use = [&](const std::string& n) {
    model.erase(std::remove(model.begin(), model.end(), n), model.end());
    model.push_back(n);
  };
  uint64_t seed = 7;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int step = 0; step < 5000; ++step) {
    const uint64_t r = next() >> 33;
    const std::string name = "n" + std::to_string(r % 200);
    uint32_t bit = 0;
    if (r % 7 == 0 && c.lookup(req(name), &bit) == ResponseCache::Lookup::kHit) {
      c.erase(bit);
      model.erase(std::remove(model.begin(), model.end(), name), model.end());
    } else if (c.lookup(req(name), &bit) == ResponseCache::Lookup::kHit) {
      c.touch(bit);
      use(name);
    } else {
      const bool full = model.size() == 64;
      const std::string victim = full ? model.front() : "";
      uint32_t victim_bit = 9999;
      if (full) victim_bit = bit_of(c, victim);
      auto ev = c.put(req(name));
      INFO("step " << step << " put " << name);
      REQUIRE(ev.has_value() == full);
      if (full) {
        REQUIRE(*ev == victim_bit);
        model.erase(model.begin());
      }
      use(name);
    }
    REQUIRE(c.size() == model.size());
  }
  REQUIRE(c.capacity() == 64);  // bounded by max_capacity
}

TEST_CASE("a name evicted and put again grows the cache instead of evicting", "[unit]") {
  ResponseCache c(4);
  for (const char* n : {"a", "b", "c", "d"}) (void)c.put(req(n));
  REQUIRE(c.put(req("e")) == std::optional<uint32_t>(0));  // a evicted: names do not fit yet
  REQUIRE(c.capacity() == 4);
  REQUIRE_FALSE(c.put(req("a")).has_value());  // a comes back: grown, nothing evicted
  REQUIRE(c.capacity() == 8);
  REQUIRE(c.num_words() == 1);
  REQUIRE(c.growths() == 1);
  REQUIRE(c.size() == 5);
  REQUIRE(bit_of(c, "a") == 4);  // the lowest free bit: the first of the new ones
  for (const char* n : {"b", "c", "d", "e"}) (void)bit_of(c, n);
  REQUIRE(c.evictions() == 1);
}

TEST_CASE("a step of 1,500 names cycling through 1,024 entries hits from its third pass on",
          "[unit]") {
  ResponseCache c(1024);
  int misses_last = -1;
  for (int pass = 0; pass < 4; ++pass) misses_last = pass_misses(c, "t", 1500);
  REQUIRE(misses_last == 0);
  REQUIRE(c.capacity() == 2048);
  REQUIRE(c.num_words() == 32);
}

TEST_CASE("names used once never grow the cache", "[unit]") {
  ResponseCache c(4);
  for (int i = 0; i < 100; ++i) (void)c.put(req("once." + std::to_string(i)));
  REQUIRE(c.capacity() == 4);
  REQUIRE(c.evictions() == 96);
  REQUIRE(c.growths() == 0);
}

TEST_CASE("growth stops at max_capacity, then the cache evicts", "[unit]") {
  // Passes over `n` names; returns the misses of the last pass.
  auto cycle = [](ResponseCache& c, int n) {
    int misses = 0;
    for (int pass = 0; pass < 5; ++pass) misses = pass_misses(c, "n", n);
    return misses;
  };
  ResponseCache fits(2, 4);
  REQUIRE(cycle(fits, 4) == 0);
  REQUIRE(fits.capacity() == 4);
  ResponseCache too_many(2, 4);
  REQUIRE(cycle(too_many, 100) == 100);  // cannot fit: every name misses, bounded memory
  REQUIRE(too_many.capacity() <= 4);
  REQUIRE(too_many.size() == static_cast<size_t>(too_many.capacity()));
  REQUIRE(ResponseCache(8, 2).max_capacity() == 8);  // never below the capacity
}

TEST_CASE("a group larger than the cache grows it instead of evicting its own members", "[unit]") {
  auto member = [](const std::string& group, int i, int size) {
    Request r = req(group + "/" + std::to_string(i));
    r.group = group;
    r.group_size = size;
    return r;
  };
  ResponseCache c(4);
  (void)c.put(req("plain"));
  for (int i = 0; i < 6; ++i) {
    const auto evicted = c.put(member("g", i, 6));
    // Only the older entry of another name makes room; the group's own members never do.
    if (i == 3) REQUIRE(evicted == std::optional<uint32_t>(0));
    if (i != 3) REQUIRE_FALSE(evicted.has_value());
  }
  REQUIRE(c.capacity() == 8);
  REQUIRE(c.grouped() == 6);
  for (int i = 0; i < 6; ++i) {
    uint32_t bit = 0;
    REQUIRE(c.lookup(member("g", i, 6), &bit) == ResponseCache::Lookup::kHit);
  }
  REQUIRE(c.evictions() == 1);
  ResponseCache bounded(2, 4);  // at max_capacity it evicts, as for plain names
  for (int i = 0; i < 6; ++i) (void)bounded.put(member("h", i, 6));
  REQUIRE(bounded.capacity() == 4);
  REQUIRE(bounded.size() == 4);
}

TEST_CASE("an evicted entry's name grows a full cache when put again; an erased one's not",
          "[unit]") {
  ResponseCache c(2);
  for (const char* n : {"a", "b"}) (void)c.put(req(n));
  c.evict(bit_of(c, "a"));
  c.erase(bit_of(c, "b"));
  REQUIRE(c.size() == 0);
  REQUIRE(c.evictions() == 1);
  for (const char* n : {"x", "y"}) (void)c.put(req(n));
  REQUIRE(c.put(req("b")).has_value());  // erased only: evicts as usual
  REQUIRE(c.capacity() == 2);
  REQUIRE_FALSE(c.put(req("a")).has_value());  // evicted before: grows
  REQUIRE(c.capacity() == 4);
}

TEST_CASE("two caches fed the same operations agree on every bit", "[unit]") {
  // What keeps the ranks' bit vectors aligned: growth and eviction depend only on the puts,
  // touches and erasures, never on the order in which a rank submitted.
  ResponseCache a(8), b(8);
  for (int pass = 0; pass < 3; ++pass) {
    for (int i = 0; i < 20; ++i) {
      for (ResponseCache* c : {&a, &b}) {
        const Request r = req("g" + std::to_string((i * 7 + pass) % 20));
        uint32_t bit = 0;
        if (c->lookup(r, &bit) == ResponseCache::Lookup::kHit) {
          c->touch(bit);
        } else {
          (void)c->put(r);
        }
      }
    }
  }
  REQUIRE(a.capacity() == b.capacity());
  REQUIRE(a.capacity() > 8);
  for (int i = 0; i < 20; ++i) {
    const std::string n = "g" + std::to_string(i);
    uint32_t ba = 0, bb = 0;
    REQUIRE(a.lookup(req(n), &ba) == b.lookup(req(n), &bb));
    REQUIRE(ba == bb);
  }
}
