// SPDX-License-Identifier: Apache-2.0
// hvd::elastic::run's generation boundary: resume at the start, leave with the restart code on
// a failure (the fatal code on an error a restart cannot fix), report completion at the end
// (hvd/optim/elastic.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hvd/core/private_dir.h"
#include "hvd/hvd.h"
#include "hvd/optim/elastic.h"
#include "hvd/optim/elastic_progress.h"

namespace hvd::elastic {

bool start_generation(State& state) {
  const Environment env = environment();
  if (env.state_dir.empty()) {
    state.sync();
    return false;
  }
  if (hvd::local_rank() == 0) remove_stale_temporaries(env.state_dir);
  const std::optional<Snapshot> snapshot = resume_from_newest(read_snapshot(env.state_dir));
  if (!snapshot) {
    state.sync();
    return false;
  }
  state.load_saved_bytes(snapshot->payload);
  state.commit_id_ = snapshot->commit_id;
  state.restore();
  state.on_reset();
  state.sync();
  return true;
}

namespace detail {

void ensure_initialized() {
  if (!hvd::is_initialized()) hvd::init();
  report_progress();  // arms hvdrun's step watchdog (hvd/optim/elastic_progress.h)
}

void leave_generation(const char* type, const char* what) {
  if (environment().state_dir.empty()) return;
  std::fprintf(stderr,
               "hvd.elastic: rank %d: %s: %s; leaving this generation (exit %d) for hvdrun to "
               "restart from the last commit\n",
               hvd::rank(), type, what, kRestartExitCode);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kRestartExitCode);
}

void end_job(const char* type, const char* what) {
  end_job_for_fatal_error(hvd::is_initialized() ? hvd::rank() : -1, type, what);
}

void report_completion() {
  const std::string path = environment().completion_file;
  if (path.empty()) return;
  // In the state directory: never through a planted link (O_NOFOLLOW).
  const int fd = core::open_private_file(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  static constexpr char kDone[] = "done\n";
  const bool ok = fd >= 0 && ::write(fd, kDone, sizeof kDone - 1) == sizeof kDone - 1;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    throw Error(internal_error("hvd.elastic: cannot write the completion file '" + path +
                               "': " + std::strerror(err)));
  }
}

}  // namespace detail
}  // namespace hvd::elastic
