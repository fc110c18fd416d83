// SPDX-License-Identifier: Apache-2.0
// `hvdrun --check-build`: configure-time facts of this build plus a few run-time probes.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "hvd/runner/local_system.h"
#include "hvd/runner/modes.h"
#include "hvd_runner_build_info.h"

namespace hvd::runner {
namespace {

// First line of a command's output, or "" (a failing command is just "nothing").
std::string first_line(const std::string& command) {
  FILE* f = popen((command + " 2>/dev/null").c_str(), "r");
  if (f == nullptr) return "";
  char buf[512] = {};
  std::string line = fgets(buf, sizeof buf, f) ? buf : "";
  pclose(f);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

std::string cuda_device() {
  if (access("/dev/nvidia0", F_OK) != 0 && access("/dev/nvidiactl", F_OK) != 0) return "none";
  std::string smi =
      find_program("nvidia-smi", "/", std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  if (smi.empty()) return "device node present, nvidia-smi not found";
  std::string l = first_line(smi + " -L");
  return l.rfind("GPU", 0) == 0 ? l : "none (driver query failed)";
}

// Whether the interpreter the binding was built for imports it: first from its own paths (an
// installed package), else from the build tree's package folder.
std::string python_binding() {
  std::string py = HVD_RUNNER_PYTHON;
  if (py.empty()) return "";
  // One line: importable, torch's version, the extension's path, and the GPU module's state
  // (loaded with which NCCL and how many devices, or why not).
  const std::string probe =
      " -c 'import hvd._core as c, hvd.torch, torch; g = c.gpu_support(); "
      "print(\"importable, torch %s (%s); GPU module: %s\" % (torch.__version__, c.__file__, "
      "\"loaded %s, NCCL %d, CUDA runtime %d, %d device(s)%s\" % (g[\"module\"], "
      "g[\"nccl_version\"], g[\"cuda_runtime_version\"], g[\"devices\"], "
      "\"\" if g[\"devices\"] else \": \" + g[\"reason\"]) if g[\"loaded\"] "
      "else \"not loaded: \" + g[\"reason\"]))'";
  std::string l = first_line(py + probe);
  std::string dir = HVD_RUNNER_PYTHON_DIR;
  if (l.empty() && !dir.empty() && access(dir.c_str(), F_OK) == 0) {
    l = first_line("PYTHONPATH=" + dir + " " + py + probe);
    if (!l.empty()) l += "; set PYTHONPATH=" + dir;
  }
  return py + ": " + (l.empty() ? "not importable (hvd.torch, torch)" : l);
}

}  // namespace

int run_check_build() {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  std::string mpirun = find_program("mpirun", "/", path);
  std::cout << "hvd " << HVD_RUNNER_VERSION << " build:\n"
            << "  MPI (built against):  " << HVD_RUNNER_MPI_VERSION << "\n"
            << "  mpirun (in PATH):     "
            << (mpirun.empty() ? std::string("not found")
                               : mpirun + " (" + first_line(mpirun + " --version") + ")")
            << "\n"
            << "  GPU module built:     " << HVD_RUNNER_WITH_NCCL
            << " (libhvd_nccl.so, loaded at run time), NCCL headers: " << HVD_RUNNER_NCCL_VERSION
            << "\n"
            << "  CUDA toolkit:         " << HVD_RUNNER_CUDA_VERSION << "\n"
            << "  CUDA device:          " << cuda_device() << "\n"
            << "  libtorch:             " << HVD_RUNNER_WITH_TORCH << "\n"
            << "  Python binding:       " << HVD_RUNNER_WITH_PYTHON << "\n";
  std::string py = python_binding();
  if (!py.empty()) std::cout << "  Python import:        " << py << "\n";
  return 0;
}

}  // namespace hvd::runner
