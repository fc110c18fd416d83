// SPDX-License-Identifier: Apache-2.0
// Elastic training for libtorch programs: the C++ counterpart of hvd.torch.elastic (Horovod's
// elastic API), with the same semantics and the same snapshot files (docs/elastic.md).
//
//   hvd::elastic::Sampler sampler(kSamples, /*shuffle=*/true, /*seed=*/0);
//   hvd::elastic::TorchState state(model, optimizer, &sampler);
//   int64_t& epoch = state.field<int64_t>("epoch");  // user fields: live references
//   state.register_reset_callbacks({[&] { /* e.g. rescale the learning rate */ }});
//   hvd::elastic::run(state, [&](hvd::elastic::TorchState& s) {
//     for (; epoch < kEpochs; ++epoch) { ... s.commit(); ... }
//   });
//
// run(state, fn) brings every rank to the same state, then calls fn(state):
// - Under hvdrun --min-np (HVD_ELASTIC_STATE_DIR set) the ranks first agree on the newest commit
//   among their hosts' snapshots (hvd/optim/elastic_store.h) and resume from it: every rank
//   restores it, runs the reset callbacks and syncs. Without any snapshot (the first generation)
//   or outside elastic mode, the state is synced from rank 0 and no reset callback runs.
// - An hvd::Error (a failed collective: Python's HorovodInternalError) or HostsUpdatedInterrupt
//   out of fn ends the process with kRestartExitCode (75) under hvdrun's elastic mode, and the
//   next generation re-runs fn from the last commit; outside elastic mode it propagates.
// - An error a restart cannot fix (is_fatal_error, hvd/optim/elastic_progress.h: an invalid
//   argument, ranks disagreeing about a collective, a std::logic_error) ends the process with
//   kFatalExitCode (76) under hvdrun's elastic mode, after printing it; hvdrun then ends the job
//   (exit code 1) instead of restarting. Outside elastic mode it propagates.
// - When fn returns, HVD_ELASTIC_COMPLETION_FILE is written (when set).
// commit() saves the state in memory and, in elastic mode, the lowest local rank of each host
// writes it to the host's snapshot file; then it checks for host updates. Collective: every rank
// commits at the same step.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "hvd/core/status.h"
#include "hvd/optim/elastic_progress.h"
#include "hvd/optim/elastic_sampler.h"
#include "hvd/optim/elastic_store.h"

namespace hvd::elastic {

/// Bit flags of a host change (Horovod's HostUpdateResult).
enum class HostUpdateResult : int { kNoUpdate = 0, kRemoved = 1, kAdded = 2, kMixed = 3 };

/// Thrown by commit()/check_host_updates() on every rank when the hosts changed. skip_sync():
/// hosts were only added, the current workers keep their state.
class HostsUpdatedInterrupt : public std::runtime_error {
 public:
  explicit HostsUpdatedInterrupt(bool skip_sync)
      : std::runtime_error("hosts updated"), skip_sync_(skip_sync) {}
  bool skip_sync() const { return skip_sync_; }

 private:
  bool skip_sync_;
};

/// The state of an elastic job: saved at commit(), restored after a failure. Subclasses define
/// what is saved (save/restore/sync) and how the saved state becomes bytes.
class State {
 public:
  virtual ~State() = default;
  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  /// save(), then (elastic mode, local rank 0) the host's snapshot file, then
  /// check_host_updates(). Collective. Throws hvd::Error when the snapshot cannot be written.
  void commit();
  /// Throws HostsUpdatedInterrupt on every rank when rank 0 has been told of a host change
  /// (on_hosts_updated, or hvdrun through $HVD_ELASTIC_HOSTS_FILE, which rank 0 reads here).
  /// Collective: one small broadcast from rank 0.
  void check_host_updates();
  /// Queues a host change; noticed at the next commit()/check_host_updates(). Thread-safe.
  void on_hosts_updated(int64_t timestamp, HostUpdateResult result);
  /// Functions called (in order) after the state was reset to the last commit.
  void register_reset_callbacks(const std::vector<std::function<void()>>& callbacks);
  /// Commits made by the job so far (continues across generations).
  uint64_t commit_id() const { return commit_id_; }

  /// Keeps the current values as the last committed ones (in memory).
  virtual void save() = 0;
  /// Sets the current values back to the last saved ones.
  virtual void restore() = 0;
  /// Gives every rank rank 0's current values (collective); they also become the saved ones.
  virtual void sync() = 0;
  /// The saved values as bytes (the snapshot payload), and back (sets the saved values).
  virtual std::string saved_bytes() const = 0;
  virtual void load_saved_bytes(const std::string& bytes) = 0;

 private:
  friend bool start_generation(State& state);
  void on_reset();

