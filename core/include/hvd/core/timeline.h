// SPDX-License-Identifier: Apache-2.0
// Timeline: a Chrome-trace (chrome://tracing, Perfetto) record of what the runtime did, one row
// per tensor with the phases it went through, and one row of negotiation rounds.
//
// File format: a strict JSON array of trace events, one event per line. The file always ends in
// "\n]\n": a writer thread appends each batch of events over the closing bracket and writes it
// again in the same pwrite(), so the file is valid JSON after every flush (every 50 ms), not only
// after stop. A SIGTERM handler (installed once, chained to the one it replaces) waits for a
// write in progress to end before the process dies, so a job killed by SIGTERM (mpirun, hvdrun,
// Slurm) leaves a valid file holding every event flushed before the signal.
//
// Phases of a tensor (event `cat`, all on the tensor's row): "wait" (submitted on this rank until
// negotiation found it ready on every rank; args.late_ranks, rank 0 only: the ranks that had not
// submitted it when rank 0 first saw it through its table, else, when rank 0 waited at least
// Controller::kLateQueryMin, the last ranks to submit it, by how long before the round ended
// (controller_late.cc); such a tensor's events are written after the next round), "queue" (ready,
// waiting for earlier responses of the round), "copy_in" (the tensors' data copied into an
// intermediate buffer: fusion, gather or pack buffer), "collective" (named after the call, e.g.
// MPI_Allreduce, MPI_Allgatherv, ncclAllReduce; args: op, backend, bytes, tensors), "copy_out"
// (out of an intermediate buffer into the outputs), "done" (instant; args.ok). A path that
// copies nothing (in place, straight from input to output) has no copy_in / copy_out; one that
// copies in several slices or steps shows each phase's summed time, in that order. Row 0 holds
// a "negotiation" span per round and an instant "round" marker per round that agreed on
// something.
//
// Device executors (NCCL) enqueue their copies and calls on a stream and return: their
// PhaseScopes, and the response's span, measure launch time, not the work on the GPU.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvd/core/controller.h"
#include "hvd/core/executor.h"
#include "hvd/core/message.h"

namespace hvd::core {

/// Phases an executor reports inside one response (see PhaseScope).
enum class Phase : int { kCopyIn = 0, kCollective = 1, kCopyOut = 2 };

/// Time an executor spent per phase while running one response (summed over fusion slices).
struct PhaseLog {
  std::chrono::nanoseconds spent[3]{};
  int64_t scopes = 0;          ///< PhaseScopes closed (slices x phases)
  const char* call = nullptr;  ///< the collective call, e.g. "MPI_Allreduce" (null: unknown)
};

/// Attributes the time between construction and destruction to `phase` of the PhaseLog active
/// on this thread (see set_active); costs one thread-local read when none is active (no
/// timeline), so executors may wrap every copy and call.
class PhaseScope {
 public:
  explicit PhaseScope(Phase phase, const char* call = nullptr);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
  /// Makes `log` (null: none) the log this thread's scopes add to; returns the previous one.
  static PhaseLog* set_active(PhaseLog* log);

 private:
  PhaseLog* log_;
  Phase phase_;
  std::chrono::steady_clock::time_point start_{};
};

class TimelineWriter;

/// One timeline file. record_* are called by the background threads of the global set and of
/// its process sets (one lock); the file is written by the writer thread start() starts, so
/// those calls never wait on disk. Events that would make the queue exceed a million lines (a
/// disk far slower than the job) are dropped and counted.
///
/// Process sets: the runtime of a set this rank is a member of writes to the global set's
/// file, its tensors on rows of their own ("name [process set N]") and its rounds on a row
/// "negotiation [process set N]"; late ranks are global ranks.
class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  /// Opens (truncates) `path` for rank `rank`; ok() tells whether that worked. `mark_cycles`:
  /// an instant "cycle" event at the start of every round (row "negotiation").
  Timeline(const std::string& path, int rank, bool mark_cycles = false);
  /// Flushes what is queued, closes the array and the file.
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  bool ok() const;
  /// Starts the writer thread (until then events only queue).
  void start();
  /// The file of `rank` when every rank writes one: ".rank<N>" inserted before a ".json"
  /// extension, appended otherwise ("tl.json" -> "tl.rank1.json").
  static std::string path_for_rank(const std::string& path, int rank);

  /// One negotiation round of process set `set` from `start` to `end`: `late` lists, on the
  /// set's rank 0, tensors and the (global) ranks it waited for: requests it has from some
  /// ranks but not all after the round (the first time a name appears there counts), and the
  /// answers to its questions about the last round (see record_response).
  void record_round(int32_t set, Clock::time_point start, Clock::time_point end, bool full,
                    size_t cached, size_t responses, const std::vector<StalledTensor>& late);
  /// Response `r` of process set `set` ran from `start` to `end` on `entries` (null or
  /// stand-in entries have no wait phase) through executor `backend`, with the phase times in
  /// `log`. `ask_late`: rank 0 asks the next round who was late with the tensors it waited for
  /// at least Controller::kLateQueryMin (and not yet known late): those are written after it.
  void record_response(int32_t set, const Response& r, const std::vector<TensorEntry*>& entries,
                       const std::string& backend, const PhaseLog& log, Clock::time_point start,
                       Clock::time_point end, const Status& status, bool ask_late = false);
  /// Events dropped because the writer fell behind.
  uint64_t dropped() const;

 private:
  // One tensor's events of one response: its wait span (when it has one) and what follows.
  struct Deferred {
    std::string name;
    int tid;
    double wait_ts, wait_dur;
    std::vector<std::string> rest;
    bool has_wait;
  };
  // What one process set's rounds leave for its next responses and round.
  struct SetState {
    std::unordered_map<std::string, std::vector<int>> late;  // name -> ranks waited for
    std::vector<Deferred> deferred;  // waiting for the next round's late ranks
    Clock::time_point last_round_end{};
    uint64_t rounds = 0;
  };
  int tid_for(int32_t set, const std::string& name);  // mu_
  void emit(std::string line);
  void emit_tensor(Deferred d, const std::vector<int>* late_ranks);  // mu_
  void flush_deferred(SetState* st);                                 // mu_

  int rank_;
  bool mark_cycles_;
  std::unique_ptr<TimelineWriter> writer_;
  std::mutex mu_;
  std::map<std::pair<int32_t, std::string>, int> tids_;  // mu_: (set, tensor name) -> row
  std::map<int32_t, SetState> sets_;                     // mu_
};

}  // namespace hvd::core
