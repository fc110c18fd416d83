// SPDX-License-Identifier: Apache-2.0
// [elastic] A libtorch-free elastic job for `hvdrun --min-np` (elastic_store_job_test.sh), small
// enough for the sanitizer builds: hvdrun's supervisor and rank wrappers, the snapshot store and
// the resume protocol (hvd/optim/elastic_store.h) under ASan+UBSan with a real SIGKILL.
//
// The state is the step count and K doubles w. At step s every rank contributes
// (s + 1) * (rank + 1) * (i + 1) to w[i]'s Sum allreduce and w -= sum / size. Every 3 steps the
// lowest local rank of each host commits {step, w} to $HVD_ELASTIC_STATE_DIR/snapshot; a
// generation resumes from the newest commit of any host (resume_from_newest); a failed collective
// leaves with exit 75 for hvdrun's next generation; the end writes the completion file. In
// generation 0 rank --fail-rank SIGKILLs itself once --fail-step steps are done. --step-ms
// sleeps that long after each step (a generation that lasts a while). --forge-step S: in
// generation 0 the commit of step S is written under another key than the job's (a planted or
// altered snapshot), which the next generation must refuse. An elastic state error (a refused
// snapshot or directory, a failed write) ends the rank with exit 76 (no restart can fix it).
//
// Every rank checks w against the closed form (np the same in every generation):
//   w[i] = -(i + 1) * (size + 1) / 2 * steps * (steps + 1) / 2
// and prints
//   ELASTIC_STORE_JOB gen=G rank=R resumed_step=S commit=C steps=N w=ok|WRONG
// (resumed_step/commit -1: started without a snapshot). Exit 1 when w is wrong. Each commit is
// reported to hvdrun (hvd::elastic::report_commit) and the start arms its step watchdog;
// --fail-how and --local-work-ms (fail_at_step, local_work below) drive the tests of what a
// restart cannot fix and of progress reports during rank-local work.
//
//   elastic_store_job [--steps N] [--fail-step S] [--fail-rank R] [--step-ms MS] [--forge-step S]
//                     [--fail-how kill|exit|invalid|mismatch] [--local-work-step S
//                     --local-work-ms MS [--report-every-ms MS]]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "hvd/optim/elastic_progress.h"
#include "hvd/optim/elastic_store.h"

