// SPDX-License-Identifier: Apache-2.0
// The gradient registry: registration, names and removal (rounds: grad_rounds.cc).
#include "hvd/optim/grad_registry.h"

#include <algorithm>
#include <sstream>

#include "hvd/core/hash.h"
#include "registry_lock.h"

namespace hvd::optim {

std::string ReduceSettings::str() const {
  std::ostringstream os;
  os << "op " << reduce_op_name(op) << ", compression " << compression
     << ", backward_passes_per_step " << backward_passes_per_step << ", gradient_predivide_factor "
     << predivide << ", process set " << process_set << ", sparse_as_dense "
     << (sparse_as_dense ? "true" : "false");
  return os.str();
}

std::string GradEntry::owner_labels() const {
  std::string s;
  for (const auto& o : owners) s += (s.empty() ? "'" : ", '") + o.second + "'";
  return s;
}

GradRegistry::GradRegistry(GradFrontend& frontend, size_t bucket_bytes)
    : fe_(frontend), bucket_bytes_(bucket_bytes) {}

bool GradRegistry::has_live_name(const std::string& name) const {
  Lock lk(*this);
  for (const auto& [key, e] : by_wire_) {
    if (key.second == "grad." + name) return true;
  }
  return false;
}

bool GradRegistry::usable_hint(const ParamSpec& p, int32_t set) const {
  return !p.wire.empty() && numbered(set, p.wire) && !by_wire_.count({set, p.wire});
}

std::string GradRegistry::new_wire_name(const ParamSpec& p, const std::string& name, int32_t set) {
  if (usable_hint(p, set)) return p.wire;
  const std::string base = "grad." + name;
  for (;;) {
    const uint64_t n = ++wire_numbers_[{set, base}];
    std::string w = n == 1 ? base : base + "#" + std::to_string(n);
    // Taken when it is another name's number ("x#2" as a name of its own, or as x's second).
    const bool other = n == 1 ? numbered_suffix(set, w) : wire_numbers_.count({set, w}) > 0;
    if (!other && !by_wire_.count({set, w})) return w;
  }
}

bool GradRegistry::numbered(int32_t set, const std::string& w) const {
  return wire_numbers_.count({set, w}) > 0 || numbered_suffix(set, w);
}

bool GradRegistry::numbered_suffix(int32_t set, const std::string& w) const {
  const size_t hash = w.rfind('#');
  if (hash == std::string::npos || hash + 1 == w.size() || w[hash + 1] == '0') return false;
  if (w.find_first_not_of("0123456789", hash + 1) != std::string::npos) return false;
  if (w.size() - hash > 19) return false;  // more than any count reaches
  const uint64_t k = std::stoull(w.substr(hash + 1));
  auto it = wire_numbers_.find({set, w.substr(0, hash)});
  return k >= 2 && it != wire_numbers_.end() && it->second >= k;
}

Status GradRegistry::validate(const std::string& label, const std::vector<ParamSpec>& params,
                              const ReduceSettings& settings,
                              const std::vector<std::vector<size_t>>& groups) const {
  std::unordered_map<std::string, size_t> mine;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    auto existing = by_key_.find(p.key);
    if (existing != by_key_.end() && !(existing->second->settings == settings)) {
      const GradEntry& e = *existing->second;
      return invalid_argument("DistributedOptimizer: parameter '" + e.name + "' is shared by " +
                              e.owner_labels() + " (" + e.settings.str() + ") and '" + label +
                              "' (" + settings.str() +
                              "); optimizers sharing a parameter must reduce it the same way");
    }
    if (p.name.empty()) continue;
    auto ins = mine.emplace(p.name, i);
    if (!ins.second && params[ins.first->second].key != p.key) {
      const ParamSpec& first = params[ins.first->second];
      auto describe = [this](const ParamSpec& s) {
        auto it = by_key_.find(s.key);
        return s.param ? s.param->describe()
                       : (it != by_key_.end() ? it->second->param->describe() : "?");
      };
      return invalid_argument(
          "DistributedOptimizer '" + label +
          "': two different tensors are registered under the name '" + p.name +
          "': " + describe(first) + " and " + describe(p) +
          "; names must identify one tensor within an optimizer (as in Horovod)");
    }
  }
  for (const auto& g : groups) {
    bool any_new = false, same = true;
    std::shared_ptr<GradEntry::Group> first;
    for (size_t k = 0; k < g.size(); ++k) {
      auto it = by_key_.find(params[g[k]].key);
      auto cur = it == by_key_.end() ? nullptr : it->second->group;
      any_new = any_new || it == by_key_.end();
      if (k == 0) first = cur;
      same = same && cur && cur == first;
    }
    if (!any_new && same && first->members.size() == g.size()) continue;  // identical group
    bool all_new = true;
    for (size_t i : g) all_new = all_new && !by_key_.count(params[i].key);
    if (!all_new) {
      return invalid_argument(
          "DistributedOptimizer '" + label + "': the group starting with parameter '" +
          params[g.front()].name +
          "' contains a parameter that another optimizer already reduces with a different "
          "grouping; give shared parameters identical groups");
    }
  }
  return Status();
}

