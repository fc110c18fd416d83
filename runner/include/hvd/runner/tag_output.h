// SPDX-License-Identifier: Apache-2.0
// Rewrites mpirun's --tag-output prefix `[job,rank]<stdout>:` to `[rank]<stdout>: `: pure.
#pragma once

#include <string>

namespace hvd::runner {

// `[1,3]<stdout>:text` -> `[3]<stdout>: text`; lines without the tag are returned unchanged.
std::string retag_line(const std::string& line);

}  // namespace hvd::runner
