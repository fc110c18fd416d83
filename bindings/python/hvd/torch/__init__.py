# SPDX-License-Identifier: Apache-2.0
"""hvd.torch: a drop-in for horovod.torch (``import hvd.torch as hvd``).

One build serves every torch version: the extension links no libtorch; tensors cross into
hvd's C++ runtime as (pointer, dtype, shape, device, stream).
"""
from hvd.common.basics import (  # noqa: F401
    Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, ccl_built,
    cross_rank, cross_size, cuda_built, ddl_built, get_process_set_ids_and_ranks, gloo_built,
    gloo_enabled, global_process_set, gpu_support, init, is_homogeneous, is_initialized, local_rank,
    local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
    remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline)
from hvd.common.exceptions import (  # noqa: F401
    HorovodInternalError, HostsUpdatedInterrupt, HvdInternalError)
from hvd.torch.compression import Compression  # noqa: F401
from hvd.torch.mpi_ops import (  # noqa: F401
    allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_,
    alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_,
    grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
    grouped_reducescatter_async, join, poll, reducescatter, reducescatter_async,
    sparse_allreduce_async, synchronize)
from hvd.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from hvd.torch.optimizer import DistributedOptimizer  # noqa: F401
from hvd.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from hvd.torch import elastic  # noqa: F401,E402
