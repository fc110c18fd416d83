// SPDX-License-Identifier: Apache-2.0
// A slow producer kernel for the stream-ordering test.
#include "gpu_test_util.h"

namespace hvd::gputest {
namespace {

__global__ void slow_fill(float* p, int n, float value, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] = value;
  }
}

}  // namespace

void launch_slow_fill(float* p, int n, float value, int ms, cudaStream_t stream) {
  int khz = 1000000;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  slow_fill<<<1, 256, 0, stream>>>(p, n, value, static_cast<long long>(khz) * ms);
}

}  // namespace hvd::gputest
