// SPDX-License-Identifier: Apache-2.0
// Negotiation: which named tensors are ready on every rank, in which order to run them.
//
// Protocol, one round (every rank of the process set takes part in each round):
//  1. Each rank sets, in a bit vector, the cache bits of its pending requests whose name and
//     parameters are cached, plus inverted flag words ("I have uncached requests", "I want to
//     shut down", "this cache entry no longer matches my request"). One bitwise-AND allreduce
//     gives the bits set on every rank (ready everywhere) and, through the inversion, the OR of
//     the flags.
//  2. Cached responses = the set ready bits in ascending bit order, computed identically on
//     every rank from identical caches. Invalidated entries are evicted everywhere and their
//     pending requests re-sent uncached.
//  3. If any rank has uncached requests or wants to shut down: every rank sends its uncached
//     requests to rank 0 (gather); rank 0 records them per name, and for each name now requested
//     by every rank validates the parameters and emits a response (or an error naming the
//     tensor, the ranks and the values); grouped names wait for their whole group. A group
//     whose ranks submitted different numbers of members waits until every rank sent all of
//     its members, then every member fails (one error naming the group, sizes and ranks).
//     Rank 0 broadcasts the list.
//  4. The round's list = cached responses, then the broadcast ones. Every rank then caches the
//     new successful single-tensor responses in list order, so caches stay identical.
//
// Failures are symmetric: a rank whose background thread failed (an exception, see fail())
// sets an "error" flag word, which makes the round full, and sends its error to rank 0 with
// its requests. Rank 0 always broadcasts: a list carrying every rank's error (also when it
// cannot read some rank's request list, or coordinating throws), and every rank then returns
// that same error from run_round() (the runtime stops and fails every pending handle).
//
// Join: a rank that called join() clears its bit in a per-rank "joined" word of the round's
// AND (so every rank learns the joined set) and keeps taking part in rounds. While any rank has
// joined, every round is a full round, pending cached requests go to rank 0 like uncached ones
// and nothing new is cached. Rank 0 treats a name as ready once every rank that has not joined
// submitted it; the response lists the joined ranks that did not submit it (`joined`), which
// take part with zeros / no rows. Ops a joined rank cannot take part in get an error response.
// The join itself is ready when every rank joined; its `root` is the last rank to join. Joins
// can reach rank 0 in one round even when called far apart (a rank with nothing to do enters
// no round), so each join request carries how long its rank has waited in join() when sent:
// rank 0 subtracts it from its own clock, and the latest estimate is the last rank (ties, within
// a microsecond: the highest rank).
//
// Refusal notices: a rank that refuses a call before knowing its tensor (a name in hvd's own
// name space, an unknown or removed process set: the API cannot tell which name or set the
// other ranks used) sends a notice, "rank <r> refused ...", with its next round's requests
// (its flag makes the round full). Rank 0 keeps each rank's notices in order and, while it
// holds any, flags every round so that every rank sends its pending cached requests through
// it (as while a rank has joined). A tensor that then waits for noticed ranks alone (every
// other rank submitted it) fails on every rank with their notices, one of each consumed (a
// group's later members fail with the same message), once each of those ranks went on (sent
// a request or its shutdown in a later round: it did not make that call, it refused it) or
// kNoticeGrace passed since the notice came (it is busy elsewhere). Notices never change what
// happens when all ranks agree: once every rank of the set holds a notice of the same mistake
// (the same text but for the rank), one of each is dropped (all made it), and a rank's notices are
// dropped once a request it sent in a later round ran on every rank (it went on in step with the
// others: nobody waits for the refused call). A shutdown requested with refusals or notices still
// unmatched carries them (ResponseList::shutdown_note) into the message of every call the shutdown
// fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvd/core/cache.h"
#include "hvd/core/executor.h"
#include "hvd/core/message.h"
#include "hvd/core/transport.h"

namespace hvd::core {

/// A request rank 0 has had from some ranks but not all (see Controller::stalled()).
struct StalledTensor {
  std::string name;
  std::vector<int> submitted;  ///< ranks that submitted it
  std::vector<int> missing;    ///< ranks that have not
  double waited_s = 0;         ///< seconds since the first rank's request reached rank 0
};

/// The time source of stall detection: steady_clock unless a test injects a fake one.
using StallClock = std::function<std::chrono::steady_clock::time_point()>;

struct RoundResult {
  /// Allreduces and broadcasts ready on every rank through the cache: this rank's entries, in
  /// bit order (the same order on every rank). They run first, then `responses`.
  std::vector<TensorEntry*> cached;
  /// Names `cached` by its cache bits: equal in two rounds exactly when their `cached` lists
  /// had the same bits in the same order and the cache did not change in between (the same
  /// parameters, hence the same fusion plan and responses). 0: none.
  uint64_t cached_signature = 0;
  std::vector<Response> responses;  ///< in execution order, not yet fused
  bool shutdown = false;            ///< some rank asked to shut down: stop after executing
  std::vector<int32_t> shutdown_ranks;
  bool full_round = false;  ///< the coordinator was involved (not cache-only)
  /// With `shutdown`: the shutting-down ranks' refusals nobody met (ResponseList).
  std::string shutdown_note;
};

/// Negotiation state of one rank in one process set. Not thread-safe: the background thread
/// owns it.
class Controller {
 public:
  /// `clock` stamps the coordinator's requests for stalled() (null: steady_clock).
  Controller(Transport* transport, int64_t cache_capacity, StallClock clock = nullptr);

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }

