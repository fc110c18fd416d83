// SPDX-License-Identifier: Apache-2.0
// The gradient registry behind every DistributedOptimizer (libtorch and Python): which parameters
// are reduced, under which names, and when. It knows no framework: a parameter is a key (the
// tensor's identity) and a GradParam the framework implements; a reduction is started and applied
// by the framework's GradFrontend. The libtorch optimizer (optimizer/src/torch_grad_ops.cc) and
// the Python binding (bindings/src/py_registry.cc) drive the same rules.
//
// One entry per parameter tensor, whatever number of optimizers hold it. Each entry walks a small
// state machine:
//
//   kClean --pre-hook--> kAccumulating --post-hook, passes == backward_passes_per_step (and every
//   group mate ready, and no reduction of it in flight)--> kQueued (waiting for its bucket or the
//   end of the backward pass) --submitted--> kInFlight --completed--> kClean (.grad holds the
//   reduced gradient)
//
// kClean means: .grad holds a value that is the same on every rank (a reduction's result, zeros
// after zero_grad(), or nothing). A backward pass that starts accumulating into such a gradient
// first sets it aside (GradParam::stash; a pointer move, no copy), so that only what the pass adds
// is reduced and the set-aside value is added back afterwards: several backward passes before a
// step, module.zero_grad(), retain_graph, a second loss through a shared encoder all give the
// gradients plain PyTorch would, for Sum as for Average. A pre-hook whose pass accumulates nothing
// (torch.autograd.grad) is undone when the pass ends: .grad is left as it was.
//
// No rank ever waits inside a backward pass: which parameters a pass reaches, and how many passes
// come before a step, may differ between ranks (a data-dependent branch, a mixture of experts).
// A pass that starts while the entry's reduction is in flight takes the gradient away from it
// (GradParam::release): the reduction goes on "aside" and its result is added to the set-aside
// value when it completes. A name is only ever in flight once, so the entry's next reduction
// waits (accumulating locally) until that one completed; nothing blocks.
//
// Reductions pair across ranks by name in submission order, so each rank's k-th reduction of an
// entry since the last agreement meets every other rank's k-th. synchronize() is the agreement:
// it submits what has not been (the ranks where a parameter got no gradient contribute zeros,
// under the same name), exchanges with one small allreduce (max) how many reductions each
// unit (a bucket, a group, or an entry alone) has had on each rank, and every rank with fewer
// submits zeros until all have as many. The exchange holds a few values per unit, not per entry.
// Reductions are sums, so the total is one process's gradient whatever the pairing: every rank
// ends with the same bits. Zeroing a gradient (zero_grad(), or module.zero_grad() seen at the
// next pass) drops the reductions started before it; the agreement checks that every rank
// dropped as many, and otherwise fails on every rank (a reduction then mixed dropped and kept
// gradients), saying to step or synchronize before zeroing.
//
// A kClean entry remembers the owners (optimizers) that have not stepped on its reduction yet
// ("pending"): their synchronize() reuses it.
//
// Names on the wire: "grad.<name>", the first name given for the tensor (or "param.<n>" in
// registration order). Each registration of a new tensor under a name takes that name's next
// number, never given out again: the first "grad.<name>", then "#2", "#3", ... (two models whose
// parameters are both "main.0.weight", a new model built after an old one). The numbers depend
// only on the order of registrations, which every rank repeats, never on when an old optimizer
// is destroyed (garbage collection differs across ranks). A tensor registered again after its
// entry was removed keeps its wire name when the frontend remembers it (ParamSpec::wire): on a
// rank where the old optimizer is still alive it shares the old entry and that name. Two
// different tensors under one name inside one optimizer are an error.
//
// Bucket views (ReduceSettings::bucket_view, DDP's gradient_as_bucket_view): the gradients of an
// owner's eligible entries live as views into one flat buffer per bucket, so a ready bucket is
// reduced by one in-place allreduce of that buffer (no copy into a fusion buffer, none back).
// Eligible: the setting on, held by this one owner, in no user group, a non-empty
// GradParam::bucket_kind(). The registry stamps the order in which eligible entries become ready
// (after_pass reaching backward_passes_per_step); synchronize()'s agreement carries one more
// value, "a layout is wanted" (no layout yet, the eligible entries changed, or a rank saw every
// member ready in an order other than the layout's: at most kMaxOrderRelayouts times per owner).
// When some rank wants one, after the step's reductions completed, one more allreduce (max)
// exchanges each entry's observed position (unreached: after all reached, in entry order) and
// whether it is ineligible on some rank; every rank sorts by the maxima (ties: entry order) and
// cuts the same buckets: runs of one bucket_kind, closed once they hold bucket_view_bytes. A
// bucket is a Group (kind kBucket) named "hvd.bucket.<g>.<k>" (g counts layouts per process set,
// k the bucket): it is reduced as a unit like a user group (every member ready, or synchronize()
// filling what a rank did not reach), through GradFrontend::submit_bucket(). The frontend owns
// the buffers (make_bucket, GradParam::reattach, leave_bucket). A bucket dissolves when a member
// gets a second owner or is removed (its members keep .grad's value and are reduced one by one
// until the owner's next layout).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd::optim {