  std::vector<std::function<void()>> reset_callbacks_;
  std::mutex host_mu_;
  int64_t pending_timestamp_ = 0;
  int pending_result_ = 0;
  int64_t last_host_update_ = 0;
  int64_t launcher_host_seq_ = 0;
  uint64_t commit_id_ = 0;
};

/// A libtorch job's state: the model's parameters and buffers, the optimizer's state and
/// param-group options (of the optimizer hvd::DistributedOptimizer wraps; SGD, Adam, AdamW,
/// Adagrad and RMSprop are copied field by field, any other optimizer goes through its
/// serialize() archive, which libtorch 1.13's LBFGS fails once it has stepped), an optional
/// Sampler and typed user fields (int64_t, double, std::string). save() copies the values into
/// the previous save's tensors.
class TorchState : public State {
 public:
  using Field = std::variant<int64_t, double, std::string>;

  TorchState(std::shared_ptr<torch::nn::Module> model, torch::optim::Optimizer& optimizer,
             Sampler* sampler = nullptr);
  template <typename M>
  TorchState(const torch::nn::ModuleHolder<M>& model, torch::optim::Optimizer& optimizer,
             Sampler* sampler = nullptr)
      : TorchState(model.ptr(), optimizer, sampler) {}

  /// The live value of user field `name`, declared with `initial` by the first call (before
  /// run(); every rank declares the same fields). The reference stays valid for the state's
  /// life; restore() and sync() write through it. Throws hvd::Error when `name` holds another
  /// type.
  template <typename T>
  T& field(const std::string& name, T initial = T{}) {
    static_assert(
        std::is_same_v<T, int64_t> || std::is_same_v<T, double> || std::is_same_v<T, std::string>,
        "hvd::elastic::TorchState fields are int64_t, double or std::string");
    auto it = fields_.find(name);
    if (it == fields_.end()) {
      it = fields_.emplace(name, Field(std::move(initial))).first;
      save();
    }
    if (!std::holds_alternative<T>(it->second)) throw_field_type(name);
    return std::get<T>(it->second);
  }
  /// Sets field `name` (declaring it when new).
  template <typename T>
  void set(const std::string& name, T value) {
    field<T>(name) = std::move(value);
  }
  template <typename T>
  T get(const std::string& name) {
    return field<T>(name);
  }

  void save() override;
  void restore() override;
  void sync() override;
  std::string saved_bytes() const override;
  void load_saved_bytes(const std::string& bytes) override;

 private:
  [[noreturn]] void throw_field_type(const std::string& name) const;
  /// The live values as the saved form's tree (holding the live tensors).
  c10::IValue current() const;
  /// Writes a saved tree into the live values.
  void apply(const c10::IValue& tree);

  std::shared_ptr<torch::nn::Module> model_;
  torch::optim::Optimizer& optimizer_;
  Sampler* sampler_;
  std::map<std::string, Field> fields_;
  c10::IValue saved_;  // the last commit's tree: its own tensors, reused by the next save()
};

/// Brings the ranks to the same state at the start of run() (see the top of this file); true
/// when it resumed from a committed snapshot. Collective.
bool start_generation(State& state);
namespace detail {
/// Initializes hvd when needed; arms hvdrun's step watchdog (hvd/optim/elastic_progress.h).
void ensure_initialized();
/// In elastic mode: logs `what` and ends the process with kRestartExitCode; otherwise returns.
void leave_generation(const char* type, const char* what);
/// Writes HVD_ELASTIC_COMPLETION_FILE when set.
void report_completion();
/// In elastic mode: prints `what` and ends the process with kFatalExitCode (hvdrun ends the
/// job); otherwise returns.
void end_job(const char* type, const char* what);
}  // namespace detail

/// Runs fn(state) with the state brought in step first (resumed from the newest commit when
/// one exists); returns what fn returns. See the top of this file.
template <typename S, typename Fn>
decltype(auto) run(S& state, Fn&& fn) {
  static_assert(std::is_base_of_v<State, S>, "hvd::elastic::run needs a hvd::elastic::State");
  detail::ensure_initialized();
  using R = std::invoke_result_t<Fn, S&>;
  try {
    start_generation(state);  // a rank lost during the resume broadcast is a restart, too
    if constexpr (std::is_void_v<R>) {
      std::forward<Fn>(fn)(state);
      detail::report_completion();
    } else {
      R result = std::forward<Fn>(fn)(state);
      detail::report_completion();
      return result;
    }
  } catch (const hvd::Error& e) {
    if (is_fatal_error(e)) detail::end_job("hvd::Error", e.what());
    detail::leave_generation("hvd::Error", e.what());
    throw;
  } catch (const HostsUpdatedInterrupt& e) {
    detail::leave_generation("HostsUpdatedInterrupt", e.what());
    throw;
  } catch (const std::logic_error& e) {
    detail::end_job("std::logic_error", e.what());
    throw;
  }
}

}  // namespace hvd::elastic