  /// Adds an entry of this rank (validated locally already). The controller keeps the pointer:
  /// `*e` must stay valid and its request unchanged until run_round() returned it or its
  /// response (or the controller is destroyed), so the runtime's table entry is the only copy.
  void submit(TensorEntry* e) {
    // The request that hit this entry last time, unchanged, and the entry unchanged: a hit
    // (cache_stamp is set only by a hit of a cacheable request; stamp() is 0 without a cache).
    if (e->request_unchanged && e->cache_stamp != 0 &&
        cache_.stamp(e->cache_hint) == e->cache_stamp) {
      set_pending(static_cast<uint32_t>(e->cache_hint), e);
      return;
    }
    submit_lookup(e);
  }
  /// submit() beyond a hit of the same request: the cache is searched.
  void submit_lookup(TensorEntry* e);
  /// True while this rank has requests not yet answered (a joined rank always has: its join),
  /// or a failure to report.
  bool has_pending() const {
    return !uncached_.empty() || num_pending_ > 0 || waiting_ > 0 || !local_error_.empty() ||
           !local_notices_.empty() || notices_held_ > 0 || notice_sent_recently();
  }
  /// This rank refused a call before it knew its tensor; `text` (notice_text()) says so (see
  /// the file comment). Sent at the next round, without the calls submitted after it (the
  /// runtime holds those back a round, so rank 0 sees them arrive after the notice).
  void notice(std::string text) { local_notices_.push_back(std::move(text)); }
  /// A notice's text: "rank <global_rank> refused its call locally (<what>)".
  static std::string notice_text(int global_rank, const std::string& what);
  /// Records a failure of this rank (the first one counts): the next round is a full round
  /// that stops every rank with it ("rank <r>: <message>").
  void fail(const Status& s);
  /// True between submitting a join and its response.
  bool joined() const { return joined_; }
  /// Runs one round (see the file comment). Never throws: what throws inside becomes this
  /// rank's failure (fail()). An error return is the same on every rank when it comes from the
  /// broadcast (a rank's failure); a transport error is this rank's own.
  Status run_round(bool want_shutdown, RoundResult* out);

  /// Requests rank 0 has had from some ranks but not all for at least `older_than_s` seconds
  /// by now(), in name order (rank 0 only).
  std::vector<StalledTensor> stalled(double older_than_s) const;

  // Stall inspection (protocol in stall_inspector.h).
  /// Cached requests pending `s` seconds are re-sent through rank 0, which times them (0: never).
  void set_stall_threshold(double s);
  /// Rank 0: every rank sends its pending names after the next round (pending_names()).
  void request_pending_names() { want_pending_names_ = true; }
  /// Rank 0: true once a round collected the pending names asked for by request_pending_names().
  bool pending_names_fresh() const { return !want_pending_names_ && names_collected_; }
  /// Rank 0: per rank, the names it had pending at the last collection (sorted).
  const std::vector<std::vector<std::string>>& pending_names() const { return pending_names_; }
  /// Rank 0: stops every rank at the next round with `why` (the first call counts): the round's
  /// broadcast carries it and every rank's pending handles fail with it.
  void stop_every_rank(const std::string& why);
  /// The current time of the stall clock.
  std::chrono::steady_clock::time_point now() const {
    return clock_ ? clock_() : std::chrono::steady_clock::now();
  }
  const ResponseCache& cache() const { return cache_; }

  /// How long rank 0 waits for a noticed rank to go on before it fails the tensor waiting for
  /// that rank alone anyway (see the file comment).
  static constexpr std::chrono::milliseconds kNoticeGrace{500};

