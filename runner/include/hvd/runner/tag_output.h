// SPDX-License-Identifier: Apache-2.0
// Rewrites mpirun's tagged-output prefix `[job,rank]<stdout>:` to `[rank]<stdout>: `: pure.
#pragma once

#include <string>

namespace hvd::runner {

// `[1,3]<stdout>:text` -> `[3]<stdout>: text`; lines without the tag are returned unchanged.
// `tag_end` is what closes mpirun's tag (MpiProfile::tag_end: Open MPI 5 adds a space).
std::string retag_line(const std::string& line, const std::string& tag_end);

}  // namespace hvd::runner
