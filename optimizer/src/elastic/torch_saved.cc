// SPDX-License-Identifier: Apache-2.0
// TorchState's optimizer tree, its copy into the previous commit, and its payload.
//
// An optimizer tree is [kind, options, states]: kind names the optimizer ("sgd", "adam",
// "adamw", "adagrad", "rmsprop"); options holds one list of doubles per param group (the
// options' numbers, flags as 0/1); states one entry per parameter in param-group order: None
// (no state yet) or [ints, tensors] (a tensor None when undefined, e.g. Adam's max_exp_avg_sq
// without amsgrad). Any other optimizer: ["archive", the bytes of its serialize() archive with
// its group options] (hvd::optim::detail::save_optimizer; slower: a zip archive per commit).
//
// A payload is "HVDTS2\0\0", u64 length + pickle of the tensors' [dtype, shape] list, u64 length
// + the tree pickled with its tensors as table references, then the tensors' bytes in table
// order (little-endian host order: snapshots stay on the machines of one job).
#include "torch_saved.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "hvd/hvd.h"
#include "hvd/optim/broadcast.h"
#include "hvd/optim/optimizer_state.h"

namespace hvd::elastic::detail {

void bad_snapshot(const std::string& what) {
  throw Error(invalid_argument("hvd.elastic: the committed state does not fit this TorchState: " +
                               what + " (construct it with the same model, optimizer, sampler " +
                               "and fields in every generation)"));
}

namespace {

namespace optim = torch::optim;

// The numbers of one optimizer's options or one parameter's state, as pointers into it.
struct Numbers {
  std::vector<double*> reals;
  std::vector<bool*> flags;
  std::vector<int64_t*> ints;
  std::vector<torch::Tensor*> tensors;
};

// The one list of what is saved of each optimizer libtorch ships.
void numbers(optim::SGDOptions& o, Numbers& n) {
  n.reals = {&o.lr(), &o.momentum(), &o.dampening(), &o.weight_decay()};
  n.flags = {&o.nesterov()};
}
void numbers(optim::SGDParamState& s, Numbers& n) { n.tensors = {&s.momentum_buffer()}; }
template <typename Options>  // AdamOptions, AdamWOptions
void adam_options(Options& o, Numbers& n) {
  n.reals = {&o.lr(), &std::get<0>(o.betas()), &std::get<1>(o.betas()), &o.eps(),
             &o.weight_decay()};
  n.flags = {&o.amsgrad()};
}
template <typename State>  // AdamParamState, AdamWParamState
void adam_state(State& s, Numbers& n) {
  n.ints = {&s.step()};
  n.tensors = {&s.exp_avg(), &s.exp_avg_sq(), &s.max_exp_avg_sq()};
}
void numbers(optim::AdamOptions& o, Numbers& n) { adam_options(o, n); }
void numbers(optim::AdamParamState& s, Numbers& n) { adam_state(s, n); }
void numbers(optim::AdamWOptions& o, Numbers& n) { adam_options(o, n); }
void numbers(optim::AdamWParamState& s, Numbers& n) { adam_state(s, n); }
void numbers(optim::AdagradOptions& o, Numbers& n) {
  n.reals = {&o.lr(), &o.lr_decay(), &o.weight_decay(), &o.initial_accumulator_value(), &o.eps()};
}
void numbers(optim::AdagradParamState& s, Numbers& n) {
  n.ints = {&s.step()};
  n.tensors = {&s.sum()};
}
void numbers(optim::RMSpropOptions& o, Numbers& n) {
  n.reals = {&o.lr(), &o.alpha(), &o.eps(), &o.weight_decay(), &o.momentum()};
  n.flags = {&o.centered()};
}
void numbers(optim::RMSpropParamState& s, Numbers& n) {
  n.ints = {&s.step()};
  n.tensors = {&s.square_avg(), &s.momentum_buffer(), &s.grad_avg()};
}

struct Kind {
  const char* name;
  const std::type_info& type;
  std::function<Numbers(optim::OptimizerOptions&)> options;
  std::function<Numbers(optim::OptimizerParamState&)> state;
  std::function<std::unique_ptr<optim::OptimizerParamState>()> make_state;
};

template <typename Opt, typename Options, typename State>
Kind kind(const char* name) {
  return {name, typeid(Opt),
          [](optim::OptimizerOptions& o) {
            Numbers n;
            numbers(dynamic_cast<Options&>(o), n);
            return n;
          },
          [](optim::OptimizerParamState& s) {
            Numbers n;
            numbers(dynamic_cast<State&>(s), n);
            return n;
          },
          [] { return std::make_unique<State>(); }};
}

// The kind of `optimizer` (its exact type: a subclass may keep more), or null.
const Kind* kind_of(const optim::Optimizer& optimizer) {
  static const std::vector<Kind> kinds = {
      kind<optim::SGD, optim::SGDOptions, optim::SGDParamState>("sgd"),
      kind<optim::Adam, optim::AdamOptions, optim::AdamParamState>("adam"),
      kind<optim::AdamW, optim::AdamWOptions, optim::AdamWParamState>("adamw"),
      kind<optim::Adagrad, optim::AdagradOptions, optim::AdagradParamState>("adagrad"),
      kind<optim::RMSprop, optim::RMSpropOptions, optim::RMSpropParamState>("rmsprop")};
  for (const Kind& k : kinds) {
    if (typeid(optimizer) == k.type) return &k;
  }
  return nullptr;
}

c10::impl::GenericList any_list() { return c10::impl::GenericList(c10::AnyType::get()); }

torch::Tensor bytes_tensor(const std::string& s) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(s.size())}, torch::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

void append_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

constexpr char kMagic[8] = {'H', 'V', 'D', 'T', 'S', '2', '\0', '\0'};

}  // namespace

