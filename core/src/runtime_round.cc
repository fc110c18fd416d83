// SPDX-License-Identifier: Apache-2.0
// One round of the background loop: negotiate, fuse, execute, complete handles.
#include <algorithm>
#include <chrono>

#include "finished.h"
#include "guarded.h"
#include "hvd/core/fusion.h"
#include "hvd/core/logging.h"
#include "hvd/core/runtime.h"
#include "hvd/core/validation.h"

namespace hvd::core {

using detail::Finished;
using detail::guarded;

namespace {

// The response of cached allreduces / broadcasts [first, last), written into *r: it follows from
// the requests. Every field as response_of() sets it; the names and numels vectors (and the
// names' own strings) keep the memory of the last response written into *r.
void response_for_into(Response* r, TensorEntry* const* first, TensorEntry* const* last) {
  std::vector<std::string> names = std::move(r->names);
  std::vector<int64_t> numels = std::move(r->numels);
  *r = Response{};
  copy_params((*first)->request, r);
  const auto n = static_cast<size_t>(last - first);
  names.resize(n);
  numels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    names[i] = first[i]->request.name;
    numels[i] = shape_numel(first[i]->request.shape);
  }
  r->names = std::move(names);
  r->numels = std::move(numels);
}

Response response_for(TensorEntry* const* first, TensorEntry* const* last) {
  Response r;
  response_for_into(&r, first, last);
  return r;
}

}  // namespace

bool Runtime::run_once() {
  bool want_shutdown = false;
  fresh_.clear();
  if (!wait_for_work(&fresh_, &want_shutdown)) return false;
  Status submitted = guarded("submitting", [&] {
    for (TensorEntry* e : fresh_) controller_.submit(e);
  });
  if (!submitted.ok()) controller_.fail(submitted);  // the next round stops every rank

  RoundResult round;
  std::shared_ptr<Timeline> tl = active_timeline();
  const auto round_start = Timeline::Clock::now();
  controller_.set_wants_ages(tl && rank_ == 0);  // as run() decides who asks about late ranks
  Status s = controller_.run_round(want_shutdown, &round);
  ++stats_.rounds;
  if (!s.ok()) {
    HVD_LOG(Error) << "negotiation failed: " << s.message();
    abort(s);
    return false;
  }
  round_end_ = Timeline::Clock::now();
  ages_flagged_.store(controller_.ages_wanted(), std::memory_order_relaxed);
  std::vector<StalledTensor> late = controller_.take_late();
  if (tl) {
    auto partial =
        rank_ == 0 && round.full_round ? controller_.stalled(0.0) : std::vector<StalledTensor>{};
    for (StalledTensor& t : late) partial.push_back(std::move(t));
    if (!global_ranks_.empty()) {  // a process set: the file names global ranks
      for (StalledTensor& t : partial) {
        for (int& r : t.missing) r = global_ranks_.at(static_cast<size_t>(r));
      }
    }
    tl->record_round(parts_.process_set, round_start, round_end_, round.full_round,
                     round.cached.size(), round.responses.size(), partial);
  }
  if (round.full_round) ++stats_.full_rounds;
  const bool fruitless = round.cached.empty() && round.responses.empty() && fresh_.empty();
  fruitless_rounds_ = fruitless ? fruitless_rounds_ + 1 : 0;
  stats_.responses += round.cached.size() + round.responses.size();

  if (!round.responses.empty() && !round.cached.empty()) {
    // A round with new names too: everything goes through one plan, so cached and new
    // tensors can share a batch (as they would have in a round that had only responses).
    std::vector<Response> all;
    all.reserve(round.cached.size() + round.responses.size());
    for (TensorEntry* e : round.cached) all.push_back(response_for(&e, &e + 1));
    for (Response& r : round.responses) all.push_back(std::move(r));
    round.responses = std::move(all);
    round.cached.clear();
  }
  // What throws while executing fails that response here and, through the next round, every
  // rank; the round's other responses still run, so this rank stays in step with its peers.
  Status ran = guarded("executing cached responses",
                       [&] { execute_cached(round.cached, round.cached_signature); });
  if (!ran.ok()) controller_.fail(ran);
  FusionOptions fo{config_.fusion_threshold, config_.fusion_direct_bytes};
  std::vector<Response> planned;
  Status fused =
      guarded("planning fusion", [&] { planned = plan_fusion(std::move(round.responses), fo); });
  if (!fused.ok()) controller_.fail(fused);
  for (const Response& r : planned) {
    ++stats_.fused_batches;
    Status st = guarded([&] { return describe(r.op, r.names.empty() ? "" : r.names.front()); },
                        [&] { execute(r); });
    if (!st.ok()) controller_.fail(st);
  }
  Status checked = guarded("checking for stalls", [&] { stall_.check(&controller_); });
  if (!checked.ok()) {
    HVD_LOG(Warning) << checked.message();
  }

  if (round.shutdown) {
    std::vector<int> who(round.shutdown_ranks.begin(), round.shutdown_ranks.end());
    Status st = aborted("hvd was shut down (shutdown() called on " +
                        std::string(who.size() == 1 ? "rank " : "ranks ") + rank_ranges(who) +
                        ") before this collective could run on every rank" +
                        (round.shutdown_note.empty() ? "" : "; " + round.shutdown_note));
    Finished finished;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopped_ = true;
      stop_status_ = st;
      for (auto& kv : table_) {
        if (!kv.second.active) continue;
        kv.second.handle->in_use.store(false, std::memory_order_release);  // never ran
        finished.add(kv.second.handle, about(kv.second.request, st));
      }
      table_.clear();
      order_.clear();
      order_pos_ = 0;
      active_ = 0;
      queue_.clear();
    }
    finished.complete();  // after releasing mu_: callbacks may submit
    return false;
  }
  return true;
}

