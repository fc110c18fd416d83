// SPDX-License-Identifier: Apache-2.0
// Elastic mode's driver (elastic_job.h). Each generation:
//   1. plan: the host source's hosts less the blacklisted ones; wait (up to --elastic-timeout)
//      until they offer --min-np slots; np = min(--max-np, slots) (plan_generation);
//   2. preflight the generation's remote hosts not checked before (a host failing it is
//      blacklisted; replan); every host is checked again after mpirun failed on its own. The
//      spare hosts (not used by the generation) are checked in the background while it runs,
//      so that a failed host's replacement launches at once;
//   3. one mpirun, supervised; every 250 ms the host source is compared with the running
//      generation (host_update_bits) and a change is sent to every wrapper (HOSTS, wire.h),
//      which hands it to the program: rank 0 sees it at the next commit() and every rank
//      leaves with exit code 75 at that same step;
//   4. a rank that failed blacklists its host (never hvdrun's own machine); then restart
//      (counted against --reset-limit and, without a new commit, --max-restarts-without-
//      progress), succeed or give up (decide_after_generation; a rank's exit 76 gives up).
#include "elastic_job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include "discovery.h"
#include "hvd/core/private_dir.h"
#include "hvd/runner/elastic.h"
#include "hvd/runner/elastic_hosts.h"
#include "hvd/runner/env_forward.h"
#include "hvd/runner/errors.h"
#include "hvd/runner/launch_command.h"
#include "hvd/runner/liveness.h"
#include "hvd/runner/state_dir.h"
#include "hvd/runner/subprocess.h"
#include "hvd/runner/supervisor.h"
#include "network_setup.h"

