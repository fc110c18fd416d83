// SPDX-License-Identifier: Apache-2.0
// The runtime of one process: the tensor table, the background thread, negotiation, execution.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hvd/core/config.h"
#include "hvd/core/controller.h"
#include "hvd/core/executor.h"
#include "hvd/core/function_ref.h"
#include "hvd/core/handle.h"
#include "hvd/core/output_pool.h"
#include "hvd/core/stall_inspector.h"
#include "hvd/core/timeline.h"
#include "hvd/core/transport.h"

namespace hvd::core {

struct RuntimeParts;
/// Builds the parts of process set `id` made of the global ranks `ranks`. Called on the global
/// set's background thread of every rank, in the same order everywhere (it may make collective
/// calls over the global set). Ranks outside the set leave `out->transport` null.
using ProcessSetFactory =
    std::function<Status(int32_t id, const std::vector<int32_t>& ranks, RuntimeParts* out)>;

/// What a backend contributes to a runtime.
struct RuntimeParts {
  std::unique_ptr<Transport> transport;       ///< negotiation over this runtime's process set
  std::unique_ptr<Executor> host_executor;    ///< host-memory collectives
  std::unique_ptr<Executor> device_executor;  ///< device collectives; null when not built
  std::string no_device_reason = "this build of hvd has no GPU support (HVD_WITH_NCCL=OFF)";
  /// Global set only: builds the parts of added process sets; null = add_process_set fails.
  ProcessSetFactory make_process_set{};
  /// Process set id of this runtime (0: the global set).
  int32_t process_set = 0;
  /// Kept alive as long as the runtime built from these parts (communicators, hubs); released
  /// before the transport and executors, whose destructors must not use it.
  std::shared_ptr<void> resources{};
  /// Time source of stall detection (null: steady_clock); tests inject a fake one so that
  /// they need not sleep HVD_STALL_CHECK_TIME_SECONDS.
  StallClock clock{};
  /// How long shutdown() waits, after an abort, for a background thread stuck in a transport
  /// call before it leaves the thread behind (see Runtime::shutdown); on the global set, also
  /// how long shutdown() waits for the process sets' runtimes once the global set agreed to
  /// shut down (then they are aborted). Removing a process set never waits for its runtime.
  std::chrono::milliseconds shutdown_grace{10000};
};

/// User threads call enqueue(); only the background thread talks to the transport and the
/// executors. `run_once()` runs one cycle on the caller's thread, for tests that step it.
///
/// Process sets: the global runtime (set 0) owns one child Runtime per added set this rank is a
/// member of, each with its own transport, executors, controller (and cache) and background
/// thread, so work on disjoint sets proceeds concurrently and a stall in one set never blocks
/// another (the MPI backend needs MPI_THREAD_MULTIPLE for more than one set). Sets are added
/// and removed by collectives over the global set, executed by the global background thread
/// in the same order on every rank, so set ids agree everywhere.
///
/// Lifetime: own a started runtime through a std::shared_ptr and call shutdown() before
/// letting it go. Its background thread then holds a reference while it runs, so a thread
/// left stuck in a transport call by shutdown() never touches freed memory (the runtime is
/// destroyed, on that thread, when the call returns). A runtime not owned by a shared_ptr
/// (tests that step it) is never left running: its shutdown() waits for the thread.
class Runtime : public std::enable_shared_from_this<Runtime> {
 public:
  Runtime(Config config, RuntimeParts parts);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Starts the background thread.
  void start();
  /// Submits a collective; never blocks on other ranks. Bad requests give a failed handle.
  /// On the global runtime, an entry for another process set goes to that set's runtime.
  Handle enqueue(TensorEntry entry);
  /// Same, filling the table slot of `name` in place: `fill` gets an entry reset to defaults
  /// whose strings and vectors keep the capacity of the last collective of that name, so a
  /// steady stream of collectives allocates nothing but its handles. `fill` runs under the
  /// table's lock (it must only copy) and must set the request's name to `name`.
  Handle enqueue_with(const std::string& name, FunctionRef<void(TensorEntry*)> fill);
  /// enqueue_with() for a fill that updates the slot in place: `refill` gets the entry as the
  /// last collective of `name` left it (not reset: only its handle and allocator are gone) and
  /// must leave it exactly as a fill of a reset entry would. It returns true when it changed no
  /// request field (the parameters of that last collective): negotiation then takes the cache
  /// entry that request hit without comparing them again (TensorEntry::request_unchanged).
  Handle enqueue_refill(const std::string& name, FunctionRef<bool(TensorEntry*)> refill);
  /// Moves `entry` into a table slot for enqueue_with(), keeping what the slot keeps across
  /// collectives of its name (negotiation hint, device event).
  static void fill_slot(TensorEntry* slot, TensorEntry&& entry);