namespace {

// What a rank that joined runs in place of a collective it never submitted: zeros for
// allreduce, a scratch buffer for broadcast, no rows for allgather.
std::unique_ptr<TensorEntry> stand_in(const Response& r, size_t i, int rank,
                                      std::vector<std::vector<uint8_t>>* scratch) {
  auto e = std::make_unique<TensorEntry>();
  Request& q = e->request;
  q.op = r.op;
  q.name = r.names[i];
  q.dtype = r.dtype;
  q.device = r.device;
  q.process_set = r.process_set;
  q.rank = rank;
  const int64_t n = i < r.numels.size() ? r.numels[i] : 0;
  q.shape = r.op == OpType::kAllgather ? std::vector<int64_t>{0, n} : std::vector<int64_t>{n};
  const int64_t elems = r.op == OpType::kAllgather ? 0 : n;
  scratch->emplace_back(static_cast<size_t>(std::max<int64_t>(elems, 1)) * dtype_size(r.dtype), 0);
  e->input = TensorView(scratch->back().data(), r.dtype, q.shape, Device::host());
  e->output = e->input;
  e->handle = new_handle_state();
  return e;
}

}  // namespace

void Runtime::execute_cached(const std::vector<TensorEntry*>& ready, uint64_t signature) {
  if (ready.empty()) return;
  if (signature == 0 || signature != planned_signature_) {
    // A new set of cached tensors: plan its batches and write their responses (kept, with
    // their plan, for the rounds that bring the same set again: a training loop's every step).
    planned_signature_ = 0;  // until the plan below is complete
    ready_requests_.clear();
    for (TensorEntry* e : ready) ready_requests_.push_back(&e->request);
    FusionOptions fo{config_.fusion_threshold, config_.fusion_direct_bytes};
    cached_runs_ = plan_fusion_runs(ready_requests_, fo);
    if (cached_batches_.size() < cached_runs_.size()) cached_batches_.resize(cached_runs_.size());
    size_t begin = 0;
    for (size_t k = 0; k < cached_runs_.size(); ++k) {
      response_for_into(&cached_batches_[k], ready.data() + begin, ready.data() + cached_runs_[k]);
      begin = cached_runs_[k];
    }
    planned_signature_ = signature;
  }
  size_t begin = 0;
  for (size_t k = 0; k < cached_runs_.size(); ++k) {
    ++stats_.fused_batches;
    const size_t end = cached_runs_[k];
    cached_batch_.assign(ready.begin() + static_cast<std::ptrdiff_t>(begin),
                         ready.begin() + static_cast<std::ptrdiff_t>(end));
    run(cached_batches_[k], cached_batch_, cached_batch_);
    begin = end;
  }
}

void Runtime::execute(const Response& r) {
  std::vector<TensorEntry*> entries(r.names.size(), nullptr);
  std::vector<TensorEntry*> mine;  // this rank's table entries
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < r.names.size(); ++i) {
      auto it = table_.find(r.names[i]);
      if (it != table_.end() && it->second.active) {
        entries[i] = &it->second;
        mine.push_back(&it->second);
      }
    }
  }
  std::vector<std::unique_ptr<TensorEntry>> stand_ins;
  std::vector<std::vector<uint8_t>> scratch;
  scratch.reserve(r.names.size());
  const bool joined_here =
      std::find(r.joined.begin(), r.joined.end(), static_cast<int64_t>(rank_)) != r.joined.end();
  // A name negotiated but missing from this rank's table (not joined) is a bug; where a
  // stand-in can take its place, this rank still takes part (its peers are entering the data
  // collective), then stops every rank through the next round.
  const bool can_stand_in = r.op != OpType::kAlltoall && r.op != OpType::kReducescatter;
  if (!r.is_error() && (joined_here || can_stand_in)) {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i]) continue;
      if (!joined_here) {
        controller_.fail(internal_error(describe(r.op, r.names[i]) +
                                        ": negotiated but missing from this rank's tensor table"));
      }
      stand_ins.push_back(stand_in(r, i, rank_, &scratch));
      entries[i] = stand_ins.back().get();
    }
  }
  if (r.is_error() && mine.empty()) return;  // e.g. a joined rank: nothing of ours failed
  run(r, entries, mine);
}

