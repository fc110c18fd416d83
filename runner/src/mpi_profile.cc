// SPDX-License-Identifier: Apache-2.0
// The spellings of Open MPI 4.1 and Open MPI 5, checked against `ompi_info --all` and
// `prte_info --all` of Debian 12 (4.1.4) and Debian 13 (5.0.7, PRRTE 3.0.6). Open MPI 5 still
// accepts most old names without a word (an unknown --mca name is ignored silently, so a
// misspelling shows only as a knob that does nothing); the table gives each version its own.
#include "hvd/runner/mpi_profile.h"

#include <cctype>

namespace hvd::runner {

const MpiProfile& open_mpi_profile(int major) {
  static const MpiProfile v4{4,
                             "Open MPI 4",
                             "orted",
                             "--mca",
                             "rsh",
                             "plm_rsh_agent",
                             "oob_tcp_if_include",
                             "odls_base_sigkill_timeout",
                             {"--oversubscribe"},
                             {"--tag-output"},
                             ">:",
                             "--output-filename",
                             "",
                             "vader",
                             {}};
  // PRRTE took over ORTE's plm/odls/oob/rmaps: its parameters go through --prtemca. Its plm
  // component is `ssh`; --tag-output, --oversubscribe and --output-filename are deprecated
  // spellings of --output tag, --map-by :OVERSUBSCRIBE and --output dir=. Its TCP BTL pairs
  // interfaces wrongly on hosts with IPv4 and IPv6 addresses ("Unable to find reachable pairing
  // between local and remote interfaces" from every rank, open-mpi/ompi#14079); hvdrun's
  // networks are IPv4 (interfaces.h), so the BTL leaves IPv6 alone.
  static const MpiProfile v5{5,
                             "Open MPI 5",
                             "prted",
                             "--prtemca",
                             "ssh",
                             "plm_ssh_agent",
                             "prte_if_include",
                             "",
                             {"--map-by", ":OVERSUBSCRIBE"},
                             {"--output", "tag"},
                             ">: ",
                             "--output",
                             "dir=",
                             "sm",
                             {{"btl_tcp_disable_family", "6"}}};
  return major >= 5 ? v5 : v4;
}

std::optional<int> parse_open_mpi_major(const std::string& text) {
  const std::string mark = "(Open MPI) ";
  size_t at = text.find(mark);
  if (at == std::string::npos) return std::nullopt;
  at += mark.size();
  int major = 0;
  size_t digits = 0;
  for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at, ++digits) {
    major = major * 10 + (text[at] - '0');
    if (major > 1000) return std::nullopt;
  }
  if (digits == 0) return std::nullopt;
  return major;
}

std::vector<std::string> output_dir_words(const MpiProfile& p, const std::string& dir) {
  return {p.output_dir_option, p.output_dir_prefix + dir};
}

}  // namespace hvd::runner
