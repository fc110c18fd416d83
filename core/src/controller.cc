// SPDX-License-Identifier: Apache-2.0
// Negotiation rounds: cache fast path, coordinator full path (protocol in controller.h).
#include "hvd/core/controller.h"

#include <algorithm>
#include <utility>

#include "guarded.h"
#include "hvd/core/logging.h"
#include "hvd/core/validation.h"

namespace hvd::core {
namespace {

using detail::guarded;

constexpr uint64_t kFlagUncached = 1;
constexpr uint64_t kFlagShutdown = 2;
constexpr uint64_t kFlagError = 4;         // a rank failed: a full round, every rank stops
constexpr uint64_t kFlagPendingNames = 8;  // rank 0 asks for every rank's pending names
constexpr uint64_t kFlagLateQuery = 16;    // rank 0 asks who was late (controller_late.cc)
constexpr uint64_t kFlagAges = 32;         // rank 0 records late ranks: note ready ages
constexpr uint64_t kFlagNotice = 64;       // a refusal notice to send, or rank 0 holds some

// Grouped allreduces are cached too, whole (controller_groups.cc); other grouped collectives
// (whose cached responses would name every member) always go through rank 0.
bool cacheable(const Request& r) {
  if (!r.refused.empty()) return false;
  if (!r.group.empty()) return r.op == OpType::kAllreduce;
  return r.op == OpType::kAllreduce || r.op == OpType::kBroadcast || r.op == OpType::kAllgather ||
         r.op == OpType::kAlltoall || r.op == OpType::kReducescatter;
}

// allgather / alltoall / reducescatter: the response agreed when the entry was cached (every
// rank's rows), with this rank's device. The others are rebuilt from the request alone.
Response cached_response(const ResponseCache& cache, uint32_t bit) {
  const Request& p = cache.at(bit);
  if (p.op != OpType::kAllgather && p.op != OpType::kAlltoall && p.op != OpType::kReducescatter) {
    return response_of(p);
  }
  Response r = cache.response_at(bit);
  r.device = p.device;
  return r;
}

}  // namespace

Controller::Controller(Transport* transport, int64_t cache_capacity, StallClock clock)
    : transport_(transport),
      clock_(std::move(clock)),
      cache_(cache_capacity),
      cache_enabled_(cache_capacity > 0),
      pending_(static_cast<size_t>(std::max<int64_t>(cache_capacity, 0)), nullptr),
      pending_words_(cache_.num_words(), 0) {}

void Controller::stamp_round() {
  stamp_ = now();
  stamp_fresh_ = true;
}

void Controller::fail(const Status& s) {
  if (local_error_.empty()) local_error_ = "rank " + std::to_string(rank()) + ": " + s.message();
}

void Controller::submit_lookup(TensorEntry* e) {
  const Request& r = e->request;
  if (r.op == OpType::kJoin) {
    joined_ = true;
    joined_at_ = now();
  }
  if (cache_enabled_ && cacheable(r)) {
    uint32_t bit = 0;
    const ResponseCache::Lookup found = cache_.lookup(r, e->cache_hint, &bit);
    if (found != ResponseCache::Lookup::kMiss) e->cache_hint = bit;
    e->cache_stamp = found == ResponseCache::Lookup::kHit ? cache_.stamp(bit) : 0;
    switch (found) {
      case ResponseCache::Lookup::kHit:
        set_pending(bit, e);
        return;
      case ResponseCache::Lookup::kMismatch:
        invalid_bits_.insert(bit);
        break;
      case ResponseCache::Lookup::kMiss:
        break;
    }
  } else if (cache_enabled_ && !r.refused.empty()) {
    // Refused here, while the other ranks may call this name through their cache: its entry is
    // invalidated everywhere (as a mismatch), so their calls join the refusal this round.
    uint32_t bit = 0;
    if (cache_.lookup(r, e->cache_hint, &bit) != ResponseCache::Lookup::kMiss) {
      invalid_bits_.insert(bit);
    }
  }
  uncached_.push_back(e);
}

Status Controller::run_round(bool want_shutdown, RoundResult* out) {
  const size_t nw = cache_enabled_ ? cache_.num_words() : 0;
  const size_t jw = static_cast<size_t>((size() + 63) / 64);
  // Layout: [inverted flags][ready bits x nw][inverted invalid bits x nw][inverted joined x jw].
  std::vector<uint64_t> words(1 + 2 * nw + jw, 0);
  for (size_t i = 0; i < jw; ++i) words[1 + 2 * nw + i] = ~0ULL;
  if (joined_) words[1 + 2 * nw + rank() / 64] &= ~(1ULL << (rank() % 64));
  uint64_t flags = 0;
  if (!uncached_.empty()) flags |= kFlagUncached;
  if (want_shutdown) flags |= kFlagShutdown;
  if (!local_error_.empty()) flags |= kFlagError;
  if (want_pending_names_) flags |= kFlagPendingNames;
  if (!late_query_.empty()) flags |= kFlagLateQuery;
  if (wants_ages_) flags |= kFlagAges;
  if (!local_notices_.empty() || notices_held_ > 0) flags |= kFlagNotice;
  stamp_fresh_ = false;  // the next submissions are stamped at their round
  last_ages_.swap(ready_ages_);
  ready_ages_.clear();
  if (stall_threshold_s_ > 0 && num_pending_ > 0) demote_stale_cached();
  words[0] = ~flags;
  std::copy(pending_words_.begin(), pending_words_.end(), words.begin() + 1);
  for (size_t i = 0; i < nw; ++i) words[1 + nw + i] = ~0ULL;
  for (uint32_t b : invalid_bits_) words[1 + nw + b / 64] &= ~(1ULL << (b % 64));
  invalid_bits_.clear();

  HVD_RETURN_IF_ERROR(transport_->allreduce_and(&words));
  const uint64_t any_flags = ~words[0];
  ages_wanted_ = (any_flags & kFlagAges) != 0;
  notice_round_ = (any_flags & kFlagNotice) != 0;
  // From here on, whatever throws becomes this rank's error (sent to rank 0 in this round's
  // full path, or flagged in the next round): the round's collectives go on symmetrically.
  // The joined ranks: the cleared bits, word by word (a round's cost must not grow with the
  // number of ranks; bits past the last rank stay set on every rank).
  std::vector<int> joined;
  for (size_t i = 0; i < jw; ++i) {
    for (uint64_t gone = ~words[1 + 2 * nw + i]; gone != 0; gone &= gone - 1) {
      joined.push_back(static_cast<int>(i * 64) + __builtin_ctzll(gone));
    }
  }
  Status decoded = guarded("decoding the round", [&] { decode_round(words, nw, joined, out); });
  if (!decoded.ok()) fail(decoded);
  out->full_round = (any_flags & (kFlagUncached | kFlagShutdown | kFlagError | kFlagNotice)) != 0 ||
                    !joined.empty();
  Status st = out->full_round ? full_round(want_shutdown, joined, out) : Status::OK();
  if (st.ok() && (any_flags & kFlagPendingNames)) st = exchange_pending_names();
  if (st.ok() && (any_flags & kFlagLateQuery)) st = exchange_late_ranks();
  return st;
}

void Controller::decode_round(const std::vector<uint64_t>& words, size_t nw,
                              const std::vector<int>& joined, RoundResult* out) {
  // Entries some rank contradicted: evicted everywhere, their pending requests re-sent.
  bool erased = false;
  for (size_t w = 0; w < nw; ++w) {
    uint64_t inv = ~words[1 + nw + w];
    while (inv) {
      uint32_t b = static_cast<uint32_t>(w * 64 + __builtin_ctzll(inv));
      inv &= inv - 1;
      cache_.erase(b);
      erased = true;
      if (TensorEntry* e = take_pending(b)) uncached_.push_back(e);
    }
  }
  if (erased && cache_.grouped() > 0) drop_partial_groups();
  // Ready everywhere through the cache.
  cached_bits_.clear();
  auto take = [&](uint32_t b) {
    TensorEntry* e = take_pending(b);
    const OpType op = cache_.op_at(b);
    if (e && (op == OpType::kAllreduce || op == OpType::kBroadcast)) {
      out->cached.push_back(e);  // the response follows from the request alone
      cached_bits_.push_back(b);
    } else {
      out->responses.push_back(cached_response(cache_, b));
    }
    cache_.touch(b);
  };
  const bool groups = cache_.grouped() > 0;  // ready bits are held back per group first
  out->cached.reserve(out->cached.size() + num_pending_);
  ready_bits_.clear();
  for (size_t w = 0; w < nw; ++w) {
    uint64_t ready = words[1 + w] & words[1 + nw + w];
    while (ready) {
      const auto b = static_cast<uint32_t>(w * 64 + __builtin_ctzll(ready));
      ready &= ready - 1;
      if (!cache_.contains(b)) continue;  // a group member dropped above
      if (groups) {
        ready_bits_.push_back(b);
      } else {
        take(b);
      }
    }
  }
  if (groups) {
    hold_incomplete_groups(&ready_bits_);
    for (uint32_t b : ready_bits_) take(b);
  }

  // The same bits as last round, the cache unchanged: the same signature (the runtime then
  // reuses the last plan of these batches instead of planning them again).
  if (cached_bits_ != last_cached_bits_ || cache_.version() != signed_cache_version_) {
    ++cached_signature_;
    signed_cache_version_ = cache_.version();
    last_cached_bits_.swap(cached_bits_);
  }
  out->cached_signature = out->cached.empty() ? 0 : cached_signature_;

  // While some rank has joined, the coordinator decides what is ready (it knows who submitted
  // what); pending cached requests go through it too, and nothing new is cached. The same
  // while rank 0 holds refusal notices: it must see what every rank waits for.
  if (!joined.empty() || notice_round_) {
    for (uint32_t b = 0; num_pending_ > 0 && b < pending_.size(); ++b) {
      if (TensorEntry* e = take_pending(b)) uncached_.push_back(e);
    }
  }
}

Status Controller::full_round(bool want_shutdown, const std::vector<int>& joined,
                              RoundResult* out) {
  std::vector<uint8_t> mine;
  Status sent = guarded("sending requests", [&] {
    std::vector<const Request*> reqs;
    reqs.reserve(uncached_.size());
    for (TensorEntry* e : uncached_) {
      if (e->request.op == OpType::kJoin) {  // how long ago join() was called (see coordinate)
        const auto waited =
            std::chrono::duration_cast<std::chrono::microseconds>(now() - joined_at_);
        e->request.splits.assign(1, std::max<int64_t>(0, waited.count()));
      }
      sent_[e->request.name] = e;
      reqs.push_back(&e->request);
      ++waiting_;
    }
    uncached_.clear();
    mine = serialize_requests(reqs, want_shutdown, local_error_, local_notices_);
    if (!local_notices_.empty()) {
      notice_sent_until_ = std::chrono::steady_clock::now() + 2 * kNoticeGrace;
    } else if (notice_sent_until_ != std::chrono::steady_clock::time_point{} &&
               !notice_sent_recently()) {
      notice_sent_until_ = {};
    }
    local_notices_.clear();
  });
  if (!sent.ok()) {
    fail(sent);  // an empty list, should even this throw: rank 0 cannot read it, all stop
    (void)guarded("sending requests", [&] { mine = serialize_requests({}, false, local_error_); });
  }
  std::vector<std::vector<uint8_t>> all;
  HVD_RETURN_IF_ERROR(transport_->gather(mine, &all));
  std::vector<uint8_t> bytes;
  // Rank 0 always broadcasts, whatever failed: the others are already waiting in the
  // broadcast. (Should even the error list fail to serialize, the empty broadcast fails to
  // parse on every rank alike.)
  if (rank() == 0) {
    Status st = guarded("rank 0: coordinating the round", [&] { bytes = coordinate(all, joined); });
    if (!st.ok()) {
      (void)guarded("rank 0", [&] {
        ResponseList failed;
        failed.error = st.message();
        bytes = serialize(failed);
      });
    }
  }
  HVD_RETURN_IF_ERROR(transport_->broadcast(&bytes));
  auto rl = parse_response_list(bytes.data(), bytes.size());
  if (!rl.ok()) return rl.status();
  if (!rl.value().error.empty()) return internal_error(rl.value().error);
  out->shutdown_ranks = rl.value().shutdown_ranks;
  out->shutdown = !out->shutdown_ranks.empty();
  out->shutdown_note = rl.value().shutdown_note;
  // The responses are agreed: they run even if caching them fails here (the failure then
  // stops every rank at the next round).
  Status cached = guarded("caching the round's responses", [&] {
    cache_new_responses(rl.value().responses, !joined.empty() || notice_round_);
  });
  if (!cached.ok()) fail(cached);
  for (auto& r : rl.value().responses) {
    if (r.op == OpType::kJoin && !r.is_error()) joined_ = false;
    out->responses.push_back(std::move(r));
  }
  return Status::OK();
}

std::vector<uint8_t> Controller::coordinate(const std::vector<std::vector<uint8_t>>& all,
                                            const std::vector<int>& joined) {
  ResponseList rl;
  std::string errors;  // every rank's failure, and every list that could not be read
  auto add_error = [&](const std::string& e) { errors += (errors.empty() ? "" : "; ") + e; };
  std::vector<RequestList> lists(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    auto parsed = parse_request_list(all[i].data(), all[i].size());
    if (!parsed.ok()) {
      add_error("rank 0 could not read the request list of rank " + std::to_string(i) + ": " +
                parsed.status().message());
    } else {
      lists[i] = std::move(parsed.value());
      if (!lists[i].error.empty()) add_error(lists[i].error);
    }
  }
  if (!errors.empty()) {
    rl.error = "hvd stopped on every rank: " + errors;
    return serialize(rl);
  }
  ++coordinated_rounds_;
  for (size_t i = 0; i < lists.size(); ++i) {
    const bool sent = !lists[i].requests.empty() || lists[i].shutdown;
    if (notices_held_ > 0 || !lists[i].notices.empty()) {
      coordinator_take_notices(static_cast<int>(i), &lists[i].notices, sent);
    }
  }
  // Before the requests: a request that runs drops its rank's notices (it went on), and a
  // mistake every rank made must be dropped on every rank first.
  if (notices_held_ > 0) coordinator_drop_agreed();
  for (size_t i = 0; i < lists.size(); ++i) {
    if (lists[i].shutdown) rl.shutdown_ranks.push_back(static_cast<int32_t>(i));
    for (auto& r : lists[i].requests) {
      r.rank = static_cast<int32_t>(i);
      coordinator_add(std::move(r), joined, &rl.responses);
    }
  }
  if (!joined.empty()) coordinator_sweep(joined, &rl.responses);
  coordinator_match_notices(joined, &rl.responses);
  coordinator_fail_groups(joined, &rl.responses);
  if (!rl.shutdown_ranks.empty()) rl.shutdown_note = coordinator_shutdown_note(rl.shutdown_ranks);
  return serialize(rl);
}

void Controller::cache_new_responses(const std::vector<Response>& responses, bool any_joined) {
  bool changed = false;
  for (const auto& resp : responses) {
    for (const auto& name : resp.names) {
      auto it = sent_.find(name);
      if (it == sent_.end()) continue;
      const Request& mine = it->second->request;
      if (cache_enabled_ && !any_joined && !resp.is_error() && cacheable(mine)) {
        changed = true;
        if (auto evicted = cache_.put(mine, resp)) {
          if (TensorEntry* p = take_pending(*evicted)) uncached_.push_back(p);
        }
      }
      sent_.erase(it);
      --waiting_;
    }
  }
  if (changed && cache_.grouped() > 0) drop_partial_groups();
  if (pending_.size() < static_cast<size_t>(cache_.capacity())) note_cache_growth();
}

void Controller::note_cache_growth() {
  // Every rank grew at the same response (see ResponseCache): the next round's bit vector has
  // the new length everywhere.
  pending_.resize(static_cast<size_t>(cache_.capacity()), nullptr);
  pending_words_.resize(cache_.num_words(), 0);
  if (!pending_since_.empty()) pending_since_.resize(pending_.size());
  if (rank() == 0 && !cache_growth_logged_) {
    cache_growth_logged_ = true;
    HVD_LOG(Warning) << "the response cache grew to " << cache_.capacity()
                     << " entries: a step uses more distinct collective names than "
                        "HVD_CACHE_CAPACITY holds, so they evicted each other and were "
                        "negotiated through rank 0 again; set HVD_CACHE_CAPACITY="
                     << cache_.capacity() << " (or more) to start there (grows up to "
                     << cache_.max_capacity() << ")";
  }
}

bool Controller::coordinator_ready(const Pending& p, const std::vector<int>& joined) const {
  if (p.count == size()) return true;
  if (p.is_join || joined.empty()) return false;
  std::vector<bool> in(static_cast<size_t>(size()), false);
  for (int j : joined) in[static_cast<size_t>(j)] = true;
  for (size_t i = 0; i < p.per_rank.size(); ++i) {
    if (!p.per_rank[i] && !in[i]) return false;
  }
  return true;
}

void Controller::coordinator_add(Request&& request, const std::vector<int>& joined,
                                 std::vector<Response>* ready) {
  Pending& p = table_[request.name];
  if (p.per_rank.empty()) {
    p.per_rank.resize(static_cast<size_t>(size()));
    p.arrival = arrivals_++;
    p.since = now();
    p.is_join = request.op == OpType::kJoin;
    p.group = request.group;
  }
  if (request.rank < 0 || request.rank >= size() || p.per_rank[static_cast<size_t>(request.rank)]) {
    return;
  }
  // Moved, not copied: rank 0 holds each request of a round once (its allocations included).
  const Request& r = p.per_rank[static_cast<size_t>(request.rank)].emplace(std::move(request));
  ++p.count;
  if (notices_held_ > 0) {
    const auto& mine = notices_[static_cast<size_t>(r.rank)];
    if (!mine.empty() && mine.front().round < coordinated_rounds_) p.after_notice.push_back(r.rank);
  }
  if (p.is_join) {
    const int64_t waited_us = r.splits.empty() ? 0 : std::max<int64_t>(0, r.splits.front());
    p.joined_at.resize(static_cast<size_t>(size()));
    p.joined_at[static_cast<size_t>(r.rank)] = now() - std::chrono::microseconds(waited_us);
  }
  if (!r.group.empty()) {
    Group& g = groups_[r.group];
    if (g.sizes.empty()) {
      g.sizes.assign(static_cast<size_t>(size()), 0);
      g.seen.assign(static_cast<size_t>(size()), 0);
    }
    g.sizes[static_cast<size_t>(r.rank)] = r.group_size;
    ++g.seen[static_cast<size_t>(r.rank)];
    g.op = r.op;
    // Against the first size any rank gave (not every rank's again: O(1) per member).
    if (g.first_size == 0) g.first_size = r.group_size;
    g.mismatched = g.mismatched || r.group_size != g.first_size;
    if (g.mismatched) return;  // coordinator_fail_groups() answers every member
  }
  if (coordinator_ready(p, joined)) {
    const std::string name = r.name;  // emit moves `r` out of the table
    coordinator_emit(name, ready);
  }
}

void Controller::coordinator_sweep(const std::vector<int>& joined, std::vector<Response>* ready) {
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, p] : table_) {
    auto g = p.group.empty() ? groups_.end() : groups_.find(p.group);
    if (g != groups_.end() && g->second.mismatched) continue;
    if (coordinator_ready(p, joined)) order.emplace_back(p.arrival, name);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [arrival, name] : order) coordinator_emit(name, ready);
}

