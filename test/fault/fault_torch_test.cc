// SPDX-License-Identifier: Apache-2.0
// [fault] The last rank is SIGKILLed while broadcast_parameters() runs (over and over, on a
// model of 64 parameters of 256 x 256): every survivor's call must fail naming it within 5 s,
// and shutdown() must take under 1 s.
#include <torch/torch.h>

#include <string>

#include "fault_common.h"
#include "hvd/torch.h"

int main(int argc, char** argv) {
  const std::string stamp = argc > 2 ? argv[2] : "/tmp/hvd_fault_stamp";
  hvd::init();
  torch::nn::Sequential model;
  for (int i = 0; i < 32; ++i) model->push_back(torch::nn::Linear(256, 256));
  return hvd::fault::run(
      "broadcast_parameters", [&](int) { hvd::broadcast_parameters(*model, 0); }, stamp, 50, 300);
}