namespace hvd::runner {
namespace {
namespace asio = boost::asio;
using std::chrono::milliseconds;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void say(const std::string& line) { std::cerr << line << "\n" << std::flush; }

// Durations in the elastic job's lines: tenths of a second ("12.3").
std::string tenths_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

std::string describe_bits(int bits) {
  if (bits == (kHostsAdded | kHostsRemoved)) return "hosts added and removed";
  return bits == kHostsAdded ? "hosts added" : "hosts removed";
}

// Removes the job's state directory on the remote hosts it ran on (bounded: 10 s in all).
void remove_remote_state(asio::io_context& io, const Options& o,
                         const std::vector<std::string>& hosts, const std::string& dir) {
  std::vector<std::unique_ptr<Subprocess>> procs;
  int left = 0;
  for (const auto& h : hosts) {
    std::vector<std::string> argv{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"};
    if (o.ssh_port > 0) argv.insert(argv.end(), {"-p", std::to_string(o.ssh_port)});
    if (!o.ssh_identity.empty()) argv.insert(argv.end(), {"-i", o.ssh_identity});
    // The remote shell removes it only when it is a directory (not a link) of this user.
    const std::string d = shell_quote(dir);
    argv.insert(argv.end(), {h, "test -d " + d + " && ! test -h " + d + " && test -O " + d +
                                    " && rm -rf " + d});
    procs.push_back(std::make_unique<Subprocess>(io, argv, true));
    procs.back()->on_exit([&left](int) { --left; });
    try {
      procs.back()->start();
      ++left;
    } catch (const std::exception&) {
    }
  }
  const double until = now_s() + 10;
  while (left > 0 && now_s() < until) {
    if (io.stopped()) io.restart();
    io.run_for(milliseconds(50));
  }
}

}  // namespace

int run_elastic_job(asio::io_context& io, ControlServer& server, const ElasticJob& job) {
  const Options& o = job.options;
  // The job's state directory on each host: a name of its own under the base, created and
  // checked by the wrappers (state_dir.h); the snapshot key reaches the ranks only through
  // mpirun's environment.
  const std::string dir = new_state_dir_name(o.elastic_state_dir);
  const std::string key = new_elastic_key();
  uint64_t last_commit_bytes = 0;  // the largest snapshot seen on this machine (0: none yet)
  if (o.verbose) say("hvdrun: elastic: state in " + dir + " (" + job.state_base_why + ")");
  std::optional<CooldownRange> range;
  if (o.blacklist_cooldown_range.size() == 2) {
    range = CooldownRange{o.blacklist_cooldown_range[0], o.blacklist_cooldown_range[1]};
  }
  Blacklist blacklist(range);
  auto run_io_for = [&](milliseconds ms) {
    if (io.stopped()) io.restart();
    io.run_for(ms);
  };
  std::unique_ptr<HostDiscovery> discovery;
  if (!o.host_discovery_script.empty()) {
    discovery = std::make_unique<HostDiscovery>(io, o.host_discovery_script,
                                                o.slots_per_host > 0 ? o.slots_per_host : 1);
    discovery->start();
    const double until = now_s() + 30;
    while (discovery->runs() == 0 && now_s() < until) run_io_for(milliseconds(20));
  }
  auto hosts_now = [&]() -> const std::vector<HostSlots>& {
    return discovery ? discovery->hosts() : job.static_hosts;
  };
  std::vector<HostNetwork> known;  // hosts that passed a preflight (re-checked after failures)
  auto is_known = [&](const std::string& host) {
    return std::any_of(known.begin(), known.end(),
                       [&](const HostNetwork& k) { return k.host == host; });
  };
  // Spare hosts' preflights run while a generation runs; `collected` once their results went
  // into `known`.
  struct SpareCheck {
    std::unique_ptr<BackgroundPreflight> run;
    bool collected = false;
  };
  std::vector<SpareCheck> spare_checks;
  std::vector<std::string> spares_passed;  // passed in the background, not used since
  // The control server listens on every address of this machine only while a preflight (a
  // generation's, or the spare hosts' in the background) may connect back; else on those the
  // ranks use.
  auto spares_running = [&] {
    return std::any_of(spare_checks.begin(), spare_checks.end(),
                       [](const SpareCheck& c) { return !c.collected && !c.run->done(); });
  };
  auto listen_for_ranks = [&](const std::vector<std::string>& wrappers, bool spares) {
    listen_only_on(server, job_listen_addresses(wrappers, spares), o.verbose,
                   spares ? "for the ranks and the spare hosts' preflight" : "for the ranks");
  };
  auto blacklist_host = [&](const std::string& host, const std::string& why) {
    const double cooldown = blacklist.add(host, now_s());
    known.erase(std::remove_if(known.begin(), known.end(),
                               [&](const HostNetwork& n) { return n.host == host; }),
                known.end());
    say("hvdrun: elastic: host " + host + " blacklisted (" + why + ") " +
        (cooldown < 0
             ? std::string("for the rest of the job (no --blacklist-cooldown-range)")
             : "for " + tenths_text(cooldown) + " s (failure " +
                   std::to_string(blacklist.failures(host)) + ", --blacklist-cooldown-range)"));
  };
  std::vector<std::string> remote_used;
  JobProgress progress;  // restarts made, the last commit, failures in a row without a commit
  const RestartLimits limits{o.reset_limit, o.max_without_progress()};
  int code = kExitLaunch;
  bool failed_before = false;
  for (int generation = 0;;) {
    // 1. Hosts with at least --min-np slots.
    GenerationPlan plan;
    const double wait_start = now_s();
    bool waited = false;
    for (;;) {
      plan = plan_generation(hosts_now(), blacklist, now_s(), o.min_np, job.max_np);
      if (plan.ready) break;
      if (!waited) {
        say("hvdrun: elastic: waiting for --min-np " + std::to_string(o.min_np) +
            " slots: " + plan.why_not + " (up to --elastic-timeout " +
            tenths_text(o.elastic_timeout_s()) + " s)");
        waited = true;
      }
      if (now_s() - wait_start >= o.elastic_timeout_s()) {
        say("hvdrun: elastic: giving up after waiting " + tenths_text(now_s() - wait_start) +
            " s (--elastic-timeout " + tenths_text(o.elastic_timeout_s()) + "): " + plan.why_not +
            "; add hosts or lower --min-np");
        code = failed_before ? code : kExitLaunch;
        generation = -1;
        break;
      }
      run_io_for(milliseconds(200));
    }
    if (generation < 0) break;
    if (waited) {
      say("hvdrun: elastic: " + std::to_string(plan.available_slots) + " slot(s) available after " +
          tenths_text(now_s() - wait_start) + " s");
    }
    // 2. Preflight of the remote hosts; a host failing it is blacklisted.
    std::vector<std::string> remote;
    for (const auto& h : plan.used) {
      if (!is_local_host(h.name, job.own_hostname)) remote.push_back(h.name);
    }
    for (const auto& h : remote) {
      auto s = std::find(spares_passed.begin(), spares_passed.end(), h);
      if (s == spares_passed.end()) continue;
      if (o.verbose && is_known(h)) {
        say("hvdrun: elastic: preflight skipped for host " + h + " (checked in the background)");
      }
      spares_passed.erase(s);
    }
    if (std::any_of(remote.begin(), remote.end(), [&](const auto& h) { return !is_known(h); })) {
      listen_only_on(server, job_listen_addresses(server.addresses(), true), o.verbose,
                     "for the preflight");
    }
    NetworkSetup net = prepare_network(io, o,
                                       {remote, server.port(), job.token, job.self, job.cwd,
                                        job.path, job.mpi, known, server.addresses()});
    if (!net.ok) {
      std::cerr << net.report;
      for (const auto& h : net.failed_hosts) blacklist_host(h, "it failed the preflight");
      continue;
    }
    for (const auto& h : remote) {
      if (std::find(remote_used.begin(), remote_used.end(), h) == remote_used.end()) {
        remote_used.push_back(h);
      }
    }
    known = net.checked;
    // 3. The generation, with the host source watched every 250 ms.
    LaunchSpec spec = base_launch_spec(o, plan.np, plan.used, remote.empty(),
                                       job.in_slurm_allocation, job.environ_entries, job.mpi);
    spec.mpi_interfaces = net.mpi_interfaces;
    spec.env = forwarded_env(o, job.environ_entries, net.nccl_names);
    for (auto& e : elastic_env(dir, generation)) spec.env.push_back(e);
    struct stat snapshot {};
    const std::string snapshot_path = dir + "/" + kSnapshotFileName;
    if (::lstat(snapshot_path.c_str(), &snapshot) == 0 && S_ISREG(snapshot.st_mode)) {
      last_commit_bytes = std::max(last_commit_bytes, static_cast<uint64_t>(snapshot.st_size));
    }
    if (last_commit_bytes > 0) {  // each host's wrapper warns when its free space is below
      spec.env.push_back({kLastCommitBytesVariable, std::to_string(last_commit_bytes)});
    }
    spec.secret_env = {kJobTokenVariable, kElasticKeyVariable};
    spec.elastic = true;
    spec.wrapper = rank_wrapper_prefix(
        job.self, wrapper_connect_list(net.wrapper_addresses, server.port()), o, generation);
    SuperviseConfig sc;
    sc.mpirun_argv = build_mpirun_command(spec);
    sc.mpirun_env = {{kJobTokenVariable, job.token}, {kElasticKeyVariable, key}};
    sc.tag_end = job.mpi.tag_end;
    sc.np = plan.np;
    sc.grace_s = o.grace_period_s;
    sc.verbose = o.verbose;
    sc.elastic = true;
    sc.step_timeout_s = o.step_timeout_s;
    say("hvdrun: elastic: generation " + std::to_string(generation) + ": " +
        std::to_string(plan.np) + " rank(s) on " + format_host_list(plan.used));
    if (o.verbose) say("hvdrun: " + shell_join(sc.mpirun_argv));

    Liveness life;  // the watch's handler refers to this iteration's locals
    int seq = 0;
    int sent_bits = kHostsUnchanged;
    std::vector<HostSlots> sent_hosts;
    asio::steady_timer watch(io);
    std::function<void()> check = [&] {
      const auto& hosts = hosts_now();
      const int bits = host_update_bits(plan.used, hosts, blacklist, now_s(), o.min_np, job.max_np);
      if (bits != kHostsUnchanged && (bits != sent_bits || hosts != sent_hosts)) {
        sent_bits = bits;
        sent_hosts = hosts;
        ++seq;
        say("hvdrun: elastic: " + describe_bits(bits) +
            " (hosts now: " + (hosts.empty() ? std::string("none") : format_host_list(hosts)) +
            "); the ranks stop at their next commit for generation " +
            std::to_string(generation + 1));
      }
      // Sent again at every check: a wrapper that connected late still learns it.
      if (seq > 0) server.broadcast(Message{MessageKind::kHosts, "", "", seq, sent_bits});
      listen_for_ranks(net.wrapper_addresses, spares_running());  // narrows once spares are done
    };
    std::function<void()> arm = [&] {
      watch.expires_after(milliseconds(250));
      watch.async_wait(life.guard([&](boost::system::error_code ec) {
        if (ec) return;
        check();
        arm();
      }));
    };
    arm();
    // The spare hosts' preflight, in the background: a later generation that takes one over
    // (a failed host's replacement) then launches without waiting for that check.
    std::vector<std::string> checked;  // passed, or being checked now
    for (const auto& n : known) checked.push_back(n.host);
    for (const auto& c : spare_checks) {
      if (c.collected) continue;
      for (const auto& h : c.run->hosts()) checked.push_back(h.host);
    }
    const auto spare =
        spare_hosts_to_check(hosts_now(), plan.used, blacklist, now_s(), checked, job.own_hostname);
    listen_for_ranks(net.wrapper_addresses, !spare.empty() || spares_running());
    if (!spare.empty()) {
      const NetworkTarget target{spare,    server.port(), job.token, job.self,          job.cwd,
                                 job.path, job.mpi,       {},        server.addresses()};
      spare_checks.push_back({start_spare_preflight(io, o, target), false});
    }
    GenerationOutcome outcome;
    server.set_generation(generation);  // a leftover wrapper of an earlier one is ignored
    supervise(io, server, sc, &outcome);
    watch.cancel();
    if (io.stopped()) io.restart();  // supervise() stops `io`; the preflights below run it
    io.poll();  // what became ready meanwhile (a spare host's check ending) runs now

    for (auto& c : spare_checks) {
      if (c.collected || !c.run->done()) continue;
      c.collected = true;
      for (auto& n : passed_hosts(*c.run)) {
        if (is_known(n.host) || blacklist.blocked(n.host, now_s())) continue;
        if (o.verbose)
          say("hvdrun: elastic: spare host " + n.host + " passed its preflight in the background");
        spares_passed.push_back(n.host);
        known.push_back(std::move(n));
      }
    }

    // 4. Blacklist a failed host, then restart, succeed or give up.
    const bool ok = outcome.exit_code == 0 && outcome.rank0_done;
    // hvdrun's own machine is never blacklisted: were it broken, hvdrun would be too.
    if (auto host = host_to_blacklist(outcome, plan.used, job.own_hostname)) {
      blacklist_host(*host, "its rank " + std::to_string(outcome.failed_rank) + " failed");
    }
    if (!ok && outcome.signal == 0 && outcome.failed_rank < 0) {
      known.clear();  // mpirun failed without a rank's code: check every host again
    }
    outcome.hosts_changed = seq > 0 && outcome.exit_code == kExitElasticRestart;
    ElasticDecision d = decide_after_generation(outcome, progress, limits);
    if (d.step == NextStep::kRestart && seq > 0 && outcome.exit_code == kExitElasticRestart) {
      d.message = "hvdrun: elastic: the ranks stopped for the host change; starting generation " +
                  std::to_string(generation + 1) + " from the last commit";
    }
    if (!d.message.empty()) say(d.message);
    code = d.exit_code;
    failed_before = !ok;
    if (d.step != NextStep::kRestart) break;
    ++generation;
  }
  // Only the job's own directory: a link or another user's directory under its name stays.
  std::error_code ec;
  if (core::private_directory_problem(dir).empty()) std::filesystem::remove_all(dir, ec);
  remove_remote_state(io, o, remote_used, dir);
  return code;
}

}  // namespace hvd::runner