/// How a parameter's gradient is reduced; optimizers sharing a parameter must agree.
struct ReduceSettings {
  ReduceOp op = ReduceOp::kAverage;
  std::string compression = "none";  ///< the frontend's name for its compressor
  int backward_passes_per_step = 1;
  double predivide = 1.0;
  int32_t process_set = 0;
  bool sparse_as_dense = false;
  /// Gradients as views into per-bucket flat buffers (see the file comment). Not part of ==:
  /// an entry held by several owners is never bucketed, whatever they asked.
  bool bucket_view = false;
  /// A bucket is closed once it holds this many bytes (bucket_view only).
  size_t bucket_view_bytes = size_t{4} << 20;
  bool operator==(const ReduceSettings& o) const {
    return op == o.op && compression == o.compression &&
           backward_passes_per_step == o.backward_passes_per_step && predivide == o.predivide &&
           process_set == o.process_set && sparse_as_dense == o.sparse_as_dense;
  }
  std::string str() const;
};

struct GradEntry;

/// The framework's side of one registered parameter. Every method is called with the registry's
/// lock held (on a Python thread: with the GIL too).
class GradParam {
 public:
  virtual ~GradParam() = default;
  /// Bytes of the gradient (bucketing).
  virtual size_t nbytes() const = 0;
  /// For messages: "float32[64, 32] at 0x..." .
  virtual std::string describe() const = 0;
  /// The entry now exists: install the hooks (before accumulation: GradRegistry::before_pass,
  /// after it: after_pass). Hold `e` weakly.
  virtual void attach(const std::weak_ptr<GradEntry>& e) = 0;
  /// The last owner is gone: remove the hooks.
  virtual void detach() = 0;
  /// Sets the current gradient aside (nothing to do when it has none): the next pass
  /// accumulates into an empty gradient; finish() adds it back.
  virtual void stash() = 0;
  /// Forgets what stash() set aside (the gradient is being zeroed).
  virtual void drop_stash() = 0;
  /// A pass begins while .grad is being reduced: .grad becomes empty, the reduction keeps its
  /// tensor (its result will be added to what stash() set aside).
  virtual void release() = 0;
  /// The pass of the last stash() (`released` false) or release() (true) accumulated nothing
  /// (torch.autograd.grad): puts back what it took from .grad, if .grad is still empty.
  virtual void restore(bool released) = 0;
  /// The reductions are over: adds what results were set aside to .grad (or makes it .grad).
  virtual void settle() = 0;
  /// True when .grad is still what the reduction in flight started from (neither replaced nor
  /// changed in place). A bucket member's views share one version counter: an in-place change of
  /// any member while the bucket is in flight counts for every member.
  virtual bool untouched() const = 0;

