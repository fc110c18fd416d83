// SPDX-License-Identifier: Apache-2.0
// The gradient registry's rounds: hooks, buckets, submission, agreement, waiting and completion
// (the state machine is described in hvd/optim/grad_registry.h).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "hvd/core/hash.h"
#include "hvd/optim/grad_registry.h"
#include "registry_lock.h"

namespace hvd::optim {
namespace {

using State = GradEntry::State;
using Use = GradFrontend::Use;

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// Calls fn for each entry reduced together with `e` (no copy of a bucket's member list).
template <typename Fn>
void for_unit(const std::shared_ptr<GradEntry>& e, Fn&& fn) {
  if (!e->group) {
    fn(e);
    return;
  }
  for (const auto& m : e->group->members) fn(m);
}

/// `es` is the whole of a bucket's membership, in order, each reduced for its .grad (not aside,
/// not dropped): what GradFrontend::finish_bucket() can finish at once.
bool whole_bucket_on_grad(const std::vector<GradEntry*>& es) {
  const auto& g = es.front()->group;
  if (es.size() < 2 || !g || !g->bucket || g->members.size() != es.size() ||
      g->params.size() != es.size())
    return false;
  for (size_t i = 0; i < es.size(); ++i) {
    if (es[i] != g->members[i].get() || es[i]->aside || es[i]->drop) return false;
  }
  return true;
}

/// Minima travel as kFlip - v in the same maximum: positive, so that a rank that joined (hvd
/// join(): zeros in every allreduce) changes neither the maxima nor the minima.
constexpr int64_t kFlip = int64_t{1} << 62;

/// What every rank must agree on before pairing: the entries' count and names, in order (each
/// name's hash was taken at registration: a step hashes one word per entry, not its name).
int64_t fingerprint(const EntryList& entries) {
  uint64_t h = core::kFnv1aStart;
  for (const auto& e : entries) h = (h ^ e->wire_hash) * core::kFnv1aPrime;
  return static_cast<int64_t>(h & 0x1fffffffffffffffull);
}

}  // namespace

void GradRegistry::start_round(GradEntry& e) {
  e.state = State::kClean;
  e.passes = 0;
  e.pending.clear();
}

void GradRegistry::set_aside(GradEntry& e) {
  e.settled = false;
  if (!e.zeroed) e.param->stash();
  e.param->reattach();  // a bucket view: the pass accumulates into it
  e.zeroed = false;
  e.state = State::kAccumulating;
  e.passes = 0;
  e.pending.clear();
}

void GradRegistry::ensure_end_of_pass() {
  if (!end_of_pass_queued_ && fe_.defer_to_end_of_pass()) end_of_pass_queued_ = true;
}

void GradRegistry::open_pass(const std::shared_ptr<GradEntry>& e, bool released, bool zeroed) {
  e->open = true;
  e->open_released = released;
  e->open_zeroed = zeroed;
  if (e->registered) opened_.push_back(e);
  ensure_end_of_pass();
}

void GradRegistry::close_open_passes() {
  // Swapped with a list kept for it: both keep their capacity (no allocation per pass).
  EntryList& opened = closing_;
  opened.swap(opened_);
  struct Clear {
    EntryList& l;
    ~Clear() { l.clear(); }
  } clear{opened};
  for (const auto& e : opened) {
    if (!e->open) continue;  // its pass accumulated
    e->open = false;
    if (e->state != State::kAccumulating || e->passes != 0) continue;
    // The pre-hook ran but nothing accumulated (torch.autograd.grad): .grad as it was.
    if (e->open_released && e->reduction && e->aside && !e->drop) {
      e->param->restore(true);
      e->aside = false;
      e->state = State::kInFlight;
    } else if (!e->open_released) {
      e->param->restore(false);
      e->state = State::kClean;
      e->zeroed = e->open_zeroed;
      e->pending = e->open_pending;
    }
  }
}

void GradRegistry::check_abandoned(bool outside_pass) {
  // Outside a backward pass no end-of-pass call can be pending: one asked for by a pass that
  // raised is forgotten even if its callback has not been destroyed yet.
  if (!pass_abandoned_.exchange(false) && !(outside_pass && end_of_pass_queued_)) return;
  // The pass raised: its end-of-pass call will not come. Overlap goes on with the next pass.
  end_of_pass_queued_ = false;
  close_open_passes();
}

void GradRegistry::discard(GradEntry& e, bool stash) {
  e.discarded = e.rounds;
  if (e.reduction) {
    if (!e.aside) e.param->release();
    e.aside = true;
    e.drop = true;
  }
  if (stash) e.param->drop_stash();
}

void GradRegistry::complete(GradEntry& e, bool ok) { complete_all({&e}, ok); }

void GradRegistry::complete_all(const std::vector<GradEntry*>& es, bool ok) {
  if (es.empty()) return;
  if (ok && whole_bucket_on_grad(es) && fe_.finish_bucket(es.front()->group->params)) {
    // The result is where it belongs (every .grad a view of the reduced buffer): no per-member
    // frontend call, and nothing to settle.
    for (GradEntry* e : es) {
      e->reduction.reset();
      after_finish(*e, true, Use::kGrad);
      e->settled = true;
    }
    return;
  }
  const std::shared_ptr<GradReduction> r = es.front()->reduction;  // the same for every one
  std::vector<GradParam*> params;
  std::vector<size_t> index;
  std::vector<Use> uses;
  params.reserve(es.size());
  index.reserve(es.size());
  uses.reserve(es.size());
  for (GradEntry* e : es) {
    e->reduction.reset();
    params.push_back(e->param.get());
    index.push_back(e->slot);
    uses.push_back(e->drop ? Use::kDrop : e->aside ? Use::kAside : Use::kGrad);
  }
  if (es.size() == 1) {
    fe_.finish(*params[0], *r, index[0], ok, uses[0]);
  } else {
    fe_.finish_all(params, *r, index, ok, uses);
  }
  for (size_t i = 0; i < es.size(); ++i) {
    es[i]->settled = false;
    after_finish(*es[i], ok, uses[i]);
  }
}

void GradRegistry::after_finish(GradEntry& e, bool ok, Use use) {
  e.aside = e.drop = false;
  // Results add up in submission order on every rank, so every rank gets the same bits: one
  // that completes after the .grad reduction (zeros padding a rank with fewer) goes straight
  // into .grad, whose sum it continues.
  if (use == Use::kAside && e.state == State::kClean) e.param->settle();
  if (use != Use::kGrad) return;
  e.state = State::kClean;
  e.passes = 0;
  e.pending.clear();
  if (ok) {
    for (const auto& o : e.owners) e.pending.push_back(o.first);
  }
}

void GradRegistry::poll(GradEntry& e) {
  if (!e.reduction || !e.reduction->done()) return;
  auto r = e.reduction;
  const Status s = r->wait();  // finished: returns at once
  if (!s.ok() && failed_.ok()) failed_ = s;
  auto it = by_key_.find(e.key);
  if (it == by_key_.end()) {
    complete(e, s.ok());
    return;
  }
  std::vector<GradEntry*> done;
  for_unit(it->second, [&](const std::shared_ptr<GradEntry>& m) {  // group mates complete too
    if (m->reduction == r) done.push_back(m.get());
  });
  complete_all(done, s.ok());
}

bool GradRegistry::bucket_untouched(const GradEntry::Group& g) {
  if (!g.bucket || g.members.size() < 2 || g.params.size() != g.members.size()) return false;
  const GradReduction* r = g.members.front()->reduction.get();
  if (r == nullptr) return false;
  for (const auto& m : g.members) {
    if (m->reduction.get() != r || m->state != State::kInFlight || m->aside || m->drop)
      return false;
  }
  return fe_.bucket_untouched(g.params);
}

bool GradRegistry::group_ready(const GradEntry::Group& g) const {
  // From the last member: a bucket's members become ready in its order, so a scan from its end
  // stops at once until the bucket is complete.
  return std::all_of(g.members.rbegin(), g.members.rend(), [](const auto& m) {
    return m->state == State::kAccumulating && m->passes >= m->settings.backward_passes_per_step &&
           !m->reduction;
  });
}

Status GradRegistry::before_pass(const std::shared_ptr<GradEntry>& e) {
  Lock lk(*this);
  check_abandoned();
  poll(*e);
  if (e->state == State::kInFlight) {
    if (e->param->untouched()) {
      // Never wait here (the other ranks may submit this name only at synchronize()): the
      // reduction goes on aside, this pass accumulates into an empty gradient.
      e->param->release();
      e->aside = true;
      e->state = State::kAccumulating;
      e->passes = 0;
      open_pass(e, true, false);
      return Status();
    }
    discard(*e);  // zeroed or replaced meanwhile (module.zero_grad()): what came before is gone
    start_round(*e);
    e->zeroed = false;  // the user's .grad, if any, is the new consistent value
  }
  if (e->state == State::kClean) {
    const bool zeroed = e->zeroed;
    e->open_pending = e->pending;
    set_aside(*e);
    open_pass(e, false, zeroed);
  }
  return Status();
}

Status GradRegistry::after_pass(const std::shared_ptr<GradEntry>& e) {
  Lock lk(*this);
  check_abandoned();
  if (e->state == State::kInFlight || e->state == State::kClean) {
    // No pre-hook ran for this pass (a hook removed and added back meanwhile): treat it as one.
    if (e->state == State::kInFlight) {
      if (Status s = wait_and_finish(lk, in_flight({e})); !s.ok()) return s;
    }
    e->zeroed = true;  // the pass already accumulated: nothing can be set aside
    set_aside(*e);
  }
  e->open = false;
  if (e->state == State::kQueued) return Status();  // a nested pass adds to what is queued
  e->zeroed = false;
  ++e->passes;
  if (e->passes < e->settings.backward_passes_per_step) return Status();
  if (e->ready_stamp == 0) e->ready_stamp = ++ready_clock_;
  return ready(e);
}

Status GradRegistry::ready(const std::shared_ptr<GradEntry>& e) {
  // Group mates share their reductions: polling one completes them all.
  poll(*e);
  if (e->group && !e->group->members.empty()) poll(*e->group->members.front());
  const bool busy = !e->group ? e->reduction != nullptr : !group_ready(*e->group);
  if (busy) {
    // Its name is still in flight (or, for a group, a mate is not ready): it accumulates on,
    // and is queued when the name frees (end of pass) or submitted by synchronize().
    // One member stands for its group (end_of_pass() checks the whole group through it).
    if (e->group && e->group->waiting) return Status();
    if (!e->waiting) waiting_.push_back(e);
    e->waiting = true;
    if (e->group) e->group->waiting = true;
    return Status();
  }
  return e->group ? queue(e->group->members, e->group->name) : queue({e}, "");
}

Status GradRegistry::queue(const EntryList& entries, const std::string& group_name) {
  for (const auto& m : entries) m->state = State::kQueued;
  if (bucket_bytes_ == 0) return submit(entries, group_name);
  ensure_end_of_pass();
  if (!end_of_pass_queued_) return submit(entries, group_name);  // not inside a backward pass
  queued_.emplace_back(entries, group_name);
  for (const auto& m : entries) queued_bytes_ += m->param->nbytes();
  return queued_bytes_ >= bucket_bytes_ ? flush() : Status();
}

Status GradRegistry::end_of_pass() {
  Lock lk(*this);
  check_abandoned();
  end_of_pass_queued_ = false;
  close_open_passes();
  Status first;
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (const auto& e : waiting) {
    e->waiting = false;
    if (e->group) e->group->waiting = false;
  }
  for (const auto& e : waiting) {
    auto it = by_key_.find(e->key);
    if (it == by_key_.end() || it->second != e) continue;  // removed meanwhile
    if (e->state != State::kAccumulating || e->passes < e->settings.backward_passes_per_step)
      continue;  // submitted or zeroed meanwhile
    Status s = ready(e);
    if (first.ok()) first = s;
  }
  Status s = flush();
  return first.ok() ? s : first;
}

Status GradRegistry::flush() {
  auto queued = std::move(queued_);
  queued_.clear();
  queued_bytes_ = 0;
  Status first;
  for (const auto& [entries, group_name] : queued) {
    Status s = submit(entries, group_name);
    if (first.ok()) first = s;
  }
  return first;
}

Status GradRegistry::submit(const EntryList& entries, const std::string& group_name, bool zeros) {
  std::vector<GradParam*> params;
  params.reserve(entries.size());
  for (const auto& m : entries) params.push_back(m->param.get());
  const bool grouped = !group_name.empty();
  const std::string& name = grouped ? group_name : entries.front()->wire;
  const auto& g = entries.front()->group;
  const bool bucket = grouped && g && g->bucket && g->name == group_name;
  Result<std::shared_ptr<GradReduction>> r =
      bucket ? fe_.submit_bucket(params, name, entries.front()->settings, zeros)
             : fe_.submit(params, name, grouped, entries.front()->settings, zeros);
  if (!r.ok()) {
    for (const auto& m : entries) {
      if (zeros) continue;
      m->param->drop_stash();
      start_round(*m);
    }
    return r.status();
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    GradEntry& m = *entries[i];
    m.reduction = r.value();
    m.slot = i;
    m.drop = false;
    m.aside = zeros;
    ++m.rounds;
    ++m.submissions;
    if (zeros) continue;
    m.state = State::kInFlight;
    m.passes = 0;
    m.zeroed = false;
  }
  return Status();
}

GradRegistry::Waits GradRegistry::in_flight(const EntryList& entries) const {
  // `entries` are distinct, and an entry is in one group at most: listing each group once lists
  // each entry once. A group's members share one reduction (a bucket's, a grouped one) unless
  // some went aside: one wait per distinct reduction of the unit, not one per member. A bucket's
  // members come one after another: only a change of group is looked up.
  Waits waits;
  std::unordered_set<const GradEntry::Group*> groups;
  const GradEntry::Group* last = nullptr;
  for (const auto& e : entries) {
    if (!e->group) {
      if (e->reduction) waits.push_back({e, nullptr, e->reduction});
      continue;
    }
    if (e->group.get() == last) continue;
    last = e->group.get();
    if (!groups.insert(last).second) continue;  // its unit is listed
    const size_t first = waits.size();
    for (const auto& m : e->group->members) {
      if (!m->reduction) continue;
      bool listed = false;
      for (size_t i = first; i < waits.size() && !listed; ++i) {
        listed = waits[i].reduction == m->reduction;
      }
      if (!listed) waits.push_back({m, e->group, m->reduction});
    }
  }
  return waits;
}

Status GradRegistry::wait_and_finish(Lock& lk, const Waits& waits) {
  lk.unlock();
  Status first_error;
  // A reduction listed twice (an entry alone, and later in its group) is waited once.
  std::vector<Status> status;
  status.reserve(waits.size());
  std::unordered_map<const GradReduction*, size_t> waited;
  for (const auto& w : waits) {
    auto [it, first] = waited.emplace(w.reduction.get(), status.size());
    Status s = first ? w.reduction->wait() : status[it->second];
    if (!s.ok() && first_error.ok()) first_error = s;
    status.push_back(std::move(s));
  }
  lk.relock();
  std::vector<GradEntry*> batch;
  for (size_t i = 0; i < waits.size(); ++i) {
    const Wait& w = waits[i];
    const GradReduction* r = w.reduction.get();
    batch.clear();
    if (w.unit) {
      // The members as listed (a group dissolved meanwhile keeps its list), each still on it.
      batch.reserve(w.unit->members.size());
      for (const auto& m : w.unit->members) {
        if (m->reduction.get() == r) batch.push_back(m.get());  // else done already
      }
    } else if (w.entry->reduction.get() == r) {
      batch.push_back(w.entry.get());
    }
    complete_all(batch, status[i].ok());
  }
  return first_error;
}

Status GradRegistry::agree(const EntryList& entries, const std::vector<size_t>& unit_index,
                           std::vector<int64_t>& wants, int64_t& layout) {
  // [count, fingerprint, per unit: most planned rounds..., most dropped..., least dropped...,
  // layout wanted], then kFlip minus each: one allreduce (max) gives every rank the maxima and
  // the minima. A bucket of 1,024 entries is 3 values, not 4,096.
  const size_t n = entries.size(), u = wants.size();
  std::vector<int64_t> most_dropped(u, 0), least_dropped(u, kFlip);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = unit_index[i];
    most_dropped[k] = std::max(most_dropped[k], entries[i]->discarded);
    least_dropped[k] = std::min(least_dropped[k], entries[i]->discarded);
  }
  std::vector<int64_t> v;
  v.reserve(2 * (3 * u + 3));
  v.push_back(static_cast<int64_t>(n));
  v.push_back(fingerprint(entries));
  v.insert(v.end(), wants.begin(), wants.end());
  v.insert(v.end(), most_dropped.begin(), most_dropped.end());
  for (int64_t x : least_dropped) v.push_back(kFlip - x);  // a minimum, as a maximum
  v.push_back(layout);
  const size_t half = v.size();
  for (size_t i = 0; i < half; ++i) v.push_back(kFlip - v[i]);
  const auto& first = *entries.front();
  const std::string labels = first.owner_labels();
  Result<std::vector<int64_t>> r =
      fe_.agree("grad.agree." + first.wire, v, first.settings.process_set);
  if (!r.ok()) return r.status();
  const std::vector<int64_t>& m = r.value();
  if (m.size() != v.size() || m[0] != kFlip - m[half] || m[1] != kFlip - m[half + 1]) {
    return mismatch("synchronize() of DistributedOptimizer " + labels +
                    ": the ranks synchronized different optimizers at once (" + std::to_string(n) +
                    " parameters here, starting with '" + first.name +
                    "'); every rank must call step() or synchronize() of the same optimizers, "
                    "holding the same parameters, in the same order");
  }
  for (size_t k = 0; k < u; ++k) wants[k] = m[2 + k];
  layout = m[half - 1];
  bool even = true;
  for (size_t k = 0; k < u && even; ++k) {
    even = m[2 + u + k] == kFlip - m[2 + 2 * u + k];  // most == least over members and ranks
  }
  if (even) return Status();
  // Some unit's dropped counts differ: which entry's differ across the ranks (members may
  // differ among themselves without harm). Every rank got the same maxima, so every rank asks.
  std::vector<int64_t> d;
  d.reserve(2 * n);
  for (const auto& e : entries) d.push_back(e->discarded);
  for (size_t i = 0; i < n; ++i) d.push_back(kFlip - d[i]);
  Result<std::vector<int64_t>> rd =
      fe_.agree("grad.agree.dropped." + first.wire, d, first.settings.process_set);
  if (!rd.ok()) return rd.status();
  const std::vector<int64_t>& md = rd.value();
  if (md.size() != d.size()) {
    return internal_error("synchronize(): the dropped counts' exchange returned " +
                          std::to_string(md.size()) + " values, not " + std::to_string(d.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t most = md[i], least = kFlip - md[n + i];
    if (most == least) continue;
    const GradEntry& e = *entries[i];
    return precondition(
        "DistributedOptimizer " + labels + ": the gradient of '" + e.name +
        "' was zeroed on some ranks after " + std::to_string(least) +
        " of its reductions since the last step and on others after " + std::to_string(most) +
        " (the ranks had used it in different backward passes before zeroing it): reductions "
        "paired across ranks mixed dropped and kept gradients, so this step would diverge and "
        "fails on every rank. Call step() or synchronize() before zero_grad() (or "
        "module.zero_grad()) when ranks may use a parameter in different backward passes");
  }
  return Status();
}

Status GradRegistry::synchronize(int64_t owner, const EntryList& entries) {
  Lock lk(*this);
  check_abandoned(true);
  Status first = flush();
  if (!failed_.ok()) {
    if (first.ok()) first = failed_;
    failed_ = Status();
  }
  if (entries.empty()) return first;
  // 1. What this rank reduces: each unit (a group, or an entry) once, in the order of `entries`
  // (the same on every rank).
  struct Unit {
    std::shared_ptr<GradEntry::Group> group;  ///< its members (a bucket's: not copied), or null
    EntryList single;                         ///< ... an entry alone
    std::string name;
    bool fill = false;  // gradients (or zeros) not submitted yet
    const EntryList& members() const { return group ? group->members : single; }
  };
  std::vector<Unit> units;
  std::vector<size_t> unit_index(entries.size());
  std::vector<std::shared_ptr<GradEntry::Group>> groups;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e->group) {
      auto g = std::find(groups.begin(), groups.end(), e->group);
      if (g != groups.end()) {
        unit_index[i] = static_cast<size_t>(g - groups.begin());
        continue;
      }
      groups.push_back(e->group);
    } else {
      groups.push_back(nullptr);
    }
    unit_index[i] = units.size();
    if (e->group) {
      units.push_back({e->group, {}, e->group->name, false});
    } else {
      units.push_back({nullptr, {e}, std::string(), false});
    }
  }
  std::vector<GradEntry*> busy;
  std::vector<GradParam*> busy_params;
  busy.reserve(entries.size());
  busy_params.reserve(entries.size());
  for (auto& u : units) {
    busy.clear();
    busy_params.clear();
    // Poll every reduction of the unit first: a poll completes the mates sharing it too, so a
    // member found busy before a later member's poll may be done after it. Mates sharing the
    // one just polled (a bucket's) are not polled again.
    const GradReduction* polled = nullptr;
    for (const auto& m : u.members()) {
      if (!m->reduction || m->reduction.get() == polled) continue;
      polled = m->reduction.get();
      poll(*m);
    }
    // A bucket in flight on every member's .grad, untouched: nothing to drop, nothing to fill.
    if (u.group && bucket_untouched(*u.group)) continue;
    for (const auto& m : u.members()) {
      if (m->reduction && !m->aside) {
        busy.push_back(m.get());
        busy_params.push_back(m->param.get());
      }
    }
    const std::vector<bool> kept = busy_params.size() == 1
                                       ? std::vector<bool>{busy_params[0]->untouched()}
                                       : fe_.untouched_all(busy_params);  // one call per unit
    for (size_t i = 0; i < busy.size(); ++i) {
      if (i < kept.size() && kept[i]) continue;
      // Changed while in flight (zeroed, clipped in place): dropped, as zeroed.
      GradEntry& m = *busy[i];
      discard(m);
      start_round(m);
      m.zeroed = true;
    }
    for (const auto& m : u.members()) {
      // No (or not enough) gradient this round on this rank: it contributes what accumulated,
      // zeros when nothing did.
      if (m->state == State::kAccumulating || m->state == State::kQueued ||
          (m->state == State::kClean && !contains(m->pending, owner)))
        u.fill = true;
    }
  }
  // 2. The agreement: how many reductions each unit has on the rank that has most (a unit's
  // members are submitted together). A mismatch of the names fails at once (pairing is
  // impossible); a mismatch of the reductions dropped is reported once every reduction completed
  // (nothing is left in flight).
  std::vector<int64_t> wants(units.size(), 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t k = unit_index[i];
    wants[k] = std::max(wants[k], entries[i]->rounds + (units[k].fill ? 1 : 0));
  }
  int64_t layout = wants_layout(owner, entries);
  Status refused = agree(entries, unit_index, wants, layout);
  if (!refused.ok() && refused.code() != StatusCode::kPrecondition) return refused;
  // 3. In order, per unit: what this rank has, then zeros up to the target. A name is in flight
  // once: each rank waits for its previous reduction of the unit, which every rank submits in the
  // same order, so nobody waits for a rank that waits.
  for (size_t k = 0; k < units.size(); ++k) {
    Unit& u = units[k];
    const int64_t want = wants[k];
    auto wait_unit = [&]() -> Status {
      if (!u.members().front()->reduction) return Status();
      return wait_and_finish(lk, in_flight({u.members().front()}));
    };
    if (u.fill) {
      Status s = wait_unit();
      if (s.ok()) {
        for (const auto& m : u.members()) {
          if (m->state == State::kClean || m->state == State::kInFlight) set_aside(*m);
        }
        s = submit(u.members(), u.name);
      }
      if (!s.ok() && first.ok()) first = s;
    }
    while (u.members().front()->rounds < want) {
      Status s = wait_unit();
      if (s.ok()) s = submit(u.members(), u.name, true);
      if (!s.ok()) {
        if (first.ok()) first = s;
        break;
      }
    }
  }
  // 4. Everything of `entries` completes; results set aside join .grad.
  Status waited = wait_and_finish(lk, in_flight(entries));
  std::vector<GradParam*> clean;
  clean.reserve(entries.size());
  for (const auto& e : entries) {
    if (e->state == State::kClean && !e->settled) clean.push_back(e->param.get());
    e->rounds = 0;
    e->discarded = 0;
  }
  fe_.settle_all(clean);
  if (first.ok()) first = waited;
  if (refused.ok() && first.ok() && layout != 0) {
    // Every rank got the same maximum: all of them build the layout here.
    if (layout == kOrderChanged) ++layouts_[owner].order_relayouts;
    first = relayout(owner, entries);
  }
  for (const auto& e : entries) e->ready_stamp = 0;
  return refused.ok() ? first : refused;
}

void GradRegistry::consume(int64_t owner, const EntryList& entries) {
  Lock lk(*this);
  for (const auto& e : entries) {
    e->pending.erase(std::remove(e->pending.begin(), e->pending.end(), owner), e->pending.end());
  }
}

void GradRegistry::quiesce(const EntryList& entries) {
  Lock lk(*this);
  check_abandoned(true);
  (void)flush();
  std::vector<GradParam*> params;
  params.reserve(entries.size());
  for (const auto& e : entries) {
    // Never waits: a reduction in flight is dropped when it completes (the next agreement
    // checks that every rank dropped as many).
    poll(*e);
    discard(*e, false);
    params.push_back(e->param.get());
    start_round(*e);
    e->zeroed = true;
  }
  fe_.drop_stash_all(params);  // one frontend call for all
}

std::shared_ptr<GradEntry> GradRegistry::first_in_flight(const EntryList& entries) {
  Lock lk(*this);
  for (const auto& e : entries) {
    if (e->reduction || e->state == State::kQueued) return e;
  }
  return nullptr;
}

}  // namespace hvd::optim
