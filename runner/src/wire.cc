// SPDX-License-Identifier: Apache-2.0
// The master <-> agent/wrapper line protocol (see wire.h).
#include "hvd/runner/wire.h"

#include <sys/wait.h>

#include <csignal>
#include <cstring>
#include <sstream>
#include <vector>

namespace hvd::runner {
namespace {

bool to_int(const std::string& s, int& out) {
  try {
    size_t used = 0;
    out = std::stoi(s, &used);
    return used == s.size();
  } catch (...) {
    return false;
  }
}

bool to_int64(const std::string& s, int64_t& out) {
  try {
    size_t used = 0;
    out = std::stoll(s, &used);
    return used == s.size();
  } catch (...) {
    return false;
  }
}

}  // namespace

std::string format_message(const Message& m) {
  switch (m.kind) {
    case MessageKind::kAgent:
      return "AGENT " + m.token + " " + m.host;
    case MessageKind::kOk:
      return "OK " + m.token;
    case MessageKind::kHello:
      return "HELLO " + m.token + " " + std::to_string(m.rank) + " " + m.host + " " +
             std::to_string(m.value) + " " + std::to_string(m.generation);
    case MessageKind::kBeat:
      return "BEAT " + m.token + " " + std::to_string(m.rank) + " " + m.host + " " +
             std::to_string(m.value) + (m.commit >= 0 ? " " + std::to_string(m.commit) : "");
    case MessageKind::kDone:
      return "DONE " + m.token + " " + std::to_string(m.rank) + " " + m.host;
    case MessageKind::kExit:
      return "EXIT " + m.token + " " + std::to_string(m.rank) + " " + m.host + " " +
             std::to_string(m.value);
    case MessageKind::kTerm:
      return "TERM";
    case MessageKind::kKill:
      return "KILL";
    case MessageKind::kPing:
      return "PING";
    case MessageKind::kHosts:
      return "HOSTS " + std::to_string(m.rank) + " " + std::to_string(m.value);
  }
  return "";
}

std::optional<Message> parse_message(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  if (w.empty()) return std::nullopt;
  Message m;
  if (w[0] == "TERM" && w.size() == 1) {
    m.kind = MessageKind::kTerm;
  } else if (w[0] == "KILL" && w.size() == 1) {
    m.kind = MessageKind::kKill;
  } else if (w[0] == "PING" && w.size() == 1) {
    m.kind = MessageKind::kPing;
  } else if (w[0] == "HELLO" && w.size() == 6) {
    m.kind = MessageKind::kHello;
    m.token = w[1];
    m.host = w[3];
    if (!to_int(w[2], m.rank) || !to_int(w[4], m.value) || !to_int(w[5], m.generation) ||
        m.rank < 0 || m.generation < 0) {
      return std::nullopt;
    }
  } else if (w[0] == "HOSTS" && w.size() == 3) {
    m.kind = MessageKind::kHosts;
    if (!to_int(w[1], m.rank) || !to_int(w[2], m.value) || m.rank < 1) return std::nullopt;
  } else if (w[0] == "OK" && w.size() == 2) {
    m.kind = MessageKind::kOk;
    m.token = w[1];
  } else if (w[0] == "AGENT" && w.size() == 3) {
    m.kind = MessageKind::kAgent;
    m.token = w[1];
    m.host = w[2];
  } else if (w[0] == "DONE" && w.size() == 4) {
    m.kind = MessageKind::kDone;
    m.token = w[1];
    m.host = w[3];
    if (!to_int(w[2], m.rank) || m.rank < 0) return std::nullopt;
  } else if (w[0] == "BEAT" && w.size() == 6) {  // with the commit id
    m.kind = MessageKind::kBeat;
    m.token = w[1];
    m.host = w[3];
    if (!to_int(w[2], m.rank) || !to_int(w[4], m.value) || !to_int64(w[5], m.commit) ||
        m.rank < 0 || m.commit < -1) {
      return std::nullopt;
    }
  } else if ((w[0] == "BEAT" || w[0] == "EXIT") && w.size() == 5) {
    m.kind = w[0] == "BEAT" ? MessageKind::kBeat : MessageKind::kExit;
    m.token = w[1];
    m.host = w[3];
    if (!to_int(w[2], m.rank) || !to_int(w[4], m.value) || m.rank < 0) return std::nullopt;
  } else {
    return std::nullopt;
  }
  return m;
}

int exit_code_from_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_exit_code(int code) {
  if (code > 128 && code < 128 + 65) {
    int sig = code - 128;
    const char* abbrev = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) +
           (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string()) + ", exit code " +
           std::to_string(code);
  }
  return "exit code " + std::to_string(code);
}

}  // namespace hvd::runner