Result<EntryList> GradRegistry::add(int64_t owner, const std::string& label,
                                    std::vector<ParamSpec> params, const ReduceSettings& settings,
                                    const std::vector<std::vector<size_t>>& groups) {
  Lock lk(*this);
  if (Status s = validate(label, params, settings, groups); !s.ok()) return s;
  EntryList out;
  out.reserve(params.size());
  for (auto& p : params) {
    auto it = by_key_.find(p.key);
    std::shared_ptr<GradEntry> e;
    if (it != by_key_.end()) {
      e = it->second;
    } else {
      e = std::make_shared<GradEntry>();
      e->key = p.key;
      e->param = std::move(p.param);
      if (!p.name.empty()) {
        e->name = p.name;
      } else if (usable_hint(p, settings.process_set)) {
        e->name = p.wire.substr(5);  // registered before: its automatic name again
      } else {
        e->name = "param." + std::to_string(auto_names_++);
      }
      e->wire = new_wire_name(p, e->name, settings.process_set);
      e->wire_hash = core::fnv1a(e->wire);
      e->settings = settings;
      e->param->attach(e);
      by_key_[e->key] = e;
      by_wire_[{settings.process_set, e->wire}] = e;
      e->registered = true;
    }
    if (std::none_of(e->owners.begin(), e->owners.end(),
                     [owner](const auto& o) { return o.first == owner; })) {
      e->owners.emplace_back(owner, label);
      ++shape_;
      // A shared entry is never a bucket view: its bucket dissolves (every rank registers in the
      // same order; the first owner's next agreement lays its buckets out again).
      if (e->group && e->group->bucket) dissolve(e->group);
    }
    out.push_back(e);
  }
  for (const auto& g : groups) {
    if (out[g.front()]->group) continue;  // validated: the identical existing group
    ++shape_;
    auto grp = std::make_shared<GradEntry::Group>();
    grp->name = "grad.group." + out[g.front()]->wire.substr(5) + "+" + std::to_string(g.size() - 1);
    for (size_t i : g) {
      grp->members.push_back(out[i]);
      out[i]->group = grp;
    }
  }
  return out;
}

void GradRegistry::remove(int64_t owner, const EntryList& entries) {
  if (holder_.load() == std::this_thread::get_id()) {
    deferred_.emplace_back(owner, entries);  // inside a callback of this registry: see Lock
    return;
  }
  Lock lk(*this);
  remove_locked(lk, owner, entries);
}

void GradRegistry::drain_deferred(Lock& lk) {
  while (!deferred_.empty()) {
    auto [owner, entries] = std::move(deferred_.back());
    deferred_.pop_back();
    remove_locked(lk, owner, entries);
  }
}