c10::IValue optimizer_tree(optim::Optimizer& optimizer) {
  auto tree = any_list();
  const Kind* k = kind_of(optimizer);
  if (!k) {
    tree.push_back(c10::IValue("archive"));
    tree.push_back(bytes_tensor(hvd::optim::detail::save_optimizer(optimizer)));
    return tree;
  }
  auto options = any_list(), states = any_list();
  for (auto& group : optimizer.param_groups()) {
    const Numbers n = k->options(group.options());
    c10::List<double> values;
    for (const double* r : n.reals) values.push_back(*r);
    for (const bool* f : n.flags) values.push_back(*f ? 1.0 : 0.0);
    options.push_back(values);
    for (const auto& p : group.params()) {
      optim::OptimizerParamState* state = hvd::optim::optimizer_state(optimizer, p);
      if (!state) {
        states.push_back(c10::IValue());
        continue;
      }
      const Numbers s = k->state(*state);
      c10::List<int64_t> ints;
      for (const int64_t* i : s.ints) ints.push_back(*i);
      auto tensors = any_list();
      for (const torch::Tensor* t : s.tensors) {
        tensors.push_back(t->defined() ? c10::IValue(t->detach()) : c10::IValue());
      }
      auto entry = any_list();
      entry.push_back(ints);
      entry.push_back(tensors);
      states.push_back(entry);
    }
  }
  tree.push_back(c10::IValue(k->name));
  tree.push_back(options);
  tree.push_back(states);
  return tree;
}

void load_optimizer_tree(optim::Optimizer& optimizer, const c10::IValue& tree) {
  const Kind* k = kind_of(optimizer);
  const std::string name = k ? k->name : "archive";
  if (!tree.isList() || tree.toListRef().empty() || !tree.toListRef()[0].isString() ||
      tree.toListRef()[0].toStringRef() != name) {
    bad_snapshot("the optimizer is not the committed one's kind (" + name + ")");
  }
  const c10::ArrayRef<c10::IValue> e = tree.toListRef();
  if (!k) {
    const torch::Tensor bytes = e[1].toTensor().contiguous();
    hvd::optim::detail::load_optimizer(
        optimizer,
        std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel())),
        "hvd.elastic: cannot load the committed optimizer state");
    return;
  }
  const c10::ArrayRef<c10::IValue> options = e[1].toListRef(), states = e[2].toListRef();
  auto& groups = optimizer.param_groups();
  if (options.size() != groups.size()) {
    bad_snapshot(std::to_string(options.size()) + " optimizer param groups saved, " +
                 std::to_string(groups.size()) + " in the optimizer");
  }
  size_t next = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const Numbers n = k->options(groups[g].options());
    const c10::ArrayRef<c10::IValue> values = options[g].toListRef();
    if (values.size() != n.reals.size() + n.flags.size())
      bad_snapshot("optimizer options of another kind");
    for (size_t i = 0; i < n.reals.size(); ++i) *n.reals[i] = values[i].toDouble();
    for (size_t i = 0; i < n.flags.size(); ++i)
      *n.flags[i] = values[n.reals.size() + i].toDouble() != 0.0;
    for (const auto& p : groups[g].params()) {
      if (next >= states.size()) bad_snapshot("more optimized parameters than saved");
      const c10::IValue& saved = states[next++];
      if (saved.isNone()) {
        optimizer.state().erase(hvd::optim::optimizer_state_key(p));
        continue;
      }
      std::unique_ptr<optim::OptimizerParamState> state = k->make_state();
      const Numbers s = k->state(*state);
      const c10::ArrayRef<c10::IValue> ints = saved.toListRef()[0].toListRef();
      const c10::ArrayRef<c10::IValue> tensors = saved.toListRef()[1].toListRef();
      if (ints.size() != s.ints.size() || tensors.size() != s.tensors.size()) {
        bad_snapshot("optimizer state of another kind");
      }
      for (size_t i = 0; i < ints.size(); ++i) *s.ints[i] = ints[i].toInt();
      for (size_t i = 0; i < tensors.size(); ++i) {
        *s.tensors[i] = tensors[i].isNone()
                            ? torch::Tensor()
                            : tensors[i].toTensor().to(p.device(), /*non_blocking=*/false,
                                                       /*copy=*/true);
      }
      optimizer.state()[hvd::optim::optimizer_state_key(p)] = std::move(state);
    }
  }
  if (next != states.size()) bad_snapshot("fewer optimized parameters than saved");
}

