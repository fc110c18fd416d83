// SPDX-License-Identifier: Apache-2.0
// Rewrites mpirun's --tag-output prefix to hvdrun's [rank]<stream>: form.
#include "hvd/runner/tag_output.h"

namespace hvd::runner {

std::string retag_line(const std::string& line, const std::string& tag_end) {
  // [<digits>,<digits>]<stdout|stderr|stddiag>:
  if (line.empty() || line[0] != '[') return line;
  size_t comma = line.find(',');
  size_t close = line.find(']');
  if (comma == std::string::npos || close == std::string::npos || comma > close) return line;
  for (size_t i = 1; i < close; ++i) {
    if (i != comma && (line[i] < '0' || line[i] > '9')) return line;
  }
  if (comma == 1 || comma + 1 == close) return line;
  size_t gt = line.find(tag_end, close);
  if (close + 1 >= line.size() || line[close + 1] != '<' || gt == std::string::npos) return line;
  std::string stream = line.substr(close + 1, gt - close);  // <stdout>
  std::string rank = line.substr(comma + 1, close - comma - 1);
  // mpirun tags each chunk a rank wrote, not each line: a line written in pieces (Python's
  // print writes the text and the newline separately) carries the same tag again inside it.
  const std::string tag = line.substr(0, gt + tag_end.size());
  std::string rest = line.substr(gt + tag_end.size());
  for (size_t at = rest.find(tag); at != std::string::npos; at = rest.find(tag, at)) {
    rest.erase(at, tag.size());
  }
  return "[" + rank + "]" + stream + ": " + rest;
}

}  // namespace hvd::runner