void Runtime::run(const Response& r, const std::vector<TensorEntry*>& entries,
                  const std::vector<TensorEntry*>& mine) {
  const bool complete = std::find(entries.begin(), entries.end(), nullptr) == entries.end();
  std::shared_ptr<Timeline> timeline = active_timeline();
  PhaseLog phases;  // what the executor reports while the timeline is on
  PhaseLog* outer = PhaseScope::set_active(timeline ? &phases : nullptr);
  const auto started = Timeline::Clock::now();
  Status s;
  std::shared_ptr<Completion> pending;  // device work still running after launch
  if (r.is_error()) {
    s = mismatch(r.error);
    if (r.op == OpType::kRemoveProcessSet) {
      for (TensorEntry* e : mine) reopen_after_failed_removal(e->request);
    }
  } else if (!complete) {
    s = internal_error(describe(r.op, r.names.front()) +
                       ": negotiated but missing from this rank's tensor table");
  } else if (r.op == OpType::kAddProcessSet || r.op == OpType::kRemoveProcessSet) {
    Status thrown = guarded([&] { return describe(r.op, r.names.front()); },
                            [&] { s = execute_process_set_op(r, entries[0]); });
    if (!thrown.ok()) {
      s = thrown;
      controller_.fail(s);
    }
  } else if (r.op == OpType::kBarrier || r.op == OpType::kJoin) {
    s = Status::OK();  // negotiation itself synchronised every rank
    if (r.op == OpType::kJoin) {
      for (auto* e : entries) e->handle->result = r.root;
    }
  } else {
    Executor* ex = r.device.kind == DeviceKind::kHost ? parts_.host_executor.get()
                                                      : parts_.device_executor.get();
    if (ex) {
      Status thrown = guarded(
          [&] { return describe(r.op, r.names.front()) + ": the " + ex->name() + " executor"; },
          [&] { s = ex->launch(r, entries, &pending); });
      if (!thrown.ok()) {
        s = thrown;
        controller_.fail(s);  // every rank stops at the next round
      }
    } else {
      s = invalid_argument(describe(r.op, r.names.front()) + ": " + parts_.no_device_reason);
    }
    if (pending && entries.size() != mine.size()) {
      // Stand-ins of a joined rank own scratch that dies with this call: wait for the device.
      Status done = pending->wait();
      if (s.ok()) s = done;
      pending.reset();
    }
  }
  PhaseScope::set_active(outer);
  // For "who was late?" (controller_late.cc): every rank notes its ages while the round's
  // flags say rank 0 records late ranks; rank 0 with a timeline asks about its long waits.
  // Without a timeline: nothing per tensor.
  const bool ask_late = timeline && rank_ == 0;
  const bool note = controller_.ages_wanted();
  if (note || ask_late) {
    uint64_t noted = 0;
    for (TensorEntry* e : mine) {
      if (e->submitted == std::chrono::steady_clock::time_point{}) continue;  // not stamped
      const auto ago =
          std::chrono::duration_cast<std::chrono::microseconds>(round_end_ - e->submitted);
      if (note) {
        controller_.note_ready(e->request.name, ago);
        ++noted;
      }
      if (ask_late && ago >= Controller::kLateQueryMin) {
        controller_.query_late(e->request.name, ago);
      }
    }
    stats_.ages_noted += noted;
  }
  if (timeline) {
    Executor* ex = r.device.kind == DeviceKind::kHost ? parts_.host_executor.get()
                                                      : parts_.device_executor.get();
    timeline->record_response(parts_.process_set, r, entries, ex ? ex->name() : "none", phases,
                              started, Timeline::Clock::now(), s, ask_late);
  }
  // The executor returned: the buffers are let go, but for device work it left running, which
  // each handle holds until it let go too (HandleState::released()).
  if (pending) {
    for (TensorEntry* e : mine) e->handle->hold_device(pending);
  }
  Finished finished;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (pending) {
      outstanding_.erase(
          std::remove_if(outstanding_.begin(), outstanding_.end(),
                         [](const std::weak_ptr<Completion>& w) { return w.expired(); }),
          outstanding_.end());
      outstanding_.push_back(pending);
    }
    const bool quiet = s.ok() && !pending;
    for (TensorEntry* e : mine) {
      e->handle->in_use.store(false, std::memory_order_release);
      // Completed here when nobody waits for it and no callback is set (nothing to wake or
      // run under mu_); else after releasing mu_. retire() keeps it as a spare.
      if (!quiet || !e->handle->complete_quietly()) {
        finished.add(e->handle, s, s.ok() ? pending : nullptr);
      }
      retire(e);
    }
  }
  finished.complete();  // after releasing mu_: callbacks may submit
}

}  // namespace hvd::core