  // Bucket views. A frontend that does not implement them keeps the defaults: never bucketed.

  /// The kind of flat buffer the gradient can live in, the same on every rank for this parameter
  /// (dtype and device type, never a device index: "float32/cpu"); entries of one kind may share
  /// a bucket. Empty: never bucketed (sparse, not strided, ...).
  virtual std::string bucket_kind() const { return {}; }
  /// Bucketed and the bucket's buffer not being reduced (its last reduction done): when .grad is
  /// not this parameter's view, copies .grad's value into the view (zeros when .grad is empty)
  /// and makes .grad the view, so that the next pass accumulates into it. Otherwise nothing.
  /// Called by the registry after each stash()/zeroing that starts a pass (pre-hook), so that
  /// zero_grad(set_to_none=True) costs one zero fill, not a copy at submission.
  virtual void reattach() {}
  /// The parameter leaves its bucket (dissolved, or a new layout): .grad keeps its value (it may
  /// stay a view of the old buffer, which lives as long as something holds it); later
  /// reductions are its own (submit()).
  virtual void leave_bucket() {}
};

/// One submitted reduction; wait() is called without the registry's lock.
class GradReduction {
 public:
  virtual ~GradReduction() = default;
  virtual Status wait() = 0;
  /// True once it finished (wait() then returns at once). Never blocks.
  virtual bool done() = 0;
};

/// What the registry asks of the framework.
class GradFrontend {
 public:
  virtual ~GradFrontend() = default;
  /// Takes the registry's lock (Python: never blocks on it while holding the GIL).
  virtual void lock(std::mutex& mu) { mu.lock(); }
  /// Starts reducing the current gradients of `params` (zeros where there is none; zeros and
  /// .grad untouched when `zeros`) under `name`: one allreduce, or one grouped allreduce when
  /// `grouped`.
  virtual Result<std::shared_ptr<GradReduction>> submit(const std::vector<GradParam*>& params,
                                                        const std::string& name, bool grouped,
                                                        const ReduceSettings& s, bool zeros) = 0;
  /// Where a finished reduction's result goes.
  enum class Use {
    kGrad,   ///< .grad becomes the result plus what stash() set aside (unless the user replaced
             ///< or changed .grad meanwhile: then it is left as the user made it)
    kAside,  ///< added to what stash() set aside (.grad is a later pass's)
    kDrop,   ///< nowhere (the gradient was zeroed after it started)
  };
  /// The reduction `r` of `p` (member `index` of it) is over. Not `ok`: the stash is dropped.
  virtual void finish(GradParam& p, GradReduction& r, size_t index, bool ok, Use use) = 0;
  /// finish() of several members of one reduction `r` (params[i] is member index[i], its use
  /// uses[i]), in this order: one call per reduction, so that a frontend can finish a bucket
  /// whose result is already in place in its views without a call per member. Default: finish()
  /// each.
  virtual void finish_all(const std::vector<GradParam*>& params, GradReduction& r,
                          const std::vector<size_t>& index, bool ok, const std::vector<Use>& uses) {
    for (size_t i = 0; i < params.size(); ++i) finish(*params[i], r, index[i], ok, uses[i]);
  }
  /// untouched() of each of `params` (members of one unit in flight). Default: each.
  virtual std::vector<bool> untouched_all(const std::vector<GradParam*>& params) {
    std::vector<bool> out;
    out.reserve(params.size());
    for (GradParam* p : params) out.push_back(p->untouched());
    return out;
  }
  /// drop_stash() of each of `params` (zero_grad()). Default: drop_stash() each.
  virtual void drop_stash_all(const std::vector<GradParam*>& params) {
    for (GradParam* p : params) p->drop_stash();
  }
  /// settle() of each of `params` (the end of synchronize()). Default: settle() each.
  virtual void settle_all(const std::vector<GradParam*>& params) {
    for (GradParam* p : params) p->settle();
  }
  /// Element-wise maximum of `values` over the ranks of `process_set` (one allreduce named
  /// `name`); blocks.
  virtual Result<std::vector<int64_t>> agree(const std::string& name,
                                             const std::vector<int64_t>& values,
                                             int32_t process_set) = 0;
  /// Runs GradRegistry::end_of_pass() when the current backward pass ends; false when no backward
  /// pass is running (the caller then submits at once).
  virtual bool defer_to_end_of_pass() { return false; }

