// SPDX-License-Identifier: Apache-2.0
// Elastic training's committed-state store: framework-agnostic bytes in and out. The libtorch
// hvd::elastic::TorchState (hvd/optim/elastic.h) and the Python hvd.elastic (through the
// extension) both use it, so the snapshot file and the resume protocol live here only.
//
// The file. Each host keeps the job's last committed state in `<dir>/snapshot` (hvdrun makes
// `dir` a fresh private directory, by default in /dev/shm: host memory that outlives the worker
// processes). Layout (format 2), little endian: "HVDSNAP2", commit id (u64), world size at commit
// (u64), payload length (u64), HMAC-SHA256 (32 bytes), then the payload. The HMAC is keyed with
// the job's key (HVD_ELASTIC_KEY: 32 random bytes hvdrun makes for each elastic job and gives only
// to its ranks) and covers the first 32 header bytes (magic to length) and the payload: a file
// somebody without the key wrote or changed never verifies. A writer writes
// `snapshot.tmp.<pid>` and renames it over `snapshot` (atomic on one file system): a process
// killed during a commit leaves the previous snapshot or the new one, never a mix.
//
// Trust (DESIGN.md section 9). The store reads and writes only in a directory that passes
// core::private_directory_problem (a real directory of this user, mode 0700) and opens files
// there with O_NOFOLLOW. A refused directory, a snapshot that is a link or not this user's regular
// file, a wrong magic (an older format included), a truncated file or a MAC that does not verify
// is an ElasticState error (StatusCode::kElasticState) naming the file and what is wrong, never
// "no snapshot": the payload of such a file reaches no deserializer. A failed write (ENOSPC, EIO)
// is the same kind of error, naming the directory, the bytes and the free space. A restart cannot
// fix any of them: Python raises hvd.common.exceptions.ElasticStateError, C++ hvd::Error with
// that code, and the job ends (kFatalExitCode).
//
// The resume protocol (resume_from_newest, collective): every rank reads its host's snapshot;
// the ranks allgather their commit ids (-1: none, -2: this rank refused its host's state). When
// any rank refused, every rank fails together with an ElasticState error (the refusing rank's
// names the file or directory, the others' name the refusing ranks) and nothing is broadcast.
// Otherwise the newest id wins and the lowest rank holding it broadcasts its payload (size, then
// bytes). With no snapshot anywhere nothing is sent and every rank gets nullopt.
#pragma once

#include <array>
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
/// Exit code of a rank that failed with an error a restart cannot fix (an ElasticState error
/// among them); the same number as runner's kExitElasticFatal and Python's
/// hvd.elastic.FATAL_EXIT_CODE.
inline constexpr int kFatalExitCode = 76;

/// One committed state: its commit id, the world size it was committed at, the state's bytes.
struct Snapshot {
  uint64_t commit_id = 0;
  uint64_t world_size = 0;
  std::string payload;
};

/// The key that authenticates a job's snapshots (HMAC-SHA256): 32 bytes.
using SnapshotKey = std::array<unsigned char, 32>;
/// The key written as HVD_ELASTIC_KEY carries it: 64 hexadecimal digits (either case). An
/// ElasticState error when `hex` is not that (the message never repeats the text: it is secret).
Result<SnapshotKey> parse_snapshot_key(std::string_view hex);
/// This job's key (HVD_ELASTIC_KEY, read through core::ElasticConfig). An ElasticState error that
/// says elastic state belongs to hvdrun --min-np when the variable is missing or malformed.
Result<SnapshotKey> job_snapshot_key();

/// The file's bytes for `s` (header with the HMAC under `key`, then the payload). Fails only
/// when OpenSSL cannot compute the HMAC.
Result<std::string> encode_snapshot(const Snapshot& s, const SnapshotKey& key);
/// The snapshot in `bytes` (the contents of the file `path`, which only names it in errors) when
/// they are one whole format-2 snapshot whose HMAC verifies under `key`; otherwise an
/// ElasticState error naming `path` and what is wrong (not a snapshot, an older format, truncated
/// or longer than its header says, not authentic).
Result<Snapshot> decode_snapshot(std::string_view bytes, const SnapshotKey& key,
                                 const std::string& path);

/// `<dir>/snapshot`.
std::string snapshot_path(const std::string& dir);
/// Replaces the host's snapshot atomically, authenticated with `key`. `dir` must exist and be
/// this user's private directory: it is never created here (hvdrun's rank wrapper creates it,
/// and removes it when hvdrun is lost; a rank committing at that moment must not bring it back as
/// a leftover in host memory). Errors are ElasticState errors naming the path; a failed write
/// also names the bytes it tried to write and the directory's free space.
[[nodiscard]] Status write_snapshot(const std::string& dir, const Snapshot& s,
                                    const SnapshotKey& key);
/// write_snapshot with this job's key (job_snapshot_key()).
[[nodiscard]] Status write_snapshot(const std::string& dir, const Snapshot& s);
/// The host's snapshot, authenticated with `key`; nullopt when `dir` holds none. An ElasticState
/// error (naming the directory or the file) when `dir` is not this user's private directory or
/// its snapshot cannot be trusted (see the module comment): nothing of such a file is returned.
Result<std::optional<Snapshot>> read_snapshot(const std::string& dir, const SnapshotKey& key);
/// read_snapshot with this job's key (job_snapshot_key()).
Result<std::optional<Snapshot>> read_snapshot(const std::string& dir);
/// Deletes temporaries left by writers killed mid-commit (the live file is untouched); does
/// nothing in a directory that is not this user's private directory (the read that follows
/// reports it).
void remove_stale_temporaries(const std::string& dir);

/// Which commit a new generation resumes from, given every rank's commit id in rank order (-1:
/// that rank's host has none): the newest id and the lowest rank holding it; root -1 and
/// commit_id -1 when nobody has one.
struct RestorePlan {
  int64_t commit_id = -1;
  int root = -1;
};
RestorePlan plan_restore(const std::vector<int64_t>& commit_ids);

/// Collective over all ranks (module comment): the newest snapshot of any rank's `local` (this
/// rank's read_snapshot result), the same on every rank, or nullopt when no rank has one. When
/// any rank's `local` is an error, every rank throws hvd::Error with StatusCode::kElasticState
/// (that rank its own message, the others one naming the refusing ranks). Throws hvd::Error
/// when a collective fails.
std::optional<Snapshot> resume_from_newest(const Result<std::optional<Snapshot>>& local);

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
