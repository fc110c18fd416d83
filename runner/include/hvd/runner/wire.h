// SPDX-License-Identifier: Apache-2.0
// The line protocol between hvdrun (master) and its agents / rank wrappers: pure, no I/O.
//
// Every connection to the master's listener starts with one line carrying the job token, a
// secret (32 random hex digits per job) that never appears in a command line or a file name:
// a rank wrapper gets it from $HVD_JOB_TOKEN, which hvdrun sets in mpirun's environment only
// (mpirun's argv says `-x HVD_JOB_TOKEN`, the name), and removes it before the program starts;
// a preflight agent reads it from the first line of its stdin (ssh's stdin). Elastic jobs pass
// their snapshot key, HVD_ELASTIC_KEY, the same way (state_dir.h).
//   AGENT <token> <host>                 preflight connect-back; the master answers OK <token>
//   HELLO <token> <rank> <host> <pid> <generation>
//                                        a rank wrapper started rank <rank> of the job's
//                                        <generation> (elastic mode: 0, 1, ...; else 0); the
//                                        master ignores a wrapper of another generation than
//                                        the running one (a leftover of a stopped mpirun)
// then a wrapper sends:
//   BEAT <token> <rank> <host> <n> [<commit>]
//                                        (elastic mode) the program made progress (n grows), or
//                                        returned from @hvd.elastic.run (n = -1); see
//                                        elastic_watchdog.h. <commit>: the program's last commit
//                                        id (-1 or absent: none reported), for
//                                        --max-restarts-without-progress (elastic.h)
//   DONE <token> <rank> <host>           (elastic mode) the program reported completion
//   EXIT <token> <rank> <host> <code>    code = exit status, or 128 + signal number; 76
//                                        (kExitElasticFatal) without starting the program when
//                                        the elastic state directory is not the job's own
// and the master may send the wrapper:
//   TERM                                 send SIGTERM to the program's process group
//   KILL                                 send SIGKILL to the program's process group
//   HOSTS <seq> <bits>                   (elastic mode) the hosts changed: seq counts the
//                                        changes of this generation (1, 2, ...), bits are
//                                        HostUpdateResult's (1 removed, 2 added); the wrapper
//                                        writes "<seq> <bits>" to $HVD_ELASTIC_HOSTS_FILE
//   PING                                 hvdrun is alive (every second, to every wrapper)
// A wrapper whose connection closes, or that hears nothing (not even PING) for its heartbeat
// timeout (hvdrun --heartbeat-timeout: a frozen or partitioned master), treats it as TERM (then
// KILL after the grace period), so a dead master never leaves ranks behind; in elastic mode it then
// also removes the host's state directory (no generation follows a dead master).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hvd::runner {

enum class MessageKind { kAgent, kOk, kHello, kBeat, kDone, kExit, kTerm, kKill, kHosts, kPing };

struct Message {
  MessageKind kind = MessageKind::kTerm;
  std::string token;
  std::string host;
  int rank = -1;        // seq for HOSTS
  int value = 0;        // pid for HELLO, progress for BEAT, exit code for EXIT, bits for HOSTS
  int generation = 0;   // HELLO: the wrapper's generation
  int64_t commit = -1;  // BEAT: the program's last commit id (-1: none reported)
};

// One line without the trailing newline.
std::string format_message(const Message& m);

// Parses one line (trailing \r/\n ignored); nullopt when malformed.
std::optional<Message> parse_message(const std::string& line);

// "128 + signal" or the exit status, from a waitpid() status.
int exit_code_from_wait_status(int status);

// A description for an exit code: "exit code 3" or "killed by signal 9 (SIGKILL)".
std::string describe_exit_code(int code);

}  // namespace hvd::runner