  // Bucket views (see the file comment); only called for parameters with a bucket_kind().

  /// Makes `members` (in this order, one bucket_kind) the bucket `name`: one flat buffer, each
  /// member's .grad a view of its slice holding .grad's value (zeros where .grad is empty); a
  /// member of an earlier bucket leaves it. Called inside synchronize() with nothing of the
  /// members in flight, in the same order on every rank. An error leaves the members unbucketed
  /// (the registry then reduces them one by one on this rank: only for failures every rank
  /// shares, like running out of memory, as the layout is not agreed again).
  virtual Status make_bucket(const std::vector<GradParam*>& members, const std::string& name,
                             const ReduceSettings& s) {
    (void)members, (void)name, (void)s;
    return Status();
  }
  /// Starts the reduction of bucket `name` (members as make_bucket got them): each member
  /// reattach()ed first (its .grad copied into its view where it is not the view, zeros where
  /// .grad is empty), then ONE allreduce of the flat buffer in place (compression: cast into a
  /// 16-bit flat buffer, reduced, cast back into the views at finish()). `zeros`: a zero buffer
  /// of the same layout is reduced and .grad is untouched (finish() then gets Use::kAside or
  /// kDrop). Nothing of the bucket is in flight when it is called. finish() follows per member
  /// (index = position in the bucket). Default: one grouped allreduce (submit()).
  virtual Result<std::shared_ptr<GradReduction>> submit_bucket(
      const std::vector<GradParam*>& members, const std::string& name, const ReduceSettings& s,
      bool zeros) {
    return submit(members, name, true, s, zeros);
  }
  /// A bucket's reduction, submitted in place (of its buffer, not of zeros or a 16-bit copy),
  /// still works on every member's .grad: each is its view, and nobody wrote to the buffer since.
  /// One answer for all members (untouched_all() of each, at bucket cost). false: not known (the
  /// registry asks member by member).
  virtual bool bucket_untouched(const std::vector<GradParam*>& members) {
    (void)members;
    return false;
  }
  /// The end of a bucket's in-place reduction (ok) when its result is already every member's
  /// .grad (bucket_untouched(), and nothing set aside): forgets the reduction, writes nothing, and
  /// returns true. false: nothing was done (the registry finishes member by member).
  virtual bool finish_bucket(const std::vector<GradParam*>& members) {
    (void)members;
    return false;
  }
};

