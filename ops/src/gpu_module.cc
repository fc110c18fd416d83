// SPDX-License-Identifier: Apache-2.0
// Loading the GPU module (libhvd_nccl.so) next to libhvd_ops.so; see gpu_module.h.
#include "hvd/ops/gpu_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "hvd/config.h"
#include "hvd/core/logging.h"

namespace hvd::ops {
namespace {

// The directory of the shared object holding this code (libhvd_ops.so), "" if unknown.
std::string own_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&gpu_module), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  // Resolved: the loader may have found it through an RPATH such as $ORIGIN/../../..
  char* real = realpath(info.dli_fname, nullptr);
  std::string p = real ? real : info.dli_fname;
  std::free(real);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

GpuModuleState load() {
  GpuModuleState s;
  if (!HVD_HAVE_NCCL) {
    s.reason =
        "this build of hvd has no GPU support (built with HVD_WITH_NCCL=OFF or NCCL not "
        "found)";
    return s;
  }
  const std::string dir = own_dir();
  s.path = (dir.empty() ? std::string(".") : dir) + "/" + HVD_GPU_MODULE_FILE;
  if (access(s.path.c_str(), F_OK) != 0) {
    s.reason = "the GPU module " + s.path +
               " is not installed (a GPU host installs the hvd-cuda package; see "
               "docs/install.md)";
    return s;
  }
  // Local: the module's own symbols (its static NCCL executor code) stay out of the process's
  // global scope. Never closed: executors it made live until the process ends.
  void* h = dlopen(s.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    s.reason = "the GPU module " + s.path + " did not load: " + (e ? e : "unknown error") +
               " (it needs the CUDA runtime and NCCL 2 where the dynamic loader finds them)";
    return s;
  }
  using Entry = const GpuModuleApi* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(h, "hvd_gpu_module"));
  const GpuModuleApi* api = entry ? entry() : nullptr;
  if (api == nullptr) {
    s.reason = "the GPU module " + s.path + " has no entry point hvd_gpu_module";
    return s;
  }
  if (api->abi != kGpuModuleAbi || api->hvd_version == nullptr ||
      std::strcmp(api->hvd_version, HVD_VERSION) != 0) {
    s.reason = "the GPU module " + s.path + " belongs to another hvd build (version " +
               (api->hvd_version ? api->hvd_version : "?") + ", interface " +
               std::to_string(api->abi) + "; this is " + HVD_VERSION + ", interface " +
               std::to_string(kGpuModuleAbi) + ")";
    return s;
  }
  s.api = api;
  return s;
}

}  // namespace

const GpuModuleState& gpu_module() {
  static const GpuModuleState state = [] {
    GpuModuleState s = load();
    if (s.api) {
      HVD_LOG(Debug) << "GPU module " << s.path << " loaded: NCCL " << s.api->nccl_version
                     << ", CUDA runtime " << s.api->cuda_runtime_version;
    } else {
      HVD_LOG(Debug) << "no GPU module: " << s.reason;
    }
    return s;
  }();
  return state;
}

}  // namespace hvd::ops
