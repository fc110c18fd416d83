// SPDX-License-Identifier: Apache-2.0
// The gradient registry's rounds: hooks, buckets, submission, waiting and completion (the state
// machine is described in hvd/optim/grad_registry.h).
#include <algorithm>

#include "hvd/optim/grad_registry.h"
#include "registry_lock.h"

namespace hvd::optim {
namespace {

using State = GradEntry::State;

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

void GradRegistry::start_round(GradEntry& e) {
  e.state = State::kClean;
  e.passes = 0;
  e.pending.clear();
}

void GradRegistry::set_aside(GradEntry& e) {
  if (!e.zeroed) e.param->stash();
  e.zeroed = false;
  e.state = State::kAccumulating;
  e.passes = 0;
  e.pending.clear();
}

bool GradRegistry::group_ready(const GradEntry::Group& g) const {
  return std::all_of(g.members.begin(), g.members.end(), [](const auto& m) {
    return m->state == State::kAccumulating && m->passes >= m->settings.backward_passes_per_step;
  });
}

Status GradRegistry::before_pass(const std::shared_ptr<GradEntry>& e) {
  Lock lk(*this);
  if (e->state == State::kInFlight) {
    // Submitted on every rank: wait, so the pass accumulates into the reduced gradient.
    if (Status s = wait_and_finish(lk, in_flight({e})); !s.ok()) return s;
  }
  if (e->state == State::kClean) set_aside(*e);
  return Status();
}

Status GradRegistry::after_pass(const std::shared_ptr<GradEntry>& e) {
  Lock lk(*this);
  if (e->state == State::kInFlight || e->state == State::kClean) {
    // No pre-hook ran for this pass (a hook removed and added back meanwhile): treat it as one.
    if (e->state == State::kInFlight) {
      if (Status s = wait_and_finish(lk, in_flight({e})); !s.ok()) return s;
    }
    e->zeroed = true;  // the pass already accumulated: nothing can be set aside
    set_aside(*e);
  }
  if (e->state == State::kQueued) return Status();  // a nested pass adds to what is queued
  e->zeroed = false;
  ++e->passes;
  if (e->passes < e->settings.backward_passes_per_step) return Status();
  if (!e->group) return queue({e}, "");
  if (group_ready(*e->group)) return queue(e->group->members, e->group->name);
  return Status();
}

Status GradRegistry::queue(const EntryList& entries, const std::string& group_name) {
  for (const auto& m : entries) m->state = State::kQueued;
  if (bucket_bytes_ == 0) return submit(entries, group_name);
  if (!end_of_pass_queued_) {
    if (!fe_.defer_to_end_of_pass()) return submit(entries, group_name);
    end_of_pass_queued_ = true;
  }
  queued_.emplace_back(entries, group_name);
  for (const auto& m : entries) queued_bytes_ += m->param->nbytes();
  return queued_bytes_ >= bucket_bytes_ ? flush() : Status();
}

Status GradRegistry::end_of_pass() {
  Lock lk(*this);
  end_of_pass_queued_ = false;
  return flush();
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

Status GradRegistry::submit(const EntryList& entries, const std::string& group_name) {
  std::vector<GradParam*> params;
  for (const auto& m : entries) params.push_back(m->param.get());
  const bool grouped = !group_name.empty();
  const std::string& name = grouped ? group_name : entries.front()->wire;
  Result<std::shared_ptr<GradReduction>> r =
      fe_.submit(params, name, grouped, entries.front()->settings);
  if (!r.ok()) {
    for (const auto& m : entries) {
      m->param->drop_stash();
      start_round(*m);
    }
    return r.status();
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    GradEntry& m = *entries[i];
    m.reduction = r.value();
    m.slot = i;
    m.state = State::kInFlight;
    m.passes = 0;
    m.zeroed = false;
    ++submissions_[m.wire];
  }
  return Status();
}

GradRegistry::Waits GradRegistry::in_flight(const EntryList& entries) const {
  Waits waits;
  for (const auto& e : entries) {
    const EntryList self{e};
    for (const auto& m : e->group ? e->group->members : self) {  // group mates complete with it
      const bool listed =
          std::any_of(waits.begin(), waits.end(), [&m](const auto& w) { return w.first == m; });
      if (m->state == State::kInFlight && !listed) waits.emplace_back(m, m->reduction);
    }
  }
  return waits;
}

Status GradRegistry::wait_and_finish(Lock& lk, const Waits& waits) {
  lk.unlock();
  Status first_error;
  std::vector<Status> status(waits.size());
  for (size_t i = 0; i < waits.size(); ++i) {
    // A reduction shared by group members is waited for once.
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) {
      if (waits[j].second == waits[i].second) {
        status[i] = status[j];
        seen = true;
      }
    }
    if (!seen) status[i] = waits[i].second->wait();
    if (!status[i].ok() && first_error.ok()) first_error = status[i];
  }
  lk.relock();
  for (size_t i = 0; i < waits.size(); ++i) {
    GradEntry& e = *waits[i].first;
    if (e.state != State::kInFlight || e.reduction != waits[i].second) continue;  // done already
    fe_.finish(*e.param, *e.reduction, e.slot, status[i].ok());
    e.reduction.reset();
    e.state = State::kClean;
    e.passes = 0;
    e.pending.clear();
    if (status[i].ok()) {
      for (const auto& o : e.owners) e.pending.push_back(o.first);
    }
  }
  return first_error;
}

Status GradRegistry::synchronize(int64_t owner, const EntryList& entries) {
  Lock lk(*this);
  Status first = flush();
  std::vector<std::shared_ptr<GradEntry::Group>> groups;
  for (const auto& e : entries) {
    if (e->state == State::kInFlight) continue;
    if (e->state == State::kClean && contains(e->pending, owner)) continue;
    if (e->group) {
      if (std::find(groups.begin(), groups.end(), e->group) == groups.end())
        groups.push_back(e->group);
      continue;
    }
    // No (or not enough) gradient this round on this rank: contribute what accumulated, zeros
    // when nothing did, keeping the gradient's consistent part aside.
    if (e->state == State::kClean) set_aside(*e);
    Status s = submit({e}, "");
    if (first.ok()) first = s;
  }
  for (const auto& g : groups) {
    if (std::any_of(g->members.begin(), g->members.end(),
                    [](const auto& m) { return m->state == State::kInFlight; }))
      continue;
    for (const auto& m : g->members) {
      if (m->state == State::kClean) set_aside(*m);
    }
    Status s = submit(g->members, g->name);
    if (first.ok()) first = s;
  }
  Status waited = wait_and_finish(lk, in_flight(entries));
  return first.ok() ? waited : first;
}

void GradRegistry::consume(int64_t owner, const EntryList& entries) {
  Lock lk(*this);
  for (const auto& e : entries) {
    e->pending.erase(std::remove(e->pending.begin(), e->pending.end(), owner), e->pending.end());
  }
}

void GradRegistry::quiesce(const EntryList& entries) {
  Lock lk(*this);
  (void)flush();
  (void)wait_and_finish(lk, in_flight(entries));  // a failure is discarded like a result
  for (const auto& e : entries) {
    if (e->state == State::kInFlight) continue;  // submitted again meanwhile
    e->param->drop_stash();
    start_round(*e);
    e->zeroed = true;
  }
}

std::shared_ptr<GradEntry> GradRegistry::first_in_flight(const EntryList& entries) {
  Lock lk(*this);
  for (const auto& e : entries) {
    if (e->state == State::kInFlight || e->state == State::kQueued) return e;
  }
  return nullptr;
}

}  // namespace hvd::optim