void Controller::coordinator_emit(const std::string& name, std::vector<Response>* ready) {
  Pending& p = table_.at(name);
  // A join: the rank that called it last by rank 0's clock (ties: the highest rank).
  int last_rank = 0;
  for (size_t i = 1; i < p.joined_at.size(); ++i) {
    if (p.joined_at[i] >= p.joined_at[static_cast<size_t>(last_rank)]) {
      last_rank = static_cast<int>(i);
    }
  }
  std::vector<Request> reqs;
  std::vector<int> absent;
  reqs.reserve(p.per_rank.size());
  for (size_t i = 0; i < p.per_rank.size(); ++i) {
    if (auto& request = p.per_rank[i]) {
      reqs.push_back(std::move(*request));
    } else {
      absent.push_back(static_cast<int>(i));
    }
  }
  const std::vector<int> after_notice = std::move(p.after_notice);
  table_.erase(name);
  const Request r = reqs.front();
  Response resp = build_response(reqs, size(), absent);
  if (!resp.is_error()) {
    // These ranks went on in step with the others after their refusals: nobody waits for
    // the refused calls any more.
    for (int k : after_notice) {
      notices_held_ -= notices_[static_cast<size_t>(k)].size();
      notices_[static_cast<size_t>(k)].clear();
    }
  }
  if (r.op == OpType::kJoin) resp.root = last_rank;
  if (r.group.empty()) {
    ready->push_back(std::move(resp));
    return;
  }
  // Grouped: members run together once all are ready; one failing member fails the group.
  auto& g = groups_[r.group];
  ++g.done;
  if (resp.is_error() && !g.failed) {
    g.failed = true;
    g.reason = resp.error;
    ready->push_back(resp);
    for (auto& m : g.members) {
      m.error = g.reason;  // names the group and the member that failed
      ready->push_back(std::move(m));
    }
    g.members.clear();
  } else if (g.failed) {
    resp.error = g.reason;
    ready->push_back(std::move(resp));
  } else {
    g.members.push_back(std::move(resp));
    if (static_cast<int>(g.members.size()) == r.group_size) {
      for (auto& m : g.members) ready->push_back(std::move(m));
      g.members.clear();
    }
  }
  if (g.done >= r.group_size) groups_.erase(r.group);
}

