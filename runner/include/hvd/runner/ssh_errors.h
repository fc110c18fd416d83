// SPDX-License-Identifier: Apache-2.0
// Turns ssh failures into one-line messages that say how to fix them: pure, no I/O.
#pragma once

#include <string>

namespace hvd::runner {

// ssh exited with `rc` (255 = ssh's own failure) and printed `stderr_text` while hvdrun ran
// `ssh ... host hvdrun --agent`. Returns the problem and the fix, naming the host; for an
// unknown host key: the `ssh-keyscan -p PORT host >> ~/.ssh/known_hosts` line.
std::string explain_ssh_failure(const std::string& host, int port, int rc,
                                const std::string& stderr_text, const std::string& hvdrun_path);

}  // namespace hvd::runner