/// One registered parameter. Registry-owned: frontends read `name` and `wire`, nothing else.
struct GradEntry {
  enum class State { kClean, kAccumulating, kQueued, kInFlight };
  struct Group;
  // What hooks and steps read (first, together: a step of a 1,024-member bucket walks every
  // member, and each member's few cache lines are what it costs).
  State state = State::kClean;
  int passes = 0;
  bool zeroed = false;  ///< zero_grad() of an owner since the last pass: nothing to set aside
  bool aside = false;   ///< `reduction` no longer reduces .grad (a later pass released it)
  bool drop = false;    ///< `reduction`'s result is dropped (the gradient was zeroed)
  bool open = false;    ///< a pre-hook set .grad aside and its pass has not accumulated yet
  bool open_released = false;  ///< ... by release() (else by stash())
  bool open_zeroed = false;    ///< `zeroed` before that pre-hook
  bool waiting = false;        ///< listed in the registry's waiting_
  bool registered = false;     ///< in the registry's maps (false once removed)
  /// Finished by GradFrontend::finish_bucket() and nothing set aside since: no settle() needed.
  bool settled = false;
  size_t slot = 0;           ///< index in a grouped reduction
  int64_t rounds = 0;        ///< reductions started since the last agreement
  int64_t discarded = 0;     ///< how many of those were dropped
  uint64_t ready_stamp = 0;  ///< when it became ready since the last agreement (0: not yet)
  uint64_t wire_hash = 0;    ///< FNV-1a of wire (the agreement's)
  int64_t submissions = 0;   ///< reductions submitted under `wire` (GradRegistry::submissions())
  std::shared_ptr<GradReduction> reduction;  ///< the one in flight (its name is busy)
  std::shared_ptr<Group> group;
  std::unique_ptr<GradParam> param;
  std::vector<int64_t> pending;  ///< owners that have not stepped on the reduced gradient
  ReduceSettings settings;
  // Read at registration, layout and in errors.
  uint64_t key = 0;
  std::string name;                                     ///< the first name given (or "param.<n>")
  std::string wire;                                     ///< the reduction's name: "grad.<name>[#k]"
  std::vector<std::pair<int64_t, std::string>> owners;  ///< (owner id, label)
  std::vector<int64_t> open_pending;                    ///< `pending` before that pre-hook
  std::string owner_labels() const;
};

struct GradEntry::Group {
  std::string name;
  std::vector<std::shared_ptr<GradEntry>> members;
  std::vector<GradParam*> params;  ///< a bucket's: its members' params, in order
  bool bucket = false;   ///< a bucket of views (submit_bucket), else a user group (grouped submit)
  bool waiting = false;  ///< a member is listed in the registry's waiting_ (one is enough)
};

using EntryList = std::vector<std::shared_ptr<GradEntry>>;

/// A parameter as an optimizer hands it over; empty name = automatic.
struct ParamSpec {
  ParamSpec() = default;
  ParamSpec(std::string n, uint64_t k, std::unique_ptr<GradParam> p, std::string w = {})
      : name(std::move(n)), key(k), param(std::move(p)), wire(std::move(w)) {}
  std::string name;
  uint64_t key = 0;                  ///< the tensor's identity
  std::unique_ptr<GradParam> param;  ///< taken when the entry is new
  /// The wire name this same tensor (still alive since) had in an earlier registration, when the
  /// frontend remembers it; empty: none.
  std::string wire;
};

class GradRegistry {
 public:
  /// `bucket_bytes`: ready reductions queue until they hold this many bytes or the backward pass
  /// ends; 0 submits each at once.
  GradRegistry(GradFrontend& frontend, size_t bucket_bytes);

  /// Registers `params` for `owner`; `groups` are index lists into `params`. Validates first
  /// (one name for two tensors of this owner, shared settings, groups) and fails without
  /// changing anything.
  Result<EntryList> add(int64_t owner, const std::string& label, std::vector<ParamSpec> params,
                        const ReduceSettings& settings,
                        const std::vector<std::vector<size_t>>& groups);
  /// Drops `owner`; entries nobody holds lose their hooks (after their reduction in flight).
  void remove(int64_t owner, const EntryList& entries);
  /// True when some name would collide on the wire with a live entry of another tensor.
  bool has_live_name(const std::string& name) const;