  // Late ranks, for the timeline (protocol in controller_late.cc).
  /// Rank 0 asks who was late with a tensor after waiting at least this long for it.
  static constexpr std::chrono::microseconds kLateQueryMin{100};
  /// Rank 0 with a timeline: every round's flags tell all ranks to note ready ages (below).
  /// Without it no rank stamps submissions or notes ages: the timeline-off path pays nothing.
  void set_wants_ages(bool on) { wants_ages_ = on; }
  /// Whether the last round's flags asked every rank to note its ready ages (rank 0 records
  /// late ranks): only then is note_ready() worth calling.
  bool ages_wanted() const { return ages_wanted_; }
  /// Every rank, for each of its entries that the last round made ready: how long before the
  /// round ended this rank submitted it.
  void note_ready(const std::string& name, std::chrono::microseconds ago);
  /// Rank 0: asks in the next round which ranks submitted `name` (made ready by the last
  /// round, after rank 0 waited `ago` for it) late.
  void query_late(const std::string& name, std::chrono::microseconds ago);
  /// Rank 0: the late ranks the last round found for the tensors asked about (then cleared).
  std::vector<StalledTensor> take_late() { return std::move(late_found_); }

 private:
  struct Pending;
  /// After the round's AND: invalidated and ready cache bits (may throw).
  void decode_round(const std::vector<uint64_t>& words, size_t nw, const std::vector<int>& joined,
                    RoundResult* out);
  /// Gather to rank 0, coordinate, broadcast.
  Status full_round(bool want_shutdown, const std::vector<int>& joined, RoundResult* out);
  /// Rank 0: the serialized response list for every rank's request list (may throw).
  std::vector<uint8_t> coordinate(const std::vector<std::vector<uint8_t>>& all,
                                  const std::vector<int>& joined);
  void coordinator_add(Request&& request, const std::vector<int>& joined,
                       std::vector<Response>* ready);
  bool coordinator_ready(const Pending& p, const std::vector<int>& joined) const;
  void coordinator_sweep(const std::vector<int>& joined, std::vector<Response>* ready);
  void coordinator_emit(const std::string& name, std::vector<Response>* ready);
  void coordinator_fail_groups(const std::vector<int>& joined, std::vector<Response>* ready);
  /// Rank 0: records rank `rank`'s notices of this round; `sent`: its list had requests or
  /// asked to shut down (its earlier notices' rank went on).
  void coordinator_take_notices(int rank, std::vector<std::string>* notices, bool sent);
  /// Rank 0: drops the notices of a mistake every rank made (see the file comment).
  void coordinator_drop_agreed();
  /// Rank 0: fails the tensors that wait only for noticed ranks (see the file comment).
  void coordinator_match_notices(const std::vector<int>& joined, std::vector<Response>* ready);
  /// Rank 0: what the ranks shutting down refused and nobody met (ResponseList::shutdown_note).
  std::string coordinator_shutdown_note(const std::vector<int32_t>& ranks) const;
  void cache_new_responses(const std::vector<Response>& responses, bool any_joined);
  /// The cache grew while caching a round's responses: the pending bits follow it.
  void note_cache_growth();
  /// Groups are cached whole or not at all (controller_groups.cc): after the cache changed,
  /// the members of every group not wholly cached are evicted (on every rank alike: the caches
  /// are equal) and their pending requests go to rank 0, as the whole group's will.
  void drop_partial_groups();
  /// Of `ready` (bits ready everywhere), keeps pending the members of groups not wholly ready.
  void hold_incomplete_groups(std::vector<uint32_t>* ready);
  void set_pending(uint32_t bit, TensorEntry* e) {
    if (!pending_[bit]) ++num_pending_;
    pending_[bit] = e;
    pending_words_[bit / 64] |= 1ULL << (bit % 64);
    if (!pending_since_.empty()) {  // the stall check's: when `bit` was submitted
      if (!stamp_fresh_) stamp_round();
      pending_since_[bit] = stamp_;
    }
  }
  void stamp_round();  // stamp_ = now(), for the submissions of this round
  TensorEntry* take_pending(uint32_t bit) {
    TensorEntry* r = pending_[bit];
    if (!r) return nullptr;
    pending_[bit] = nullptr;
    pending_words_[bit / 64] &= ~(1ULL << (bit % 64));
    --num_pending_;
    return r;
  }
  /// Marks cached requests pending for the stall threshold invalid (re-sent through rank 0).
  void demote_stale_cached();
  /// After a round whose flags asked for it: every rank's pending names to rank 0.
  Status exchange_pending_names();
  /// After a round whose flags asked for it: every rank's ready ages of the round before, to
  /// rank 0, which names the late ranks of the tensors it asked about.
  Status exchange_late_ranks();

