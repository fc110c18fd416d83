// SPDX-License-Identifier: Apache-2.0
// hvd::elastic::State's commit / host-update protocol and TorchState's saved form.
//
// A TorchState's saved values are one tree (current() defines it): a list of the format version,
// parameter names, parameters, buffer names, buffers, the optimizer's tree (torch_saved.h),
// field names, field values, sampler epoch and the sampler's processed indices. save() copies
// the live values into the previous commit's tensors (copy_into), saved_bytes() makes the
// snapshot payload of the tree (its tensors' raw bytes after a pickle), restore() writes the
// tree back in place (parameters and buffers keep their storage; the optimizer gets copies).
#include <torch/torch.h>

#include <algorithm>

#include "hvd/hvd.h"
#include "hvd/optim/broadcast.h"
#include "hvd/optim/elastic.h"
#include "hvd/optim/elastic_progress.h"
#include "torch_saved.h"

namespace hvd::elastic {
namespace {

using detail::bad_snapshot;

constexpr int64_t kFormat = 2;

// Writes `saved` into the live tensors of `live` (same names, same order, same shapes). The
// unpickled lists are read as generic lists (their element types are not restored).
void write_back(const torch::OrderedDict<std::string, torch::Tensor>& live,
                c10::ArrayRef<c10::IValue> names, c10::ArrayRef<c10::IValue> saved,
                const char* kind) {
  if (names.size() != live.size() || saved.size() != live.size()) {
    bad_snapshot(std::string(kind) + "s: " + std::to_string(names.size()) + " saved, " +
                 std::to_string(live.size()) + " in the model");
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live.size(); ++i) {
    const auto& item = live[i];
    const std::string& name = names[i].toStringRef();
    const torch::Tensor src = saved[i].toTensor();
    if (name != item.key() || src.sizes() != item.value().sizes()) {
      bad_snapshot(std::string(kind) + " " + std::to_string(i) + ": saved '" + name + "' " +
                   c10::str(src.sizes()) + ", model '" + item.key() + "' " +
                   c10::str(item.value().sizes()));
    }
    item.value().copy_(src);
  }
}

}  // namespace

// ---- State ----

void State::commit() {
  save();
  ++commit_id_;
  const Environment env = environment();
  if (!env.state_dir.empty() && hvd::local_rank() == 0) {
    throw_if_error(write_snapshot(env.state_dir,
                                  {commit_id_, static_cast<uint64_t>(hvd::size()), saved_bytes()}));
  }
  report_commit(commit_id_);  // also tells hvdrun this generation made a new commit
  check_host_updates();
}

void State::check_host_updates() {
  if (hvd::rank() == 0) {
    const std::string path = environment().hosts_file;
    const auto launcher = path.empty() ? std::nullopt : read_host_update(path);
    if (launcher && launcher->seq > launcher_host_seq_) {
      launcher_host_seq_ = launcher->seq;
      int64_t timestamp;
      {
        std::lock_guard<std::mutex> lock(host_mu_);
        timestamp = std::max(pending_timestamp_, last_host_update_) + 1;
      }
      on_hosts_updated(timestamp, static_cast<HostUpdateResult>(launcher->bits & 3));
    }
  }
  int64_t update[2];
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    update[0] = std::max(pending_timestamp_, last_host_update_);
    update[1] = pending_result_;
    pending_result_ = 0;
  }
  hvd::broadcast(TensorView(update, DataType::kInt64, {2}), 0, "hvd.elastic.host_updates");
  if (update[0] > last_host_update_) {
    last_host_update_ = update[0];
    // Only additions: the current workers keep their state (Horovod's skip_sync).
    throw HostsUpdatedInterrupt(update[1] == static_cast<int>(HostUpdateResult::kAdded));
  }
}

void State::on_hosts_updated(int64_t timestamp, HostUpdateResult result) {
  std::lock_guard<std::mutex> lock(host_mu_);
  pending_timestamp_ = std::max(pending_timestamp_, timestamp);
  pending_result_ |= static_cast<int>(result);
}

void State::register_reset_callbacks(const std::vector<std::function<void()>>& callbacks) {
  reset_callbacks_.insert(reset_callbacks_.end(), callbacks.begin(), callbacks.end());
}

void State::on_reset() {
  for (const auto& callback : reset_callbacks_) callback();
}

// ---- TorchState ----