  /// The pre-hook: a backward pass is about to accumulate into e's gradient.
  Status before_pass(const std::shared_ptr<GradEntry>& e);
  /// The post-hook: a backward pass has accumulated into e's gradient.
  Status after_pass(const std::shared_ptr<GradEntry>& e);
  /// Submits what is queued (the frontend calls it when a backward pass ends).
  Status end_of_pass();
  /// The end-of-pass call the frontend was asked for will not come (the pass raised): the next
  /// registry call forgets it. Takes no lock (may run while the pass unwinds).
  void pass_abandoned() { pass_abandoned_ = true; }
  /// Starts what has not started for `entries` and waits until all are reduced.
  Status synchronize(int64_t owner, const EntryList& entries);
  /// `owner` has applied the reduced gradients of `entries`.
  void consume(int64_t owner, const EntryList& entries);
  /// Before zero_grad(): waits for the reductions of `entries` in flight (failures are ignored:
  /// the results are about to be discarded) and starts a new round for each.
  void quiesce(const EntryList& entries);
  /// The first of `entries` whose reduction is queued or in flight, or null.
  std::shared_ptr<GradEntry> first_in_flight(const EntryList& entries);
  /// New backward_passes_per_step for `entries`; passes counted so far restart from zero.
  void set_backward_passes_per_step(const EntryList& entries, int passes);
  /// Reductions submitted per wire name since the registry was made (tests count them).
  std::map<std::string, int64_t> submissions() const;
  /// The bucket names of `entries` (bucket views), in the order of `entries`: "" where an entry
  /// is not in a bucket (tests, tracing).
  std::vector<std::string> bucket_names(const EntryList& entries) const;
  /// Layouts an owner rebuilds because the observed order changed (beyond the first layout and
  /// those forced by a change of its eligible entries).
  static constexpr int kMaxOrderRelayouts = 3;
  size_t bucket_bytes() const { return bucket_bytes_; }
  void set_bucket_bytes(size_t b) { bucket_bytes_ = b; }

 private:
  class Lock;
  /// A reduction to wait for, and what it completes: `entry`, or with `unit` set, each member of
  /// that group (as listed then) still on it. A bucket of 1,024 members is one of these.
  struct Wait {
    std::shared_ptr<GradEntry> entry;
    std::shared_ptr<GradEntry::Group> unit;
    std::shared_ptr<GradReduction> reduction;
  };
  using Waits = std::vector<Wait>;
  Status validate(const std::string& label, const std::vector<ParamSpec>& params,
                  const ReduceSettings& settings,
                  const std::vector<std::vector<size_t>>& groups) const;
  /// The wire name of a new entry for `p` (named `name`) in process set `set`: p.wire, or the
  /// name's next number in that set (names are unique per set, as negotiation needs; a rank
  /// outside a set registers nothing there).
  std::string new_wire_name(const ParamSpec& p, const std::string& name, int32_t set);
  /// p.wire was given out in `set` and is not in use there.
  bool usable_hint(const ParamSpec& p, int32_t set) const;
  /// `w` was given out in `set`: as a name's first wire name or as one of its numbers.
  bool numbered(int32_t set, const std::string& w) const;
  /// `w` is "<x>#k" and name x reached its number k in `set`.
  bool numbered_suffix(int32_t set, const std::string& w) const;
  void start_round(GradEntry& e);
  void set_aside(GradEntry& e);
  void open_pass(const std::shared_ptr<GradEntry>& e, bool released, bool zeroed);
  void close_open_passes();
  void check_abandoned(bool outside_pass = false);
  void ensure_end_of_pass();
  /// Drops e's reductions so far; `stash`: also what stash() set aside (else the caller does).
  void discard(GradEntry& e, bool stash = true);
  void complete(GradEntry& e, bool ok);
  /// complete() of entries sharing one reduction (a bucket or a group), one frontend call.
  void complete_all(const std::vector<GradEntry*>& es, bool ok);
  /// complete()'s bookkeeping after the frontend's finish().
  void after_finish(GradEntry& e, bool ok, GradFrontend::Use use);
  void poll(GradEntry& e);
  Status ready(const std::shared_ptr<GradEntry>& e);
  Status queue(const EntryList& entries, const std::string& group_name);
  Status flush();
  Status submit(const EntryList& entries, const std::string& group_name, bool zeros = false);
  bool group_ready(const GradEntry::Group& g) const;
  bool bucket_untouched(const GradEntry::Group& g);
  /// Exchanges the planned reduction counts per unit (entries[i] is in unit unit_index[i];
  /// `wants`, one per unit, replaced by the maxima) and checks that every rank dropped as many of
  /// each entry (the lock stays held: the counts must not move). One allreduce of O(units)
  /// values; a second one of O(entries) only when some unit's dropped counts differ (between its
  /// members or ranks). `layout`: what this rank asks (wants_layout()), replaced by the maximum
  /// over the ranks.
  Status agree(const EntryList& entries, const std::vector<size_t>& unit_index,
               std::vector<int64_t>& wants, int64_t& layout);
  Waits in_flight(const EntryList& entries) const;
  /// Bucket views: entry `e` of `owner` may be bucketed now (on this rank).
  bool bucket_eligible(int64_t owner, const GradEntry& e) const;
  /// Whether this rank asks for a new layout of `owner`'s `entries` at this agreement: 0 no,
  /// kOrderChanged (a rank saw another order), kLayoutMissing (none yet, or the eligible entries
  /// changed).
  int64_t wants_layout(int64_t owner, const EntryList& entries) const;
  static constexpr int64_t kOrderChanged = 1, kLayoutMissing = 2;
  /// The layout exchange and the new buckets (after the step's reductions completed).
  Status relayout(int64_t owner, const EntryList& entries);
  /// Dissolves `g` (a bucket or a user group): members leave it.
  void dissolve(std::shared_ptr<GradEntry::Group> g);
  void remove_locked(Lock& lk, int64_t owner, const EntryList& entries);
  void drain_deferred(Lock& lk);
  /// Waits for `waits` (lock released meanwhile, `lk` re-taken) and finishes them.
  Status wait_and_finish(Lock& lk, const Waits& waits);

