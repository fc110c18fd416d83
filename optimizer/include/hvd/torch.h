// SPDX-License-Identifier: Apache-2.0
// hvd's libtorch integration: include this (it includes hvd/hvd.h) to train with the PyTorch C++
// frontend. Everything lives in hvd::optim and is also reachable from hvd:: directly:
//
//   hvd::init();
//   hvd::broadcast_parameters(*model, 0);
//   torch::optim::Adam adam(model->parameters());
//   hvd::broadcast_optimizer_state(adam, 0);
//   hvd::DistributedOptimizer opt(adam, model->named_parameters());
//   ... opt.zero_grad(); loss.backward(); opt.step(); ...
//
// Collectives on torch::Tensor follow horovod.torch: hvd::allreduce(t) returns a new tensor,
// hvd::allreduce_(t) reduces in place (note: hvd::allreduce on a TensorView is in place).
#pragma once

#include "hvd/hvd.h"
#include "hvd/optim/broadcast.h"
#include "hvd/optim/collectives.h"
#include "hvd/optim/distributed_optimizer.h"
#include "hvd/optim/elastic.h"
#include "hvd/optim/optimizer_state.h"
#include "hvd/optim/sized_collectives.h"
#include "hvd/optim/tensor_adapter.h"

namespace hvd {

using optim::allgather;
using optim::allgather_async;
using optim::allreduce;
using optim::allreduce_;
using optim::allreduce_async;
using optim::allreduce_async_;
using optim::alltoall;
using optim::alltoall_async;
using optim::AlltoallResult;
using optim::broadcast;
using optim::broadcast_;
using optim::broadcast_async;
using optim::broadcast_async_;
using optim::grouped_allgather;
using optim::grouped_allgather_async;
using optim::grouped_allreduce;
using optim::grouped_allreduce_;
using optim::grouped_allreduce_async;
using optim::grouped_allreduce_async_;
using optim::grouped_reducescatter;
using optim::grouped_reducescatter_async;
using optim::poll;
using optim::reducescatter;
using optim::reducescatter_async;
using optim::synchronize;
using optim::TorchHandle;

using optim::broadcast_bytes;
using optim::broadcast_object;
using optim::broadcast_optimizer_state;
using optim::broadcast_parameters;

using optim::Compression;
using optim::DistributedOptimizer;
using optim::DistributedOptimizerOptions;
using optim::NamedParameters;
using optim::prefixed;

}  // namespace hvd