  /// Collective over the global set (call on the global runtime): every rank passes the same
  /// global ranks. The handle's state()->result is the new set's id once it completes.
  /// `refused` non-empty: this rank refuses the call (a mistake found by its caller), which
  /// fails every rank's call with that reason once all have called (see Request::refused).
  Handle add_process_set(const std::vector<int32_t>& ranks, const std::string& refused = "");
  /// Collective over the global set; fails when some rank still has work in flight on `id`.
  /// From the call until the removal failed, work submitted on `id` on this rank fails at once
  /// ("being removed"), so a removal that goes ahead finds the set idle on every rank.
  Handle remove_process_set(int32_t id);
  /// The runtime running set `id` on this rank (this runtime for its own id). Errors name the
  /// set: unknown or removed, or this rank is not a member. The pointer shares ownership when
  /// this runtime is owned by a shared_ptr (it then stays valid after the owner lets go).
  Result<std::shared_ptr<Runtime>> process_set(int32_t id);
  /// This rank refused a call on set `set` before it could know its tensor (a name in hvd's
  /// own name space, an unknown or removed set): `what` (the error this rank raises) goes as a
  /// refusal notice (Controller::notice) to the runtime of `set` when this
  /// rank is a member, to none when the set exists without it (its members never wait for this
  /// rank), and to this runtime and every process set's when there is no such set (the other
  /// ranks may have meant any of them). Then the tensor the other ranks wait for from this rank
  /// alone fails on every rank naming this rank and `what`. Nothing on a one-rank set. Call
  /// it on the global runtime (a process set's passes it on to its own set only).
  void notice_refusal(int32_t set, const std::string& what);
  /// Global ranks of set `id` (all ranks for 0); empty when there is no such set.
  std::vector<int32_t> process_set_ranks(int32_t id) const;
  /// Ids of the sets that exist (0 first).
  std::vector<int32_t> process_set_ids() const;
  /// Collectives submitted to this runtime and not yet finished (its own lock).
  size_t in_flight() const;
  int32_t process_set_id() const { return parts_.process_set; }
  /// Finishes or fails everything in flight, stops the background thread. Idempotent. After
  /// an abort, a thread still stuck in a transport call after RuntimeParts::shutdown_grace is
  /// left behind, holding its own reference to this runtime (see the class comment). Calls
  /// racing shutdown() on other threads get failed handles ("submitted while hvd is shutting
  /// down", or the stop status), never a crash.
  void shutdown();
  /// Fails every pending handle and every later call with `s` (fatal transport error, dead peer).
  /// Handles complete at once, even those of a collective an executor is running now (it may
  /// be stuck in a call to a dead peer that never returns): their buffers are let go only when
  /// the executor returns (HandleState::released(), Handle::released()).
  void abort(const Status& s);
  /// One negotiation round plus execution. Returns false once the runtime has stopped.
  bool run_once();

  /// Starts writing the timeline to `path` (rank 0 of the global set, every rank of it with
  /// HVD_TIMELINE_ALL_RANKS to Timeline::path_for_rank(path, rank); a no-op elsewhere),
  /// closing any timeline already being written. Errors when the file cannot be opened.
  /// `mark_cycles` (or HVD_TIMELINE_MARK_CYCLES): mark the start of every round.
  Status start_timeline(const std::string& path, bool mark_cycles = false);
  /// Closes the timeline (a valid JSON array). No-op when none is being written.
  void stop_timeline();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Config& config() const { return config_; }
  /// Counters for tests and benchmarks.
  struct Stats {
    std::atomic<uint64_t> rounds{0}, full_rounds{0}, responses{0}, fused_batches{0};
    /// Table slots visited by drop_idle_slots(): stays within a small multiple of the names
    /// ever submitted (a sweep per insertion would make enqueue linear in the names in flight).
    std::atomic<uint64_t> slot_sweep_visits{0};
    /// Names whose slot was looked up by hashing: the order of the last submissions did not
    /// predict them (a steady training loop: at most one per step, where its sequence starts).
    std::atomic<uint64_t> slot_lookups{0};
    /// Ready ages noted for late-rank queries: only while rank 0 records late ranks (its
    /// timeline on); zero otherwise, so a collective pays nothing for the timeline.
    std::atomic<uint64_t> ages_noted{0};
  };
  const Stats& stats() const { return stats_; }
  /// User threads waiting right now on an unfinished handle of this runtime (not of another
  /// runtime or process set): while there is one, the loop stops gathering a burst.
  int waiting_users() const { return waiters_->waiting(); }
  /// The pool of hvd-allocated outputs of this process set.
  const OutputPool& output_pool() const { return *pool_; }
  /// Set when the runtime stopped for good (shutdown agreed or aborted): the reason.
  Status stopped_status() const;
  bool stopped() const;