  GradFrontend& fe_;
  size_t bucket_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<GradEntry>> by_key_;
  std::map<std::pair<int32_t, std::string>, std::shared_ptr<GradEntry>> by_wire_;  ///< (set, wire)
  uint64_t auto_names_ = 0;
  std::map<std::pair<int32_t, std::string>, uint64_t> wire_numbers_;  ///< (set, "grad.<name>")
  std::vector<std::pair<EntryList, std::string>> queued_;
  size_t queued_bytes_ = 0;
  bool end_of_pass_queued_ = false;
  std::atomic<bool> pass_abandoned_{false};
  EntryList opened_;   ///< entries with `open` set
  EntryList closing_;  ///< close_open_passes()'s list (opened_ swapped in)
  EntryList waiting_;  ///< ready while their name was busy: queued when it frees
  Status failed_;      ///< a reduction that failed while completed by a poll: synchronize() says
  std::map<std::string, int64_t> retired_submissions_;  ///< of removed entries, by wire name
  struct Layout {
    EntryList order;             ///< the bucketed entries, in layout order
    std::vector<bool> eligible;  ///< bucket_eligible() of the owner's entries then
    int order_relayouts = 0;
    uint64_t shape = 0;  ///< shape_ when it was built
  };
  std::map<int64_t, Layout> layouts_;        ///< per owner (bucket views)
  std::map<int32_t, uint64_t> layout_gens_;  ///< layouts built per process set (bucket names)
  uint64_t ready_clock_ = 0;                 ///< ready_stamp source
  /// Counts changes of owners and groups (registration, removal, a group made or dissolved): a
  /// layout built at the current count needs no eligibility check (wants_layout()).
  uint64_t shape_ = 1;
  std::atomic<std::thread::id> holder_{};                ///< the thread holding mu_
  std::vector<std::pair<int64_t, EntryList>> deferred_;  ///< removals asked for by holder_
  bool draining_ = false;
};

}  // namespace hvd::optim
