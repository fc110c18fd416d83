// SPDX-License-Identifier: Apache-2.0
// One-line explanations (with the fix) for ssh failures seen by the preflight.
#include "hvd/runner/ssh_errors.h"

namespace hvd::runner {
namespace {

bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// The last non-empty line of ssh's stderr, for messages that need the raw reason.
std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of("\r\n ");
  if (end == std::string::npos) return "";
  size_t begin = s.find_last_of('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return s.substr(begin, end - begin + 1);
}

}  // namespace

std::string explain_ssh_failure(const std::string& host, int port, int rc, const std::string& err,
                                const std::string& hvdrun_path) {
  const std::string p = std::to_string(port > 0 ? port : 22);
  const std::string keyscan = "ssh-keyscan -p " + p + " " + host + " >> ~/.ssh/known_hosts";
  if (has(err, "REMOTE HOST IDENTIFICATION HAS CHANGED")) {
    return "the host key of " + host +
           " has CHANGED since it was recorded (reinstalled host, or an attack); if the change "
           "is expected run: ssh-keygen -R " +
           host + " && " + keyscan;
  }
  if (has(err, "Host key verification failed") || has(err, "No ED25519 host key is known") ||
      has(err, "host key is known") || has(err, "authenticity of host")) {
    return "the host key of " + host +
           " is not in known_hosts (hvdrun never disables host-key checking); after checking "
           "the fingerprint run: " +
           keyscan;
  }
  if (has(err, "Permission denied")) {
    return "ssh key login to " + host +
           " was refused (BatchMode: no passwords); install your key there (ssh-copy-id " + host +
           ") or pass -i KEY";
  }
  if (has(err, "Could not resolve hostname")) {
    return "ssh cannot resolve the host name " + host + "; check the name, DNS or /etc/hosts";
  }
  if (has(err, "Connection refused")) {
    return "ssh to " + host + " port " + p + " was refused; start sshd there or pass -p PORT";
  }
  if (has(err, "timed out")) {
    return "ssh to " + host + " port " + p + " timed out; check the network or firewall";
  }
  if (has(err, "Identity file") && has(err, "not accessible")) {
    return "the ssh identity file given with -i is not readable: " + last_line(err);
  }
  if (rc == 127 || has(err, "No such file or directory") || has(err, "not found")) {
    return "hvdrun is not installed at " + hvdrun_path + " on " + host +
           "; install hvd at the same path on every host";
  }
  if (rc == 255) {
    return "ssh to " + host + " failed: " + last_line(err) + "; check that 'ssh -o BatchMode=yes " +
           host + " true' works";
  }
  return "the preflight agent on " + host + " failed (exit code " + std::to_string(rc) +
         "): " + last_line(err);
}

}  // namespace hvd::runner
