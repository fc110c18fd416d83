// SPDX-License-Identifier: Apache-2.0
// The [slurm] tier's probe: starts hvd however it was launched (srun, hvdrun, mpirun), prints one
// line per rank with what hvd reports and what the launcher says, and checks a Sum allreduce.
//
//   SLURM_PROBE rank=R size=S local_rank=L local_size=LS cross_rank=C cross_size=CS
//               slurm_procid=P slurm_localid=Q host=H allreduce=ok
// (slurm_* are SLURM_PROCID/SLURM_LOCALID, "-" when unset; H is gethostname()). Exits 1 when the
// allreduce is wrong; `slurm_probe fail-rank K` makes rank K exit 3 after the allreduce (exit-code
// propagation).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {
const char* env_or_dash(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : "-";
}
}  // namespace

int main(int argc, char** argv) {
  int fail_rank = -1;
  if (argc == 3 && std::strcmp(argv[1], "fail-rank") == 0) fail_rank = std::atoi(argv[2]);
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  // Each rank contributes rank+1 at every element: the sum is size*(size+1)/2 everywhere.
  std::vector<float> v(1000, static_cast<float>(rank + 1));
  hvd::allreduce(hvd::TensorView(v.data(), hvd::DataType::kFloat32, {1000}), "probe",
                 hvd::ReduceOp::kSum);
  const float want = static_cast<float>(size * (size + 1) / 2);
  bool ok = true;
  for (float x : v) ok = ok && x == want;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::printf(
      "SLURM_PROBE rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d "
      "slurm_procid=%s slurm_localid=%s host=%s allreduce=%s\n",
      rank, size, hvd::local_rank(), hvd::local_size(), hvd::cross_rank(), hvd::cross_size(),
      env_or_dash("SLURM_PROCID"), env_or_dash("SLURM_LOCALID"), host, ok ? "ok" : "WRONG");
  std::fflush(stdout);
  hvd::shutdown();
  if (!ok) return 1;
  return rank == fail_rank ? 3 : 0;
}