TorchState::TorchState(std::shared_ptr<torch::nn::Module> model, torch::optim::Optimizer& optimizer,
                       Sampler* sampler)
    : model_(std::move(model)), optimizer_(optimizer), sampler_(sampler) {
  if (!model_) throw Error(invalid_argument("hvd::elastic::TorchState: the model is null"));
  save();
}

void TorchState::throw_field_type(const std::string& name) const {
  static const char* const kTypes[] = {"int64_t", "double", "std::string"};
  throw Error(invalid_argument("hvd::elastic::TorchState: field '" + name + "' holds a " +
                               kTypes[fields_.at(name).index()] + ", asked for another type"));
}

c10::IValue TorchState::current() const {
  c10::List<std::string> param_names, buffer_names, field_names;
  auto list = [] { return c10::impl::GenericList(c10::AnyType::get()); };
  auto params = list(), buffers = list(), values = list(), all = list();
  for (const auto& p : model_->named_parameters()) {
    param_names.push_back(p.key());
    params.push_back(p.value().detach());
  }
  for (const auto& b : model_->named_buffers()) {
    buffer_names.push_back(b.key());
    buffers.push_back(b.value().detach());
  }
  for (const auto& [name, value] : fields_) {
    field_names.push_back(name);
    std::visit([&](const auto& v) { values.push_back(c10::IValue(v)); }, value);
  }
  std::vector<int64_t> processed;
  if (sampler_) processed.assign(sampler_->processed().begin(), sampler_->processed().end());
  for (c10::IValue x : {c10::IValue(kFormat), c10::IValue(param_names), c10::IValue(params),
                        c10::IValue(buffer_names), c10::IValue(buffers),
                        detail::optimizer_tree(optimizer_), c10::IValue(field_names),
                        c10::IValue(values), c10::IValue(sampler_ ? sampler_->epoch() : int64_t{0}),
                        c10::IValue(torch::tensor(processed, torch::kLong))}) {
    all.push_back(std::move(x));
  }
  return all;
}

void TorchState::apply(const c10::IValue& v) {
  if (!v.isList() || v.toListRef().size() != 10 || !v.toListRef()[0].isInt() ||
      v.toListRef()[0].toInt() != kFormat) {
    bad_snapshot("not a TorchState of this hvd version");
  }
  const c10::ArrayRef<c10::IValue> e = v.toListRef();
  write_back(model_->named_parameters(), e[1].toListRef(), e[2].toListRef(), "parameter");
  write_back(model_->named_buffers(), e[3].toListRef(), e[4].toListRef(), "buffer");
  detail::load_optimizer_tree(optimizer_, e[5]);
  const c10::ArrayRef<c10::IValue> names = e[6].toListRef();
  const c10::ArrayRef<c10::IValue> values = e[7].toListRef();
  if (names.size() != fields_.size()) {
    bad_snapshot(std::to_string(names.size()) + " fields saved, " + std::to_string(fields_.size()) +
                 " declared");
  }
  if (values.size() != names.size()) bad_snapshot("field values and names differ in number");
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i].toStringRef();
    auto it = fields_.find(name);
    if (it == fields_.end()) bad_snapshot("field '" + name + "' is not declared");
    const c10::IValue& x = values[i];
    if (x.isInt() && std::holds_alternative<int64_t>(it->second)) {
      it->second = x.toInt();
    } else if (x.isDouble() && std::holds_alternative<double>(it->second)) {
      it->second = x.toDouble();
    } else if (x.isString() && std::holds_alternative<std::string>(it->second)) {
      it->second = x.toStringRef();
    } else {
      bad_snapshot("field '" + name + "' has another type");
    }
  }
  if (sampler_) {
    const torch::Tensor processed = e[9].toTensor().contiguous();
    const int64_t* p = processed.data_ptr<int64_t>();
    sampler_->load(e[8].toInt(), std::vector<int64_t>(p, p + processed.numel()));
  }
}

void TorchState::save() { saved_ = detail::copy_into(saved_, current()); }

void TorchState::restore() { apply(saved_); }

void TorchState::sync() {
  if (hvd::rank() == 0) save();
  const std::string bytes =
      broadcast_string(hvd::rank() == 0 ? saved_bytes() : std::string(), 0, "hvd.elastic.sync");
  if (hvd::rank() != 0) load_saved_bytes(bytes);
  apply(saved_);
}

std::string TorchState::saved_bytes() const { return detail::to_payload(saved_); }

void TorchState::load_saved_bytes(const std::string& bytes) {
  saved_ = detail::from_payload(bytes);
}

}  // namespace hvd::elastic