void Controller::coordinator_fail_groups(const std::vector<int>& joined,
                                         std::vector<Response>* ready) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& g = it->second;
    // Wait until every rank sent all the members it has (a joined rank may have none), so
    // no member arrives after its error and waits forever.
    bool all_in = g.mismatched;
    for (size_t i = 0; all_in && i < g.sizes.size(); ++i) {
      const bool has_joined =
          std::find(joined.begin(), joined.end(), static_cast<int>(i)) != joined.end();
      all_in = g.sizes[i] > 0 ? g.seen[i] >= g.sizes[i] : has_joined;
    }
    if (!all_in) {
      ++it;
      continue;
    }
    std::string error = group_size_error(g.op, it->first, g.sizes);  // every rank's size
    for (const auto& [name, p] : table_) {  // a member refused on its rank says why instead
      if (p.group != it->first) continue;
      for (const auto& q : p.per_rank) {
        if (q && !q->refused.empty()) {
          error = q->refused + " [refused on rank " + std::to_string(q->rank) +
                  "; the call fails on every rank]";
        }
      }
    }
    for (auto& m : g.members) {
      m.error = error;
      ready->push_back(std::move(m));
    }
    std::vector<std::pair<uint64_t, std::string>> order;
    for (const auto& [name, p] : table_) {
      if (p.group == it->first) order.emplace_back(p.arrival, name);
    }
    std::sort(order.begin(), order.end());
    for (const auto& [arrival, name] : order) {
      const Pending& p = table_.at(name);
      auto q = std::find_if(p.per_rank.begin(), p.per_rank.end(),
                            [](const std::optional<Request>& x) { return x.has_value(); });
      Response resp = response_of(**q);
      resp.error = error;
      ready->push_back(std::move(resp));
      table_.erase(name);
    }
    it = groups_.erase(it);
  }
}

std::vector<StalledTensor> Controller::stalled(double older_than_s) const {
  std::vector<StalledTensor> out;
  const auto t = now();
  for (const auto& [name, p] : table_) {
    if (std::chrono::duration<double>(t - p.since).count() < older_than_s) continue;
    StalledTensor st{name, {}, {}, std::chrono::duration<double>(t - p.since).count()};
    for (size_t i = 0; i < p.per_rank.size(); ++i) {
      (p.per_rank[i] ? st.submitted : st.missing).push_back(static_cast<int>(i));
    }
    out.push_back(std::move(st));
  }
  std::sort(out.begin(), out.end(),
            [](const StalledTensor& a, const StalledTensor& b) { return a.name < b.name; });
  return out;
}

}  // namespace hvd::core