 private:
  void loop();
  /// Queues `text` for the controller (Controller::notice) and wakes the loop.
  void post_notice(const std::string& text);
  bool wait_for_work(std::vector<TensorEntry*>* fresh, bool* want_shutdown);
  /// Marks a finished table entry idle (mu_ held): its slot waits for the next collective of
  /// its name, so entries are allocated and freed on the user's side only.
  void retire(TensorEntry* e);
  /// Retires the entries still active once the loop has ended for good (mu_ held): an abort
  /// completed them, and no executor can use their buffers any more (HandleState::released()).
  void release_leftovers();
  /// Erases every idle slot (mu_ held); runs when a new name arrives and the idle slots number
  /// at least max(kMaxTable, active slots), so its cost is amortized over as many insertions.
  void drop_idle_slots();
  /// A process set's broadcast names its root by global rank: rewrites `r->root` to the rank
  /// within the set, or says that the root is not a member (no change on the global set).
  Status global_root_to_set_rank(Request* r) const;
  /// A handle failed at once with `why`, naming the op and tensor `fill` describes.
  static Handle refuse(FunctionRef<bool(TensorEntry*)> fill, const Status& why);
  /// enqueue_with (`reset`: the slot is reset before `fill`) and enqueue_refill.
  Handle enqueue_slot(const std::string& name, FunctionRef<bool(TensorEntry*)> fill, bool reset);
  /// How long an idle loop sleeps before taking part in a round anyway (zero: until work
  /// comes). Collective rounds need every rank, so without these heartbeats one rank that
  /// never submits would leave the others blocked in a round and rank 0 unable to see (and
  /// report) the stall.
  std::chrono::milliseconds idle_heartbeat() const { return stall_.heartbeat(); }
  /// The table entry of an add/remove process-set collective (names numbered per runtime).
  TensorEntry set_op_entry(OpType op, const char* prefix);
  void execute(const Response& r);
  /// Runs the cached entries of a round in the batches plan_fusion_runs() makes; `signature`
  /// (RoundResult::cached_signature) equal to the last planned one: the same batches again.
  void execute_cached(const std::vector<TensorEntry*>& ready, uint64_t signature);
  /// Runs `r` on `entries` (this rank's part, in name order; stand-ins for joined ranks) and
  /// completes and retires `mine`, the ones from this rank's table.
  void run(const Response& r, const std::vector<TensorEntry*>& entries,
           const std::vector<TensorEntry*>& mine);
  Status execute_process_set_op(const Response& r, TensorEntry* e);
  /// Rank 0 of the global set writes the timeline, its process sets' runtimes to the same file
  /// (HVD_TIMELINE_ALL_RANKS: every rank).
  bool writes_timeline() const {
    return (rank_ == 0 || config_.timeline_all_ranks) && parts_.process_set == 0;
  }
  /// The timeline being written (null: none, or not written on this rank).
  std::shared_ptr<Timeline> active_timeline() const;
  /// Process set runtimes (before start()): write to the global set's timeline; `global_ranks`
  /// translates the set's ranks for it.
  void share_timeline(const Runtime& global, std::vector<int32_t> global_ranks);
  /// shutdown() without the process sets' part.
  void shutdown_own();
  /// Asks the loop to stop (its shutdown is negotiated with the set's other ranks) without
  /// waiting for it.
  void request_stop();
  /// The process sets' runtimes, removed ones still stopping included.
  std::vector<std::shared_ptr<Runtime>> set_runtimes(bool take);
  /// shutdown() of the process sets once the global set agreed to shut down: by then every
  /// rank has asked every set to stop, so a set that does not stop within the grace is stuck
  /// (a call that never returns): it is aborted and its thread left behind.
  void stop_children(const std::vector<std::shared_ptr<Runtime>>& sets);
  /// shutdown() that waits at most `limit` for the loop to end, then aborts with `late`
  /// (failing what is left) and leaves the thread to end on its own, holding its reference.
  /// True when it stopped in time.
  bool stop_within(std::chrono::milliseconds limit, const Status& late);