  Transport* transport_;
  StallClock clock_;
  ResponseCache cache_;
  bool cache_enabled_;
  bool cache_growth_logged_ = false;
  std::vector<TensorEntry*> uncached_;  // to send at the next full round
  // Cached requests waiting for all ranks: by cache bit, and as the round's bit vector.
  std::vector<TensorEntry*> pending_;
  std::vector<uint64_t> pending_words_;
  size_t num_pending_ = 0;
  std::set<uint32_t> invalid_bits_;   // cache entries my requests contradict
  std::vector<uint32_t> ready_bits_;  // decode_round's, kept for its capacity
  // The bits of the last round's `cached` list and its signature (see RoundResult).
  std::vector<uint32_t> cached_bits_, last_cached_bits_;
  uint64_t cached_signature_ = 0;
  uint64_t signed_cache_version_ = 0;
  int64_t waiting_ = 0;                                 // sent to rank 0, no response yet
  std::unordered_map<std::string, TensorEntry*> sent_;  // name -> my entry sent to rank 0
  bool joined_ = false;                                 // join() submitted, not yet answered
  std::chrono::steady_clock::time_point joined_at_{};   // when join() was submitted
  std::string local_error_;                             // fail(): sent at the next round
  std::vector<std::string> local_notices_;              // notice(): sent at the next round
  // Until then this rank takes part in rounds after sending a notice, so that rank 0 can
  // answer the others' calls while this rank has nothing else to do in this set.
  std::chrono::steady_clock::time_point notice_sent_until_{};
  bool notice_sent_recently() const {
    return notice_sent_until_ != std::chrono::steady_clock::time_point{} &&
           std::chrono::steady_clock::now() < notice_sent_until_;
  }
  bool notice_round_ = false;  // the last round's flags: rank 0 holds notices
  // Stall inspection: when each cached request became pending, the threshold, rank 0's ask.
  std::vector<std::chrono::steady_clock::time_point> pending_since_;
  double stall_threshold_s_ = 0;
  // One clock read per round for the pending stamps (not one per submitted tensor).
  std::chrono::steady_clock::time_point stamp_{};
  bool stamp_fresh_ = false;
  std::chrono::steady_clock::time_point last_demote_scan_{};
  bool want_pending_names_ = false, names_collected_ = false;
  std::vector<std::vector<std::string>> pending_names_;
  // Late ranks: this round's and the last round's ready ages, rank 0's questions and answers.
  struct ReadyAge {
    uint64_t name_hash;
    int64_t ago_us;
  };
  struct LateQuery {
    std::string name;
    int64_t ago_us;
  };
  std::vector<ReadyAge> ready_ages_, last_ages_;
  bool wants_ages_ = false;   // rank 0: set the ages flag in the next rounds
  bool ages_wanted_ = false;  // the last round had the ages flag
  std::vector<LateQuery> late_query_;
  std::vector<StalledTensor> late_found_;

  // Coordinator (rank 0) state.
  struct Pending {
    std::vector<std::optional<Request>> per_rank;
    int count = 0;
    uint64_t arrival = 0;
    std::chrono::steady_clock::time_point since;
    bool is_join = false;
    // A join: per rank, when it called join() by rank 0's clock (its request's wait subtracted).
    std::vector<std::chrono::steady_clock::time_point> joined_at;
    std::string group;  // the first request's group key ("" when not grouped)
    // Ranks that sent it a round after their oldest notice: it running on every rank drops
    // their notices.
    std::vector<int> after_notice;
  };
  std::unordered_map<std::string, Pending> table_;
  uint64_t arrivals_ = 0;
  // group key -> state of the group's members across ranks
  struct Group {
    std::vector<Response> members;  // ready, waiting for the rest of the group
    int done = 0;                   // members answered (run or failed)
    bool failed = false;
    std::string reason;
    std::vector<int32_t> sizes;  // per rank: members it says the group has (0: none seen yet)
    std::vector<int32_t> seen;   // per rank: members received
    bool mismatched = false;     // ranks disagree on the number of members
    int32_t first_size = 0;      // the number of members the first request said
    OpType op = OpType::kAllreduce;
  };
  std::unordered_map<std::string, Group> groups_;
  // Refusal notices (see the file comment): per rank, in order, with the round they came in.
  struct Notice {
    std::string text;
    uint64_t round = 0;
    std::chrono::steady_clock::time_point at{};
    bool went_on = false;  // its rank sent something in a later round
  };
  std::vector<std::deque<Notice>> notices_;
  size_t notices_held_ = 0;
  uint64_t coordinated_rounds_ = 0;
  // Groups a notice failed: the message, and the members still to fail.
  struct NoticedGroup {
    std::string error;
    int32_t left = 0;
    std::vector<int> ranks;  // the ranks whose notices it consumed
  };
  std::unordered_map<std::string, NoticedGroup> noticed_groups_;
};

}  // namespace hvd::core