void GradRegistry::remove_locked(Lock& lk, int64_t owner, const EntryList& entries) {
  layouts_.erase(owner);
  ++shape_;
  for (const auto& e : entries) {
    auto& o = e->owners;
    o.erase(std::remove_if(o.begin(), o.end(), [owner](const auto& x) { return x.first == owner; }),
            o.end());
    e->pending.erase(std::remove(e->pending.begin(), e->pending.end(), owner), e->pending.end());
    if (!o.empty()) continue;
    auto it = by_key_.find(e->key);
    if (it == by_key_.end() || it->second != e) continue;  // removed already
    if (e->state == GradEntry::State::kInFlight) {
      // The gradient must outlive its reduction.
      (void)wait_and_finish(lk, {{e, nullptr, e->reduction}});
    }
    for (auto q = queued_.begin(); q != queued_.end();) {
      if (std::find(q->first.begin(), q->first.end(), e) == q->first.end()) {
        ++q;
        continue;
      }
      for (const auto& m : q->first) {  // queued with it: back to a fresh round
        m->param->drop_stash();
        start_round(*m);
      }
      q = queued_.erase(q);
    }
    e->param->detach();
    if (e->group) dissolve(e->group);  // a group dissolves with its first departing member
    by_key_.erase(e->key);
    by_wire_.erase({e->settings.process_set, e->wire});
    e->registered = false;
    if (e->submissions != 0) retired_submissions_[e->wire] += e->submissions;
    e->submissions = 0;
  }
}

void GradRegistry::dissolve(std::shared_ptr<GradEntry::Group> g) {  // a copy: members reset theirs
  ++shape_;
  // Its member list stays as it was: a wait listed before (Wait::unit) completes those members.
  g->params.clear();
  for (const auto& m : g->members) {
    m->group.reset();
    if (g->bucket) m->param->leave_bucket();
  }
}

bool GradRegistry::bucket_eligible(int64_t owner, const GradEntry& e) const {
  return e.settings.bucket_view && e.owners.size() == 1 && e.owners.front().first == owner &&
         (!e.group || e.group->bucket);
}

int64_t GradRegistry::wants_layout(int64_t owner, const EntryList& entries) const {
  // The settings are every rank's (the first registration's): so is the answer.
  if (std::none_of(entries.begin(), entries.end(),
                   [](const auto& e) { return e->settings.bucket_view; }))
    return 0;
  auto it = layouts_.find(owner);
  if (it == layouts_.end()) return kLayoutMissing;
  const Layout& l = it->second;
  // The eligible entries changed (a bucket dissolved when an entry became shared): lay out
  // again. bucket_kind() is asked at layout time only (it costs a call per entry).
  if (l.eligible.size() != entries.size()) return kLayoutMissing;
  if (l.shape != shape_) {  // owners or groups changed since the layout (else nothing can differ)
    for (size_t i = 0; i < entries.size(); ++i) {
      if (l.eligible[i] != bucket_eligible(owner, *entries[i])) return kLayoutMissing;
    }
    for (const auto& e : l.order) {
      if (!e->group || !e->group->bucket) return kLayoutMissing;
    }
  }
  if (l.order_relayouts >= kMaxOrderRelayouts) return 0;
  uint64_t last = 0;
  for (const auto& e : l.order) {
    if (e->ready_stamp == 0) return 0;  // not every member became ready: nothing learned
    if (e->ready_stamp < last) return kOrderChanged;
    last = e->ready_stamp;
  }
  return 0;
}