  // Lock contract (the whole order: docs/internals.md, "The lock contract"). "mu_": guarded by
  // mu_ (user threads and the background thread); "loop": the background thread's alone (or
  // run_once()'s caller when not started); "const": set by the constructor. Handles are
  // completed, and their callbacks run, only after mu_ is released (a callback may submit).
  // Under mu_ only: Completion::mu_ (abort() fails outstanding device work) and the device
  // executor's prepare_input() (Executor's rule: it must not block). Held around mu_: the gate
  // of waiters_ (a user thread starting to wait on this runtime's handle runs its listener,
  // which takes mu_).
  // sets_mu_ and TimelineSlot::mu are leaves: nothing else is taken, and no child
  // runtime is called, while one of them is held.
  Config config_;          // const
  RuntimeParts parts_;     // const; the transport and executors are used by the loop only
  Controller controller_;  // loop
  int rank_, size_;        // const

  mutable std::mutex mu_;
  std::condition_variable cv_;
  /// A table entry: active from enqueue to completion, then idle until its name comes again.
  struct Slot : TensorEntry {
    bool active = false;
    const std::string* key = nullptr;  // its name: the table's key (nodes do not move)
    // Its request passed enqueue_slot's checks last time: unchanged (request_unchanged), it
    // is not checked again.
    bool accepted = false;
    // Its place in order_ when it was learned there (order_[order_index] == this: still valid).
    size_t order_index = SIZE_MAX;
    // The handle states of its last two collectives (mu_): the next one recycles one that
    // nothing else refers to any more (HandleState::recycle) instead of allocating. Two,
    // because a caller often still holds the last handle of a name while it submits the next
    // (`h[i] = allreduce_async(...)`).
    std::shared_ptr<HandleState> spare[2];
  };
  /// A handle state for the next collective of `slot` (mu_ held): a recycled spare, else new.
  static std::shared_ptr<HandleState> take_handle_state(Slot* slot);
  using Table = std::unordered_map<std::string, Slot>;
  std::vector<TensorEntry*> queue_;   // mu_: newly enqueued entries (active slots)
  std::vector<std::string> notices_;  // mu_: post_notice()'s, for the loop's controller
  size_t queued_at_notice_ = 0;       // mu_: queue_'s size when the last one came
  Table table_;                       // mu_: name -> slot (a slot's entry: see retire())
  size_t active_ = 0;                 // mu_: active slots
  // mu_: the slots in the order they were last submitted, and the position the next
  // submission is expected at. A training loop submits the same names in the same order every
  // step: the next name is found by one comparison instead of hashing it (see find_slot()).
  // Cleared whenever slots are erased.
  std::vector<Slot*> order_;
  size_t order_pos_ = 0;
  // mu_: the last submission followed a learned order_ (predicted or re-synchronised), rather
  // than extending it: order_pos_ at order_.size() then means the step's last name came, which
  // ends a settling burst at once (burst_complete()).
  bool order_followed_ = false;
  bool burst_complete() const {
    return order_followed_ && !order_.empty() && order_pos_ == order_.size();
  }
  /// The slot of `name` (mu_ held): the one order_ predicts when the name matches, else the
  /// table's (null: none). note_order() records the slot taken.
  Slot* find_slot(const std::string& name) {
    if (order_pos_ < order_.size() && same_text(*order_[order_pos_]->key, name)) {
      return order_[order_pos_];  // the common case, inline: the predicted name
    }
    return find_slot_slow(name);
  }
  Slot* find_slot_slow(const std::string& name);
  void note_order(Slot* slot) {
    if (order_pos_ < order_.size() && order_[order_pos_] == slot) {
      ++order_pos_;  // as predicted; at the end, the step is complete: a settling loop goes
      if (order_pos_ == order_.size() && settling_) cv_.notify_one();
      return;
    }
    note_new_order(slot);
  }
  void note_new_order(Slot* slot);
  // mu_: device work handed to handles (pruned as it finishes): an abort fails what is left.
  std::vector<std::weak_ptr<Completion>> outstanding_;
  static constexpr size_t kMaxTable = 8192;     // idle slots kept (at least; see drop_idle_slots)
  std::vector<TensorEntry*> fresh_;             // loop: this round's new entries
  std::vector<const Request*> ready_requests_;  // loop: execute_cached scratch
  // loop: execute_cached's responses, the k-th batch of a round in the k-th, rewritten each
  // round (the same batches come round after round: their names keep their memory).
  std::vector<Response> cached_batches_;
  std::vector<size_t> cached_runs_;         // loop: the batches' ends (plan_fusion_runs)
  uint64_t planned_signature_ = 0;          // loop: the round signature they were planned for
  std::vector<TensorEntry*> cached_batch_;  // loop: execute_cached scratch
  bool shutdown_requested_ = false;         // mu_
  // mu_: the loop is blocked waiting for the first request of a burst (enqueue wakes it).
  bool sleeping_ = false;
  bool pausing_ = false;   // mu_: backing off after fruitless rounds (new work ends it)
  bool woken_ = false;     // mu_: a submission notified the sleeping or pausing loop
  bool settling_ = false;  // mu_: gathering a burst (a waiting user thread ends it)
  // const: who waits on this runtime's handles (its listener ends settling; closed by the
  // destructor). Handles keep it alive.
  std::shared_ptr<WaitGroup> waiters_;
  int fruitless_rounds_ = 0;  // loop: consecutive rounds that matched nothing
  std::chrono::steady_clock::time_point round_end_{};  // loop: when the last round ended
  // The last round said rank 0 records late ranks (it needs every rank's submission times).
  std::atomic<bool> ages_flagged_{false};
  static constexpr std::chrono::microseconds kSettleStep{30};
  static constexpr std::chrono::microseconds kSettleCap{1000};
  // mu_: set once the runtime stopped for good, with the reason.
  bool stopped_ = false;
  Status stop_status_;
  // The timeline (HVD_TIMELINE or start_timeline()), shared by the global set and its process
  // sets; `writes` (const) is false where none is ever written (no lock taken there). The
  // background threads take a reference per round and response, so stop_timeline() never
  // closes a file in use.
  struct TimelineSlot {
    bool writes = false;
    /// A timeline was started on this rank (written here or not): submissions are stamped
    /// for its waits and late ranks. Off, enqueue reads no clock.
    std::atomic<bool> armed{false};
    mutable std::mutex mu;
    std::shared_ptr<Timeline> timeline;  // mu
  };
  std::shared_ptr<TimelineSlot> timeline_slot_;  // const after share_timeline()
  std::vector<int32_t> global_ranks_;            // const: process set: set rank -> global rank
  // Set by start() under mu_; shutdown() joins it (or leaves it behind, see shutdown()).
  // loop_exited_ (mu_) and exit_cv_ (with mu_) tell shutdown() the loop has ended.
  std::thread thread_;
  bool loop_exited_ = false;
  std::condition_variable exit_cv_;
  StallInspector stall_;  // rank 0 reports (and may stop on) stalls after each round
  Stats stats_;
  // Outputs hvd allocates come from here, so repeated calls reuse mapped memory.
  std::shared_ptr<OutputPool> pool_ = OutputPool::create();

  // Process sets (global runtime only). sets_mu_ is never held while calling into a child.
  mutable std::mutex sets_mu_;
  std::map<int32_t, std::shared_ptr<Runtime>> children_;  // sets this rank is a member of
  // Removed sets whose runtimes are still stopping (their threads own them meanwhile).
  std::vector<std::weak_ptr<Runtime>> stopping_;
  std::map<int32_t, std::vector<int32_t>> set_ranks_;  // every set: its global ranks
  int32_t next_set_id_ = 1;                            // loop (the global set's)
  std::atomic<uint64_t> set_ops_{0};  // names of add/remove requests (user threads)
  // mu_ (of a process set's runtime): remove_process_set calls on this rank not yet executed
  // or failed; while non-zero, enqueue refuses (see remove_process_set).
  int removals_ = 0;
  /// Closes this (idle) set's runtime to new work for a removal; false (left open) when it
  /// has work in flight.
  bool close_for_removal();
  /// Reopens the set that `removal` (this rank's request, which failed) closed (global
  /// runtime).
  void reopen_after_failed_removal(const Request& removal);
};

}  // namespace hvd::core
