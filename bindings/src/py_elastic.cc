// SPDX-License-Identifier: Apache-2.0
// hvd.common.elastic_snapshot and hvd.common.elastic call the C++ store (hvd/optim/
// elastic_store.h): the snapshot file and the resume protocol live there once, for Python and
// libtorch programs alike. Snapshots cross as (commit_id, world_size, payload bytes) tuples. The
// store's errors (StatusCode::kElasticState: a state directory not private, a snapshot not
// authentic, a failed write) raise hvd.common.exceptions.ElasticStateError, which is no
// HorovodInternalError: a restart cannot fix them.
#include "py_elastic.h"

#include <optional>
#include <string>

#include "hvd/optim/elastic_progress.h"
#include "hvd/optim/elastic_store.h"

namespace hvd::py {
namespace {

namespace pyb = pybind11;

pyb::object to_python(const std::optional<elastic::Snapshot>& s) {
  if (!s) return pyb::none();
  return pyb::make_tuple(s->commit_id, s->world_size, pyb::bytes(s->payload));
}

// Raises ElasticStateError for the store's errors, HorovodInternalError (and its subclasses)
// for the others. Needs the GIL.
void raise_if_error(const Status& st) {
  if (st.ok()) return;
  if (st.code() == StatusCode::kElasticState) {
    const pyb::object type =
        pyb::module_::import("hvd.common.exceptions").attr("ElasticStateError");
    PyErr_SetString(type.ptr(), st.message().c_str());
    throw pyb::error_already_set();
  }
  throw_if_error(st);
}

}  // namespace

void bind_elastic(pybind11::module_& m) {
  m.attr("ELASTIC_RESTART_EXIT_CODE") = elastic::kRestartExitCode;
  m.attr("ELASTIC_FATAL_EXIT_CODE") = elastic::kFatalExitCode;
  m.def("elastic_snapshot_path", &elastic::snapshot_path, pyb::arg("directory"));
  m.def(
      "elastic_write_snapshot",
      [](const std::string& dir, uint64_t commit_id, uint64_t world_size, std::string payload) {
        Status st;
        {
          pyb::gil_scoped_release nogil;
          st = elastic::write_snapshot(dir, {commit_id, world_size, std::move(payload)});
        }
        raise_if_error(st);
      },
      pyb::arg("directory"), pyb::arg("commit_id"), pyb::arg("world_size"), pyb::arg("payload"),
      "Replaces the host's snapshot atomically, authenticated with the job's key "
      "(HVD_ELASTIC_KEY); raises ElasticStateError naming the path.");
  m.def(
      "elastic_read_snapshot",
      [](const std::string& dir) {
        Result<std::optional<elastic::Snapshot>> s = std::optional<elastic::Snapshot>();
        {
          pyb::gil_scoped_release nogil;
          s = elastic::read_snapshot(dir);
        }
        raise_if_error(s.status());
        return to_python(s.value());
      },
      pyb::arg("directory"),
      "(commit_id, world_size, payload) or None: no snapshot. Raises ElasticStateError when the "
      "directory is not private or the snapshot is not authentic (nothing of it is returned).");
  m.def(
      "elastic_remove_stale_temporaries",
      [](const std::string& dir) { elastic::remove_stale_temporaries(dir); },
      pyb::arg("directory"));
  m.def(
      "elastic_read_host_update",
      [](const std::string& path) -> pybind11::object {
        const auto u = elastic::read_host_update(path);
        if (!u) return pyb::none();
        return pyb::make_tuple(u->seq, u->bits);
      },
      pyb::arg("path"), "(seq, bits) of hvdrun's host-change file, or None.");
  m.def(
      "elastic_report_commit", [](uint64_t commit_id) { elastic::report_commit(commit_id); },
      pyb::arg("commit_id"),
      "report_progress(), also telling hvdrun this rank made commit `commit_id` "
      "(--max-restarts-without-progress).");
  m.def(
      "elastic_report_progress", [] { elastic::report_progress(); },
      "Tells hvdrun's step watchdog that this rank made progress (hvd/optim/"
      "elastic_progress.h); no-op outside elastic mode.");
  m.def(
      "elastic_resume",
      [](const std::string& dir) {
        std::optional<elastic::Snapshot> s;
        Status refused;
        {
          pyb::gil_scoped_release nogil;
          try {
            s = elastic::resume_from_newest(elastic::read_snapshot(dir));
          } catch (const Error& e) {
            if (e.code() != StatusCode::kElasticState) throw;
            refused = Status(e.code(), e.what());
          }
        }
        raise_if_error(refused);
        return to_python(s);
      },
      pyb::arg("directory"),
      "Collective: the newest snapshot of any rank's host (the lowest rank holding it "
      "broadcasts), or None when no rank has one. Raises ElasticStateError on every rank when "
      "any rank refused its host's snapshot or directory (HorovodInternalError when a "
      "collective fails).");
}

}  // namespace hvd::py
