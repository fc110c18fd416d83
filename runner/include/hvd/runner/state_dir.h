// SPDX-License-Identifier: Apache-2.0
// Where an elastic job keeps its state on each host (HVD_ELASTIC_STATE_DIR): a private directory
// with a random name of its own, `<base>/hvd-elastic-<32 hex>`, under a base that other users
// cannot use to replace it. The rank wrappers create and check the directory itself
// (core/private_dir.h); this file chooses the base, names the directory and words the warning
// about free space.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hvd::runner {

// The default base: host memory, fast to commit to and wiped with the host.
inline constexpr const char* kMemoryStateBase = "/dev/shm";
// The base on local disk when /dev/shm is missing, unsafe or small.
inline constexpr const char* kDiskStateBase = "/var/tmp";
// /dev/shm is the default when at least this much of it is free: Docker's and Kubernetes'
// default /dev/shm (64 MiB) is below it, and a model whose commit needs more than that still
// gets the per-generation warning (low_space_warning) before its commit fails.
inline constexpr uint64_t kMemoryStateBaseMinFree = uint64_t{1} << 30;

// The job's snapshot key (256 random bits as 64 hex digits, the same in every generation):
// passed like the job token, in mpirun's environment and `-x HVD_ELASTIC_KEY` only.
inline constexpr const char* kElasticKeyVariable = "HVD_ELASTIC_KEY";
// The size of the last commit hvdrun saw (bytes), for the wrappers' free-space warning.
inline constexpr const char* kLastCommitBytesVariable = "HVD_ELASTIC_LAST_COMMIT_BYTES";

// The file the snapshot store keeps the last commit in (optimizer/src/elastic/snapshot_store.cc).
inline constexpr const char* kSnapshotFileName = "snapshot";

// "" when `dir` may hold the job's state directories: an existing directory (a link to one is
// fine) owned by this user or root that, when others can write to it, is sticky (as /dev/shm and
// /tmp are), so that no other user can rename or replace what the job creates there; otherwise
// one sentence naming `dir` and the problem.
std::string state_base_problem(const std::string& dir);

// The base the job uses, and why (a line for --verbose).
struct StateBase {
  std::string dir;
  std::string why;
};

// The decision behind choose_state_base, without I/O: /dev/shm when it has no problem
// (`memory_problem` empty) and at least kMemoryStateBaseMinFree bytes free (`memory_free`,
// nullopt when unknown), else kDiskStateBase.
StateBase pick_state_base(const std::string& memory_problem, std::optional<uint64_t> memory_free);

// `requested` (hvdrun --elastic-state-dir) when given, after state_base_problem (throws
// UsageError naming the problem); otherwise pick_state_base for this machine's /dev/shm.
StateBase choose_state_base(const std::string& requested);

// Free bytes for an unprivileged user on the file system of `dir` (statvfs); nullopt when it
// cannot be examined.
std::optional<uint64_t> free_bytes(const std::string& dir);

// A fresh name for the job's state directory: `<base>/hvd-elastic-<32 random hex digits>`
// (randomness of its own: not the job token, which must stay secret).
std::string new_state_dir_name(const std::string& base);

// The job's snapshot key, HVD_ELASTIC_KEY: 256 random bits as 64 hex digits.
std::string new_elastic_key();

// The warning, or "" when `free` covers `last_commit` bytes: the next commit writes a new
// snapshot of about that size next to the old one before it replaces it. `where` names the host
// ("host node1").
std::string low_space_warning(const std::string& where, const std::string& dir, uint64_t free,
                              uint64_t last_commit);

// The preflight's warning for a remote host whose base, chosen on hvdrun's machine, has less
// room there than the rule that chose it (/dev/shm below kMemoryStateBaseMinFree), or "" when it
// has enough or `base` is another directory (--elastic-state-dir: the user's choice). `free` < 0:
// unknown (no warning).
std::string remote_base_warning(const std::string& host, const std::string& base, long long free);

// Sizes as the messages print them: "112 bytes", "64.0 MiB", "23.4 GiB".
std::string size_text(uint64_t bytes);

}  // namespace hvd::runner
