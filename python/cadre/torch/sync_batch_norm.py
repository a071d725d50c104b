"""SyncBatchNorm: batch normalisation whose batch statistics are computed over every rank's
batch (Horovod's hvd.SyncBatchNorm). Forward allreduces per-channel sums, sums of squares and
counts; backward allreduces the two per-channel gradient sums. Weight and bias gradients stay
local (the DistributedOptimizer averages them like any other)."""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from cadre.torch import mpi_ops
from cadre.torch.basics import global_process_set


def _channel_shape(x):
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        dims = [0] + list(range(2, x.dim()))
        c = x.shape[1]
        xd = x.double()
        stats = torch.cat([xd.sum(dims), (xd * xd).sum(dims),
                           torch.tensor([x.numel() // c], dtype=torch.float64)])
        stats = mpi_ops.allreduce(stats, op=mpi_ops.Sum, name=None, process_set=process_set)
        total = stats[-1]
        mean = stats[:c] / total
        var = (stats[c:2 * c] / total - mean * mean).clamp_min(0)
        if running_mean is not None:
            unbiased = var * total / max(float(total) - 1, 1.0)
            running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
        invstd = torch.rsqrt(var + eps)
        shape = _channel_shape(x)
        xhat = ((xd - mean.view(shape)) * invstd.view(shape)).to(x.dtype)
        out = xhat
        if weight is not None:
            out = xhat * weight.view(shape) + bias.view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.total = float(total)
        ctx.process_set = process_set
        return out

    @staticmethod
    def backward(ctx, grad_output):
        xhat, invstd, weight = ctx.saved_tensors
        dims = [0] + list(range(2, grad_output.dim()))
        c = grad_output.shape[1]
        shape = _channel_shape(grad_output)
        g = grad_output.double()
        sum_dy = g.sum(dims)
        sum_dy_xhat = (g * xhat.double()).sum(dims)
        both = mpi_ops.allreduce(torch.cat([sum_dy, sum_dy_xhat]), op=mpi_ops.Sum, name=None,
                                 process_set=ctx.process_set)
        mean_dy, mean_dy_xhat = both[:c] / ctx.total, both[c:] / ctx.total
        scale = invstd if weight is None else invstd * weight.double()
        grad_input = (scale.view(shape) * (g - mean_dy.view(shape) -
                                           xhat.double() * mean_dy_xhat.view(shape)))
        grad_weight = sum_dy_xhat.to(weight.dtype) if weight is not None else None
        grad_bias = sum_dy.to(weight.dtype) if weight is not None else None
        return grad_input.to(grad_output.dtype), grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        # As Horovod: only the running statistics (eval mode while tracking them) are local;
        # without them eval mode normalizes with the batch's statistics over every rank too.
        if (not self.training and self.track_running_stats) or self.process_set.size() == 1:
            return torch.nn.functional.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias,
                self.training or not self.track_running_stats, momentum, self.eps)
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias,
            self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None,
            self.eps, momentum, self.process_set)