c10::IValue copy_into(const c10::IValue& old, const c10::IValue& now) {
  if (now.isTensor()) {
    const torch::Tensor& t = now.toTensor();
    if (old.isTensor()) {
      const torch::Tensor& o = old.toTensor();
      if (o.defined() && t.defined() && o.sizes() == t.sizes() && o.dtype() == t.dtype() &&
          o.device() == t.device() && o.layout() == torch::kStrided) {
        torch::NoGradGuard no_grad;
        o.copy_(t);
        return old;
      }
    }
    return t.defined() ? c10::IValue(t.detach().clone(at::MemoryFormat::Contiguous)) : now;
  }
  if (now.isList()) {
    const c10::ArrayRef<c10::IValue> items = now.toListRef();
    const bool aligned = old.isList() && old.toListRef().size() == items.size();
    auto out = c10::impl::GenericList(now.toList().elementType());
    out.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      out.push_back(copy_into(aligned ? old.toListRef()[i] : c10::IValue(), items[i]));
    }
    return out;
  }
  return now;  // numbers, strings, None: values
}

std::string to_payload(const c10::IValue& tree) {
  std::vector<at::Tensor> table;
  const std::vector<char> body = torch::jit::pickle(tree, &table);
  auto meta = any_list();
  size_t data = 0;
  for (auto& t : table) {
    t = t.cpu().contiguous();
    meta.push_back(c10::ivalue::Tuple::create(
        {c10::IValue(static_cast<int64_t>(t.scalar_type())), c10::IValue(t.sizes().vec())}));
    data += t.nbytes();
  }
  const std::vector<char> head = torch::jit::pickle(meta);
  std::string out;
  out.reserve(sizeof(kMagic) + 16 + head.size() + body.size() + data);
  out.append(kMagic, sizeof(kMagic));
  append_u64(out, head.size());
  out.append(head.data(), head.size());
  append_u64(out, body.size());
  out.append(body.data(), body.size());
  for (const auto& t : table) {
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  return out;
}

c10::IValue from_payload(const std::string& bytes) {
  size_t at = 0;
  auto take = [&](size_t n) {
    if (bytes.size() - at < n) bad_snapshot("a truncated payload");
    const char* p = bytes.data() + at;
    at += n;
    return p;
  };
  auto take_u64 = [&] {
    uint64_t v;
    std::memcpy(&v, take(sizeof(v)), sizeof(v));
    return static_cast<size_t>(v);
  };
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    bad_snapshot("not a TorchState of this hvd version");
  }
  at = sizeof(kMagic);
  try {
    const size_t head_size = take_u64();
    const char* head = take(head_size);
    const c10::IValue meta = torch::jit::unpickle(head, head_size);
    const size_t body_size = take_u64();
    const char* body = take(body_size);
    std::vector<at::Tensor> table;
    for (const c10::IValue& m : meta.toListRef()) {
      const auto& e = m.toTupleRef().elements();
      torch::Tensor t =
          torch::empty(e[1].toIntVector(), static_cast<c10::ScalarType>(e[0].toInt()));
      const char* data = take(t.nbytes());
      if (t.nbytes() > 0) std::memcpy(t.data_ptr(), data, t.nbytes());
      table.push_back(std::move(t));
    }
    return torch::jit::unpickle(body, body_size, nullptr, table);
  } catch (const c10::Error& e) {
    bad_snapshot(std::string("unreadable (") + e.what_without_backtrace() + ")");
  }
}

}  // namespace hvd::elastic::detail
