// SPDX-License-Identifier: Apache-2.0
// Slurm's host-list and tasks-per-node formats, and -np/-H checked against an allocation.
#include "hvd/runner/slurm.h"

#include <map>

#include "hvd/runner/errors.h"

namespace hvd::runner {
namespace {

constexpr int kMaxHosts = 1 << 20;  // far above any cluster; stops "[0-999999999]" from eating RAM

std::string nodelist_error(std::string_view spec, const std::string& what) {
  return "SLURM_JOB_NODELIST '" + std::string(spec) + "': " + what +
         " (expected e.g. node[01-04,07],gpu-a[1-2]); run inside salloc/sbatch, or pass "
         "--no-slurm to ignore the allocation";
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// Decimal value of an all-digit string of at most 9 digits, else -1.
long to_number(std::string_view s) {
  if (!all_digits(s) || s.size() > 9) return -1;
  long v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

std::string padded(long value, size_t width) {
  std::string s = std::to_string(value);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// "01-04,07" -> 01 02 03 04 07.
std::vector<std::string> expand_ranges(std::string_view body, std::string_view spec) {
  std::vector<std::string> out;
  if (body.empty()) throw UsageError(nodelist_error(spec, "empty brackets '[]'"));
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string_view item = body.substr(start, comma == body.npos ? body.npos : comma - start);
    size_t dash = item.find('-');
    std::string_view lo = item.substr(0, dash);
    std::string_view hi = dash == item.npos ? lo : item.substr(dash + 1);
    long a = to_number(lo), b = to_number(hi);
    if (a < 0 || b < 0) {
      throw UsageError(nodelist_error(
          spec, "bad range '" + std::string(item) + "' in brackets: want N or N-M (digits)"));
    }
    if (b < a) {
      throw UsageError(nodelist_error(spec, "range '" + std::string(item) + "' runs backwards"));
    }
    if (b - a >= kMaxHosts) {
      throw UsageError(nodelist_error(spec, "range '" + std::string(item) + "' is too large"));
    }
    size_t width = lo.size() > 1 && lo[0] == '0' ? lo.size() : 0;
    for (long v = a; v <= b; ++v) out.push_back(padded(v, width));
    if (comma == body.npos) break;
    start = comma + 1;
  }
  return out;
}

// One host expression ("r[1-2]n[01-02]-ib") -> its names (last group varying fastest).
std::vector<std::string> expand_one(std::string_view expr, std::string_view spec) {
  if (expr.empty()) throw UsageError(nodelist_error(spec, "empty host name"));
  std::vector<std::string> names{""};
  size_t i = 0;
  while (i < expr.size()) {
    size_t open = expr.find('[', i);
    std::string_view literal = expr.substr(i, open == expr.npos ? expr.npos : open - i);
    if (literal.find(']') != literal.npos) {
      throw UsageError(nodelist_error(spec, "']' without '[' in '" + std::string(expr) + "'"));
    }
    for (auto& n : names) n += literal;
    if (open == expr.npos) break;
    size_t close = expr.find(']', open);
    if (close == expr.npos) {
      throw UsageError(nodelist_error(spec, "'[' without ']' in '" + std::string(expr) + "'"));
    }
    auto parts = expand_ranges(expr.substr(open + 1, close - open - 1), spec);
    if (names.size() * parts.size() > static_cast<size_t>(kMaxHosts)) {
      throw UsageError(nodelist_error(spec, "'" + std::string(expr) + "' is too large"));
    }
    std::vector<std::string> next;
    for (const auto& n : names) {
      for (const auto& p : parts) next.push_back(n + p);
    }
    names = std::move(next);
    i = close + 1;
  }
  for (const auto& n : names) {
    if (n.find_first_of(" \t\n[]") != n.npos || n.front() == '-' || n.front() == '.') {
      throw UsageError(nodelist_error(spec, "bad host name '" + n + "'"));
    }
  }
  return names;
}

std::string tasks_error(std::string_view spec, const std::string& what) {
  return "SLURM_TASKS_PER_NODE '" + std::string(spec) + "': " + what +
         " (expected e.g. 2(x3),1); run inside salloc/sbatch, or pass --no-slurm";
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(std::string_view spec) {
  if (spec.empty()) throw UsageError(nodelist_error(spec, "empty"));
  std::vector<std::string> out;
  size_t start = 0, depth = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    char c = i < spec.size() ? spec[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0) throw UsageError(nodelist_error(spec, "']' without '['"));
      --depth;
    }
    if (depth > 1) throw UsageError(nodelist_error(spec, "nested brackets"));
    if (c == ',' && depth == 0) {
      for (auto& n : expand_one(spec.substr(start, i - start), spec)) out.push_back(std::move(n));
      start = i + 1;
    }
  }
  if (depth != 0) throw UsageError(nodelist_error(spec, "'[' without ']'"));
  std::map<std::string, int> seen;
  for (const auto& n : out) {
    if (++seen[n] == 2) throw UsageError(nodelist_error(spec, "host '" + n + "' appears twice"));
  }
  return out;
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view spec) {
  if (spec.empty()) throw UsageError(tasks_error(spec, "empty"));
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    size_t comma = spec.find(',', start);
    std::string_view item = spec.substr(start, comma == spec.npos ? spec.npos : comma - start);
    std::string_view count = item;
    long repeat = 1;
    if (size_t paren = item.find('('); paren != item.npos) {
      count = item.substr(0, paren);
      std::string_view rep = item.substr(paren + 1);
      if (rep.size() < 3 || rep.substr(0, 1) != "x" || rep.back() != ')') {
        throw UsageError(
            tasks_error(spec, "bad repeat in '" + std::string(item) + "': want N(xM)"));
      }
      repeat = to_number(rep.substr(1, rep.size() - 2));
    }
    long n = to_number(count);
    if (n < 1 || repeat < 1) {
      throw UsageError(tasks_error(
          spec, "bad entry '" + std::string(item) + "': want a positive count N or N(xM)"));
    }
    if (static_cast<long>(out.size()) + repeat > kMaxHosts) {
      throw UsageError(tasks_error(spec, "too many nodes"));
    }
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(n));
    if (comma == spec.npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<SlurmAllocation> slurm_allocation(const SlurmEnv& env) {
  if (env.job_id.empty() || env.nodelist.empty()) return std::nullopt;
  SlurmAllocation a;
  a.job_id = env.job_id;
  auto nodes = expand_slurm_nodelist(env.nodelist);
  std::vector<int> tasks(nodes.size(), 1);
  if (!env.tasks_per_node.empty()) tasks = expand_slurm_tasks_per_node(env.tasks_per_node);
  if (tasks.size() != nodes.size()) {
    throw UsageError("Slurm job " + env.job_id + ": SLURM_TASKS_PER_NODE '" + env.tasks_per_node +
                     "' gives " + std::to_string(tasks.size()) +
                     " counts but SLURM_JOB_NODELIST '" + env.nodelist + "' has " +
                     std::to_string(nodes.size()) +
                     " nodes; pass --no-slurm with -np/-H to ignore the allocation");
  }
  for (size_t i = 0; i < nodes.size(); ++i) a.hosts.push_back({nodes[i], tasks[i]});
  const int total = total_slots(a.hosts);
  a.ntasks = total;
  if (!env.ntasks.empty()) {
    long n = to_number(env.ntasks);
    if (n < 1 || n > total) {
      throw UsageError("Slurm job " + env.job_id + ": SLURM_NTASKS '" + env.ntasks +
                       "' is not a task count from 1 to " + std::to_string(total) +
                       " (the tasks of SLURM_TASKS_PER_NODE '" + env.tasks_per_node +
                       "'); pass --no-slurm with -np/-H to ignore the allocation");
    }
    a.ntasks = static_cast<int>(n);
  }
  return a;
}

std::string describe_allocation(const SlurmAllocation& a) {
  return "job " + a.job_id + ", " + std::to_string(a.ntasks) +
         (a.ntasks == 1 ? " task" : " tasks") + " on " + format_host_list(a.hosts);
}

SlurmPlan plan_in_allocation(const SlurmAllocation& alloc, int np,
                             const std::vector<HostSlots>& requested,
                             std::string_view own_hostname) {
  const std::string where = "the Slurm allocation (" + describe_allocation(alloc) + ")";
  const auto too_many = [&](int asked, const std::string& fix) {
    return UsageError("-np " + std::to_string(asked) + " asks for more ranks than " + where +
                      " has; give -np " + std::to_string(alloc.ntasks) + " or less" + fix);
  };
  SlurmPlan plan;
  if (requested.empty()) {
    if (np > alloc.ntasks) {
      throw too_many(np, ", or allocate more tasks (salloc/sbatch -n " + std::to_string(np) + ")");
    }
    plan.hosts = alloc.hosts;
    plan.np = np > 0 ? np : alloc.ntasks;
    return plan;
  }
  const std::string own_short(own_hostname.substr(0, own_hostname.find('.')));
  for (const auto& r : requested) {
    const HostSlots* node = nullptr;
    for (const auto& h : alloc.hosts) {
      if (h.name == r.name) node = &h;
    }
    if (node == nullptr && is_local_host(r.name, own_hostname)) {
      for (const auto& h : alloc.hosts) {
        if (h.name == own_hostname || h.name == own_short) node = &h;
      }
    }
    if (node == nullptr) {
      throw UsageError("host '" + r.name + "' (from -H/--hostfile) is not in " + where +
                       "; use allocated nodes only, or leave out -H to use the whole allocation");
    }
    if (r.slots > node->slots) {
      throw UsageError("host '" + r.name + "' asks for " + std::to_string(r.slots) + " slots but " +
                       where + " has " + std::to_string(node->slots) + " on " + node->name +
                       "; lower its slots or allocate more tasks per node");
    }
  }
  plan.hosts = requested;
  plan.np = np > 0 ? np : total_slots(requested);
  if (plan.np > alloc.ntasks) throw too_many(plan.np, ", or allocate more tasks");
  return plan;
}

}  // namespace hvd::runner
