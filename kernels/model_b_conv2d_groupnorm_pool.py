"""Model B -- KernelBench level 2, problem 85: Conv2d -> GroupNorm -> x scale -> MaxPool2d -> clamp.

KernelBench convention: ``Model`` (the unfused reference, exactly as specified in
``shared/REFERENCE_MODELS.md``), ``ModelNew`` (same ``__init__`` signature and parameters, so
``ModelNew(...).load_state_dict(Model(...).state_dict())`` works), ``get_inputs()`` and
``get_init_inputs()`` at the KernelBench size.

``ModelNew`` keeps PyTorch's (cuDNN) Conv2d, without its bias, and replaces everything after it
with ``kernels/model_b_v1_v2_groupnorm_pool.cu``: one pass for the GroupNorm statistics (the
bias added on the fly), one pass that writes only the pooled output. ``variant="v1"`` applies
the affine map to every element and then pools; ``variant="v2"`` (default) pools first -- a max-
pool where gamma * scale >= 0, a min-pool where it is negative -- and applies the map once.

Envelope of ``ModelNew``: float32 CUDA input (N, C_in, H, W), any N (0 included), any conv
configuration ``nn.Conv2d`` accepts with its defaults, ``num_groups`` dividing C_out, scale of
shape (C_out, 1, 1), pool 1..16 and no larger than the conv output (PyTorch raises there too),
any clamp bounds. Forward only: the output carries no autograd graph. Anything else raises a
ValueError/TypeError naming the argument.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import helpers  # the repository root must be on sys.path

KERNEL = "model_b_v1_v2_groupnorm_pool"

# KernelBench size (current release)
batch_size = 128
in_channels = 8
out_channels = 64
height, width = 128, 128
kernel_size = 3
num_groups = 16
scale_shape = (out_channels, 1, 1)
maxpool_kernel_size = 4
clamp_min = 0.0
clamp_max = 1.0


class Model(nn.Module):
    """The unfused reference: Conv2d, GroupNorm, x scale, MaxPool2d, clamp."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups, scale_shape, maxpool_kernel_size,
                 clamp_min, clamp_max):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.maxpool = nn.MaxPool2d(kernel_size=maxpool_kernel_size)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.conv(x)
        x = self.group_norm(x)
        x = x * self.scale
        x = self.maxpool(x)
        x = torch.clamp(x, self.clamp_min, self.clamp_max)
        return x


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, scale_shape, maxpool_kernel_size, clamp_min,
            clamp_max]


def pool_first_reference(y: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, scale: torch.Tensor,
                         groups: int, pool: int, clamp_min: float, clamp_max: float,
                         eps: float = 1e-5) -> torch.Tensor:
    """v2's algebra in plain PyTorch: pool before the affine map, max or min by the sign of gamma*scale.

    ``y`` is the conv output with its bias. GroupNorm * scale is, per (n, c), v = a*y + b with
    a = gamma*scale*rstd (rstd > 0), so max-pool(v) = a*maxpool(y) + b where a >= 0 and
    a*minpool(y) + b where a < 0; the statistics use every position, pooled or not.
    """
    n, c, h, w = y.shape
    grouped = y.reshape(n, groups, -1)
    mu = grouped.mean(dim=2, keepdim=True)
    rstd = torch.rsqrt(grouped.var(dim=2, unbiased=False, keepdim=True) + eps)
    mu = mu.expand(n, groups, c // groups).reshape(n, c, 1, 1)
    rstd = rstd.expand(n, groups, c // groups).reshape(n, c, 1, 1)
    gs = (gamma * scale.reshape(-1)).reshape(1, c, 1, 1).to(y.dtype)
    a = gs * rstd
    b = (beta * scale.reshape(-1)).reshape(1, c, 1, 1).to(y.dtype) - a * mu
    pooled_max = F.max_pool2d(y, pool)
    pooled_min = -F.max_pool2d(-y, pool)
    q = torch.where(gs >= 0, pooled_max, pooled_min)
    return torch.clamp(a * q + b, clamp_min, clamp_max)


_extension = None


def _load_extension():
    global _extension
    if _extension is None:
        _extension = helpers.load_kernel(KERNEL)
    return _extension


class ModelNew(nn.Module):
    """Model B with everything after the conv fused into two CUDA passes (see the module docstring).

    ``allow_tf32`` (keyword, default False, named after ``torch.backends.cudnn.allow_tf32``):
    False runs the conv with TF32 off (fp32-accurate); True lets cuDNN pick a TF32 conv.
    ``variant``: "v1" (affine, then pool) or "v2" (sign-selected pool, then affine; default).
    """

    def __init__(self, in_channels, out_channels, kernel_size, num_groups, scale_shape, maxpool_kernel_size,
                 clamp_min, clamp_max, *, allow_tf32: bool = False, variant: str = "v2"):
        super().__init__()
        if tuple(scale_shape) != (out_channels, 1, 1):
            raise ValueError(f"ModelNew: scale_shape must be (out_channels, 1, 1) = ({out_channels}, 1, 1), "
                             f"got {tuple(scale_shape)}")
        if variant not in ("v1", "v2"):
            raise ValueError(f"ModelNew: variant must be 'v1' or 'v2', got {variant!r}")
        if not isinstance(maxpool_kernel_size, int) or not 1 <= maxpool_kernel_size <= 16:
            raise ValueError(f"ModelNew: maxpool_kernel_size must be an int in [1, 16], got {maxpool_kernel_size!r}")
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)  # raises if groups do not divide C_out
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.pool = maxpool_kernel_size
        self.clamp_min = float(clamp_min)
        self.clamp_max = float(clamp_max)
        self.allow_tf32 = bool(allow_tf32)
        self.variant = variant

    def forward(self, x, out: torch.Tensor | None = None):
        """x: (N, C_in, H, W) float32 CUDA -> (N, C_out, H' // P, W' // P); ``out`` optionally receives it."""
        helpers.check_input(x, spatial_dims=2, in_channels=self.conv.in_channels,
                            device=self.conv.weight.device)
        with helpers.cudnn_tf32(self.allow_tf32):
            # No bias here: cuDNN would add it in a separate pass over the whole conv output;
            # the kernels add it on the fly.
            y = F.conv2d(x.contiguous(), self.conv.weight, None)
        y = y.contiguous()  # a no-op for the NCHW output above
        h, w = y.shape[2], y.shape[3]
        if self.pool > h or self.pool > w:
            raise ValueError(f"ModelNew: the pool window ({self.pool}) is larger than the conv output "
                             f"({h} x {w}); PyTorch's MaxPool2d refuses this too")
        if out is None:
            out = torch.empty((y.shape[0], y.shape[1], h // self.pool, w // self.pool), device=y.device,
                              dtype=y.dtype)
        return _load_extension().fused_tail(
            y, self.conv.bias.detach(), self.group_norm.weight.detach(), self.group_norm.bias.detach(),
            self.scale.detach(), self.group_norm.num_groups, self.pool, self.clamp_min, self.clamp_max,
            float(self.group_norm.eps), self.variant == "v2", out)