Status GradRegistry::relayout(int64_t owner, const EntryList& entries) {
  // Each entry's observed position (unreached ones after all reached, in entry order) and
  // whether it is ineligible on this rank; the maxima are the same on every rank.
  const size_t n = entries.size();
  std::vector<size_t> by_stamp;
  for (size_t i = 0; i < n; ++i) {
    if (entries[i]->ready_stamp != 0) by_stamp.push_back(i);
  }
  std::stable_sort(by_stamp.begin(), by_stamp.end(), [&entries](size_t a, size_t b) {
    return entries[a]->ready_stamp < entries[b]->ready_stamp;
  });
  std::vector<int64_t> v(2 * n);
  std::vector<bool> eligible(n);
  for (size_t k = 0; k < by_stamp.size(); ++k) v[by_stamp[k]] = static_cast<int64_t>(k);
  for (size_t i = 0; i < n; ++i) {
    if (entries[i]->ready_stamp == 0) v[i] = static_cast<int64_t>(n + i);
    eligible[i] = bucket_eligible(owner, *entries[i]);
    v[n + i] = eligible[i] && !entries[i]->param->bucket_kind().empty() ? 0 : 1;
  }
  // This owner's own settings (bucket_view_bytes): those of an entry it registered first.
  auto own = std::find_if(entries.begin(), entries.end(),
                          [](const auto& e) { return e->settings.bucket_view; });
  const ReduceSettings& settings = (own == entries.end() ? entries.front() : *own)->settings;
  const int32_t set = settings.process_set;
  const uint64_t gen = ++layout_gens_[set];
  const std::string prefix = "hvd.bucket." + std::to_string(gen);
  Result<std::vector<int64_t>> r = fe_.agree(prefix + ".layout", v, set);
  if (!r.ok()) return r.status();
  const std::vector<int64_t>& m = r.value();
  if (m.size() != v.size()) {
    return internal_error("DistributedOptimizer " + entries.front()->owner_labels() +
                          ": the bucket layout exchange returned " + std::to_string(m.size()) +
                          " values for " + std::to_string(v.size()));
  }
  Layout& layout = layouts_[owner];
  for (const auto& e : entries) {
    if (e->group && e->group->bucket) dissolve(e->group);
  }
  layout.order.clear();
  layout.eligible = std::move(eligible);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i) {
    if (m[n + i] == 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&m](size_t a, size_t b) { return m[a] < m[b]; });
  // Consecutive runs of one kind, closed once they hold bucket_view_bytes.
  Status first;
  size_t k = 0;
  for (size_t start = 0; start < order.size();) {
    const std::string kind = entries[order[start]]->param->bucket_kind();
    size_t bytes = 0, end = start;
    while (end < order.size() && bytes < settings.bucket_view_bytes &&
           entries[order[end]]->param->bucket_kind() == kind) {
      bytes += entries[order[end]]->param->nbytes();
      ++end;
    }
    auto g = std::make_shared<GradEntry::Group>();
    g->name = prefix + "." + std::to_string(k++);
    g->bucket = true;
    std::vector<GradParam*> params;
    for (size_t j = start; j < end; ++j) {
      g->members.push_back(entries[order[j]]);
      params.push_back(entries[order[j]]->param.get());
    }
    Status s = fe_.make_bucket(params, g->name, settings);
    if (s.ok()) {
      g->params = std::move(params);
      for (const auto& e : g->members) {
        e->group = g;
        layout.order.push_back(e);
      }
    } else if (first.ok()) {
      first = s;
    }
    start = end;
  }
  layout.shape = shape_;  // what wants_layout() compares: owners and groups as laid out now
  return first;
}

std::vector<std::string> GradRegistry::bucket_names(const EntryList& entries) const {
  Lock lk(*this);
  std::vector<std::string> out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    out.push_back(e->group && e->group->bucket ? e->group->name : std::string());
  }
  return out;
}

void GradRegistry::set_backward_passes_per_step(const EntryList& entries, int passes) {
  Lock lk(*this);
  for (const auto& e : entries) {
    e->settings.backward_passes_per_step = passes;
    if (e->state == GradEntry::State::kAccumulating) e->passes = 0;
  }
}

std::map<std::string, int64_t> GradRegistry::submissions() const {
  Lock lk(*this);
  std::map<std::string, int64_t> out = retired_submissions_;
  for (const auto& [key, e] : by_wire_) {
    if (e->submissions != 0) out[key.second] += e->submissions;
  }
  return out;
}

}  // namespace hvd::optim