namespace {

constexpr int kValues = 5;
constexpr int64_t kCommitEvery = 3;

struct State {
  int64_t step = 0;
  std::vector<double> w = std::vector<double>(kValues, 0.0);
};

std::string encode(const State& s) {
  std::string bytes(sizeof(int64_t) + kValues * sizeof(double), '\0');
  std::memcpy(bytes.data(), &s.step, sizeof(int64_t));
  std::memcpy(bytes.data() + sizeof(int64_t), s.w.data(), kValues * sizeof(double));
  return bytes;
}

std::optional<State> decode(const std::string& bytes) {
  if (bytes.size() != sizeof(int64_t) + kValues * sizeof(double)) return std::nullopt;
  State s;
  std::memcpy(&s.step, bytes.data(), sizeof(int64_t));
  std::memcpy(s.w.data(), bytes.data() + sizeof(int64_t), kValues * sizeof(double));
  return s;
}

int64_t flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

std::string text_flag(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

// --fail-how at --fail-step (every generation but for "kill"):
//   kill      rank --fail-rank SIGKILLs itself, in generation 0 only (the default)
//   exit      rank --fail-rank prints "... simulated failure at step S" and exits 1
//   invalid   rank --fail-rank broadcasts from root rank `size` (an invalid argument)
//   mismatch  every rank allreduces rank + 1 values (the ranks disagree about the shape)
// A fatal error (an invalid argument, a mismatch) ends the rank with exit 76.
void fail_at_step(const std::string& how, int64_t step, int rank, int size, int generation,
                  int64_t fail_rank) {
  if (how == "kill" && generation == 0 && rank == fail_rank) {
    std::fflush(stdout);
    ::kill(::getpid(), SIGKILL);
  } else if (how == "exit" && rank == fail_rank) {
    std::fprintf(stderr, "elastic_store_job: rank %d: simulated failure at step %lld\n", rank,
                 static_cast<long long>(step));
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  } else if (how == "invalid" && rank == fail_rank) {
    double v = 0;
    hvd::broadcast(hvd::TensorView(&v, hvd::DataType::kFloat64, {1}), size,
                   "elastic_store_job.invalid");
  } else if (how == "mismatch") {
    std::vector<double> v(static_cast<size_t>(rank + 1), 1.0);
    hvd::allreduce(hvd::TensorView(v.data(), hvd::DataType::kFloat64, {rank + 1}),
                   "elastic_store_job.mismatch", hvd::ReduceOp::kSum);
  }
}

// Rank-local work of `ms` milliseconds, calling hvd::elastic::report_progress() every
// `report_every_ms` (0: never).
void local_work(int64_t ms, int64_t report_every_ms) {
  std::fprintf(stderr, "elastic_store_job: rank 0: %lld ms of rank-local work (%s)\n",
               static_cast<long long>(ms),
               report_every_ms > 0 ? "reporting progress" : "without progress reports");
  for (int64_t left = ms; left > 0;) {
    const int64_t nap = report_every_ms > 0 ? std::min(left, report_every_ms) : left;
    ::usleep(static_cast<useconds_t>(nap * 1000));
    left -= nap;
    if (report_every_ms > 0) hvd::elastic::report_progress();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = flag(argc, argv, "--steps", 12);
  const int64_t fail_step = flag(argc, argv, "--fail-step", -1);
  const int64_t fail_rank = flag(argc, argv, "--fail-rank", 1);
  const int64_t step_ms = flag(argc, argv, "--step-ms", 0);
  const int64_t forge_step = flag(argc, argv, "--forge-step", -1);
  // Failures that come back in every generation (--fail-how, fail_at_step above) and rank-local
  // work on rank 0 (--local-work-ms at --local-work-step in generation 0, reporting progress
  // every --report-every-ms; 0: no report).
  const std::string fail_how = text_flag(argc, argv, "--fail-how", "kill");
  const int64_t local_work_step = flag(argc, argv, "--local-work-step", -1);
  const int64_t local_work_ms = flag(argc, argv, "--local-work-ms", 0);
  const int64_t report_every_ms = flag(argc, argv, "--report-every-ms", 0);
  const char* gen_env = std::getenv("HVD_ELASTIC_GENERATION");  // set by hvdrun --min-np
  const int generation = gen_env != nullptr ? std::atoi(gen_env) : 0;
  const hvd::elastic::Environment env = hvd::elastic::environment();

  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  hvd::elastic::report_progress();  // arms hvdrun's step watchdog (elastic_progress.h)
  State state;
  int64_t resumed_step = -1, resumed_commit = -1;
  uint64_t commit_id = 0;
  try {
    hvd::Result<std::optional<hvd::elastic::Snapshot>> local =
        std::optional<hvd::elastic::Snapshot>();
    if (!env.state_dir.empty()) {
      if (hvd::local_rank() == 0) hvd::elastic::remove_stale_temporaries(env.state_dir);
      local = hvd::elastic::read_snapshot(env.state_dir);
    }
    const std::optional<hvd::elastic::Snapshot> newest = hvd::elastic::resume_from_newest(local);
    if (newest) {
      const std::optional<State> restored = decode(newest->payload);
      if (!restored || newest->world_size != static_cast<uint64_t>(size)) {
        std::fprintf(stderr, "rank %d: commit %llu is not this job's state at np %d\n", rank,
                     static_cast<unsigned long long>(newest->commit_id), size);
        return 1;
      }
      state = *restored;
      commit_id = newest->commit_id;
      resumed_step = state.step;
      resumed_commit = static_cast<int64_t>(commit_id);
    }
    std::vector<double> contribution(kValues);
    for (; state.step < steps;) {
      if (state.step == fail_step) {
        fail_at_step(fail_how, state.step, rank, size, generation, fail_rank);
      }
      if (generation == 0 && state.step == local_work_step && rank == 0) {
        local_work(local_work_ms, report_every_ms);
      }
      for (int i = 0; i < kValues; ++i) {
        contribution[i] = static_cast<double>((state.step + 1) * (rank + 1) * (i + 1));
      }
      hvd::allreduce(hvd::TensorView(contribution.data(), hvd::DataType::kFloat64, {kValues}),
                     "elastic_store_job.step", hvd::ReduceOp::kSum);
      for (int i = 0; i < kValues; ++i) state.w[i] -= contribution[i] / size;
      ++state.step;
      if (step_ms > 0) ::usleep(static_cast<useconds_t>(step_ms * 1000));
      if (state.step % kCommitEvery == 0 && !env.state_dir.empty()) {
        ++commit_id;
        if (hvd::local_rank() == 0) {
          const hvd::elastic::Snapshot snap{commit_id, static_cast<uint64_t>(size), encode(state)};
          if (generation == 0 && state.step == forge_step) {
            // Somebody without the job's key replaces the host's snapshot.
            hvd::elastic::SnapshotKey other{};
            other.fill(0x5a);
            hvd::throw_if_error(hvd::elastic::write_snapshot(env.state_dir, snap, other));
            std::fprintf(stderr, "elastic_store_job: rank %d: forged the snapshot of step %lld\n",
                         rank, static_cast<long long>(state.step));
          } else {
            hvd::throw_if_error(hvd::elastic::write_snapshot(env.state_dir, snap));
          }
        }
        hvd::elastic::report_commit(commit_id);  // hvdrun: --max-restarts-without-progress
      }
    }
  } catch (const hvd::Error& e) {
    if (env.state_dir.empty()) throw;
    if (hvd::elastic::is_fatal_error(e)) {  // an invalid argument, a mismatch: exit 76
      hvd::elastic::end_job_for_fatal_error(rank, "hvd::Error", e.what());
    }
    std::fprintf(stderr, "elastic_store_job: rank %d: %s; leaving for a new generation (exit %d)\n",
                 rank, e.what(), hvd::elastic::kRestartExitCode);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(hvd::elastic::kRestartExitCode);
  }

  bool ok = true;
  const double half_n_n1 = static_cast<double>(steps * (steps + 1)) / 2.0;
  for (int i = 0; i < kValues; ++i) {
    const double want = -static_cast<double>(i + 1) * (size + 1) / 2.0 * half_n_n1;
    ok = ok && state.w[i] == want;
  }
  std::printf("ELASTIC_STORE_JOB gen=%d rank=%d resumed_step=%lld commit=%lld steps=%lld w=%s\n",
              generation, rank, static_cast<long long>(resumed_step),
              static_cast<long long>(resumed_commit), static_cast<long long>(state.step),
              ok ? "ok" : "WRONG");
  std::fflush(stdout);
  if (!env.completion_file.empty()) {
    if (FILE* f = std::fopen(env.completion_file.c_str(), "w")) {
      std::fputs("done\n", f);
      std::fclose(f);
    }
  }
  hvd::shutdown();
  return ok ? 0 : 1;
}
