# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm: batch normalization over the whole distributed batch (horovod.torch's).

In training mode the batch statistics are those of the concatenation of every rank's batch
(ranks may hold different batch sizes): each rank sends (count, mean, sum of squared deviations)
per channel in one allgather and combines them exactly (Chan et al.), in float64. Backward
allreduces the per-channel sums of dy and dy * x_hat, so that each rank's input gradient is the
gradient of the sum of all ranks' losses, as on the concatenated batch in one process. Weight and
bias gradients are this rank's contributions (DistributedOptimizer combines them). Works for
CPU and CUDA tensors; in eval mode, or on a single rank, it is torch's batch_norm.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hvd.common.basics import Sum, global_process_set
from hvd.torch import mpi_ops


def _stat_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, c] + [1] * (x.dim() - 2)
        xs = x.to(_stat_dtype(x))
        count = x.numel() // c if c else 0
        if count > 0:
            local_mean = xs.mean(dims)
            local_m2 = ((xs - local_mean.view(shape)) ** 2).sum(dims)
        else:
            local_mean = local_m2 = xs.new_zeros(c)
        stats = torch.cat([torch.tensor([float(count)], dtype=torch.float64),
                           local_mean.double().cpu(), local_m2.double().cpu()]).unsqueeze(0)
        gathered = mpi_ops.synchronize(mpi_ops.allgather_async(stats, process_set=process_set))
        n = gathered[:, :1]
        total = float(n.sum())
        if total == 0:
            raise ValueError("SyncBatchNorm: the batch is empty on every rank")
        means, m2s = gathered[:, 1:1 + c], gathered[:, 1 + c:]
        mean = (n * means).sum(0) / total
        m2 = (m2s + n * (means - mean) ** 2).sum(0)
        var = m2 / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            unbiased = m2 / (total - 1) if total > 1 else var
            running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean))
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var))
        mean = mean.to(device=x.device, dtype=xs.dtype)
        invstd = invstd.to(device=x.device, dtype=xs.dtype)
        y = (xs - mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            y = y * weight.to(xs.dtype).view(shape)
        if bias is not None:
            y = y + bias.to(xs.dtype).view(shape)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.total, ctx.process_set, ctx.has_bias = total, process_set, bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, invstd = ctx.saved_tensors
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, c] + [1] * (x.dim() - 2)
        dy = grad.to(mean.dtype)
        xhat = (x.to(mean.dtype) - mean.view(shape)) * invstd.view(shape)
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            both = torch.cat([sum_dy, sum_dy_xhat])
            both = mpi_ops.synchronize(mpi_ops.allreduce_async(both, op=Sum,
                                                               process_set=ctx.process_set))
            mean_dy = both[:c] / ctx.total
            mean_dy_xhat = both[c:] / ctx.total
            scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
            grad_x = ((dy - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape))
                      * scale.view(shape)).to(x.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_w = sum_dy_xhat.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = sum_dy.to(weight.dtype if weight is not None else x.dtype)
        return grad_x, grad_w, grad_b, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization whose training-mode statistics span every rank of `process_set`
    (input: [N, C, ...], at least 2-D). Same parameters, buffers and state_dict as
    torch.nn.BatchNorm{1,2,3}d; matches one of them applied to the concatenation of all ranks'
    batches (output, input gradient, running statistics). Every rank of the set must call
    forward (and backward) in training mode together."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expected at least 2D input (got {input.dim()}D "
                             "input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        running_mean = self.running_mean if use_running else None
        running_var = self.running_var if use_running else None
        if not batch_stats or mpi_ops._set_size(self.process_set) == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                batch_stats, factor, self.eps)
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, running_mean, running_var,
                                      self.eps, factor, self.process_set)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set):
        """`module` with every batch norm in it (torch.nn.BatchNorm{1,2,3}d, and
        torch.nn.SyncBatchNorm, which needs torch.distributed) replaced by hvd's SyncBatchNorm
        on `process_set`, as torch.nn.SyncBatchNorm.convert_sync_batchnorm does for torch's:
        the new modules take over the same parameter and buffer tensors (an optimizer built
        before keeps working; state_dict keys are unchanged) and the training flag. Returns
        the converted module (`module` itself when it is not a batch norm)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_set)
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return out


__all__ = ["SyncBatchNorm"]
