// SPDX-License-Identifier: Apache-2.0
// Elastic training's committed-state store: framework-agnostic bytes in and out. The libtorch
// hvd::elastic::TorchState (hvd/optim/elastic.h) and the Python hvd.elastic (through the
// extension) both use it, so the snapshot file and the resume protocol live here only.
//
// The file. Each host keeps the job's last committed state in `<dir>/snapshot` (hvdrun puts
// `dir` in /dev/shm: host memory that outlives the worker processes). Layout, little endian:
// "HVDSNAP1", commit id (u64), world size at commit (u64), payload length (u64), CRC-32 of the
// payload (u32, zlib's), then the payload. A writer writes `snapshot.tmp.<pid>` and renames it
// over `snapshot` (atomic on one file system): a process killed during a commit leaves the
// previous snapshot or the new one, never a mix. A file that is not a whole snapshot (damaged,
// truncated) reads as no snapshot.
//
// The resume protocol (resume_from_newest, collective): every rank reads its host's snapshot;
// the ranks allgather their commit ids (-1: none); the newest id wins and the lowest rank
// holding it broadcasts its payload (size, then bytes). With no snapshot anywhere nothing is
// sent and every rank gets nullopt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/core/status.h"

namespace hvd::elastic {

/// Exit code of a rank that asks hvdrun for a new generation (EX_TEMPFAIL); the same number as
/// Python's hvd.elastic.RESTART_EXIT_CODE.
inline constexpr int kRestartExitCode = 75;

/// One committed state: its commit id, the world size it was committed at, the state's bytes.
struct Snapshot {
  uint64_t commit_id = 0;
  uint64_t world_size = 0;
  std::string payload;
};

/// CRC-32 (IEEE 802.3, as zlib.crc32) of `bytes`.
uint32_t crc32(std::string_view bytes);
/// The file's bytes for `s` (header + payload).
std::string encode_snapshot(const Snapshot& s);
/// The snapshot in `bytes`, or nullopt when they are not one whole, intact snapshot.
std::optional<Snapshot> decode_snapshot(std::string_view bytes);

/// `<dir>/snapshot`.
std::string snapshot_path(const std::string& dir);
/// Replaces the host's snapshot atomically. `dir` must exist: it is never created here (hvdrun's
/// rank wrapper creates it, and removes it when hvdrun is lost; a rank committing at that moment
/// must not bring it back as a leftover in host memory). Errors name the path.
[[nodiscard]] Status write_snapshot(const std::string& dir, const Snapshot& s);
/// The host's snapshot; nullopt when there is none or it is not whole.
std::optional<Snapshot> read_snapshot(const std::string& dir);
/// Deletes temporaries left by writers killed mid-commit (the live file is untouched).
void remove_stale_temporaries(const std::string& dir);

/// Which commit a new generation resumes from, given every rank's commit id in rank order (-1:
/// that rank's host has none): the newest id and the lowest rank holding it; root -1 and
/// commit_id -1 when nobody has one.
struct RestorePlan {
  int64_t commit_id = -1;
  int root = -1;
};
RestorePlan plan_restore(const std::vector<int64_t>& commit_ids);

/// Collective over all ranks (module comment): the newest snapshot of any rank's `local`, the
/// same on every rank, or nullopt when no rank has one. Throws hvd::Error when a collective
/// fails.
std::optional<Snapshot> resume_from_newest(const std::optional<Snapshot>& local);

/// Root's bytes on every rank (sizes may differ before the call). Collective.
std::string broadcast_string(const std::string& bytes, int root_rank, const std::string& name);

/// A host change hvdrun reported: its wrapper writes "<seq> <bits>" to $HVD_ELASTIC_HOSTS_FILE
/// (runner/include/hvd/runner/wire.h, HOSTS); a seq larger than the last one seen is a new
/// change, bits are HostUpdateResult flags (1 removed, 2 added).
struct LauncherHostUpdate {
  int64_t seq = 0;
  int bits = 0;
};
/// The update in `text`, nullopt when it is not "<seq> <bits>".
std::optional<LauncherHostUpdate> parse_host_update(std::string_view text);
/// The update in the file at `path`; nullopt when there is none (no file, or not yet whole).
std::optional<LauncherHostUpdate> read_host_update(const std::string& path);

/// Elastic mode's settings (set by hvdrun --min-np for every rank), read at each call.
struct Environment {
  std::string state_dir;        ///< HVD_ELASTIC_STATE_DIR; empty: not in elastic mode
  std::string completion_file;  ///< HVD_ELASTIC_COMPLETION_FILE; empty: none
  std::string hosts_file;       ///< HVD_ELASTIC_HOSTS_FILE; empty: none
  std::string progress_file;    ///< HVD_ELASTIC_PROGRESS_FILE; empty: none
};
Environment environment();

}  // namespace hvd::elastic
