"""Model C -- KernelBench level 2, problem 74: ConvTranspose3d -> LeakyReLU -> x m -> LeakyReLU -> MaxPool3d.

KernelBench convention: ``Model`` (the unfused reference, exactly as specified in
``shared/REFERENCE_MODELS.md``), ``ModelNew`` (same ``__init__`` signature and parameters, so
``ModelNew(...).load_state_dict(Model(...).state_dict())`` works), ``get_inputs()`` and
``get_init_inputs()`` at the KernelBench size.

``ModelNew`` keeps PyTorch's (cuDNN) ConvTranspose3d, without its bias, and replaces everything
after it with one pass of ``kernels/model_c_v1_v2_leaky_pool.cu`` that reads the conv output once
and writes only the pooled output. ``variant="v1"`` applies f(v) = leaky(m * leaky(v + bias)) to
every element and then max-pools; ``variant="v2"`` (default) pools first -- a max-pool where
m >= 0, a min-pool where m < 0 (f is monotone for a non-negative slope) -- and applies f once.

Autograd: ``ModelNew`` trains. Its backward recomputes the unfused forward with PyTorch ops and
differentiates that (a first version: the backward costs a full unfused forward plus PyTorch's
backward), so gradients for the input, the conv weight and bias and the multiplier are PyTorch's.

Envelope of ``ModelNew``: float32 CUDA input (N, C_in, D, H, W), any N (0 included), any
configuration ``nn.ConvTranspose3d`` accepts, multiplier of shape (C_out, 1, 1, 1), pool 1..8
and no larger than the conv output, any negative slope (v2 falls back to v1 when it is
negative). Anything else raises a ValueError/TypeError naming the argument.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import helpers  # the repository root must be on sys.path

KERNEL = "model_c_v1_v2_leaky_pool"

# KernelBench size
batch_size = 16
in_channels = 16
out_channels = 32
depth, height, width = 16, 32, 32
kernel_size = 3
stride = 2
padding = 1
output_padding = 1
multiplier_shape = (out_channels, 1, 1, 1)


class Model(nn.Module):
    """The unfused reference: ConvTranspose3d, LeakyReLU, x m, LeakyReLU, MaxPool3d(2)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, multiplier_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.leaky_relu = nn.LeakyReLU(negative_slope=0.2)
        self.max_pool = nn.MaxPool3d(kernel_size=2)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.leaky_relu(x)
        x = x * self.multiplier
        x = self.leaky_relu(x)
        x = self.max_pool(x)
        return x


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, multiplier_shape]


def pool_first_reference(y: torch.Tensor, multiplier: torch.Tensor, slope: float, pool: int) -> torch.Tensor:
    """v2's algebra in plain PyTorch: f(v) = leaky(m * leaky(v)) is non-decreasing where m >= 0 and
    non-increasing where m < 0 (for slope >= 0), so max-pool(f(y)) = f(max-pool(y)) or f(min-pool(y)).

    ``y`` is the conv output with its bias.
    """
    m = multiplier.reshape(1, -1, 1, 1, 1).to(y.dtype)
    q = torch.where(m >= 0, F.max_pool3d(y, pool), -F.max_pool3d(-y, pool))
    return F.leaky_relu(m * F.leaky_relu(q, slope), slope)


_extension = None


def _load_extension():
    global _extension
    if _extension is None:
        _extension = helpers.load_kernel(KERNEL)
    return _extension


def _unfused(x, weight, bias, multiplier, cfg):
    """The reference computation in PyTorch ops (the backward differentiates this)."""
    y = F.conv_transpose3d(x, weight, bias, stride=cfg["stride"], padding=cfg["padding"],
                           output_padding=cfg["output_padding"], dilation=cfg["dilation"], groups=cfg["groups"])
    y = F.leaky_relu(F.leaky_relu(y, cfg["slope"]) * multiplier, cfg["slope"])
    return F.max_pool3d(y, cfg["pool"])


class _FusedForwardRecomputedBackward(torch.autograd.Function):
    """Forward: cuDNN transposed conv + the fused kernel. Backward: recompute with PyTorch ops."""

    @staticmethod
    def forward(ctx, x, weight, bias, multiplier, cfg):
        ctx.save_for_backward(x, weight, bias, multiplier)
        ctx.cfg = cfg
        with helpers.cudnn_tf32(cfg["allow_tf32"]):
            y = F.conv_transpose3d(x, weight, None, stride=cfg["stride"], padding=cfg["padding"],
                                   output_padding=cfg["output_padding"], dilation=cfg["dilation"],
                                   groups=cfg["groups"]).contiguous()
        p = cfg["pool"]
        if min(y.shape[2:]) < p:
            raise ValueError(f"ModelNew: the pool window ({p}) is larger than the conv output "
                             f"{tuple(y.shape[2:])}; PyTorch's MaxPool3d refuses this too")
        out = cfg["out"]
        if out is None:
            out = torch.empty((y.shape[0], y.shape[1], *(s // p for s in y.shape[2:])), device=y.device,
                              dtype=y.dtype)
        return _load_extension().fused_tail(y, bias, multiplier.reshape(-1), cfg["slope"], p,
                                            cfg["variant"] == "v2", out)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, bias, multiplier = ctx.saved_tensors
        inputs = [t.detach().requires_grad_(need) for t, need in zip((x, weight, bias, multiplier),
                                                                     ctx.needs_input_grad[:4])]
        with torch.enable_grad(), helpers.cudnn_tf32(ctx.cfg["allow_tf32"]):
            out = _unfused(*inputs, ctx.cfg)
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, grad_out))
        return (*(next(grads) if t.requires_grad else None for t in inputs), None)


class ModelNew(nn.Module):
    """Model C with everything after the transposed conv fused into one CUDA pass (module docstring).

    ``allow_tf32`` (keyword, default False, named after ``torch.backends.cudnn.allow_tf32``): False
    runs the transposed conv with TF32 off (fp32-accurate); True lets cuDNN pick TF32, as eager
    PyTorch does by default for this model. ``variant``: "v1" or "v2" (default).
    ``negative_slope`` (keyword, default 0.2 as in the reference).
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, multiplier_shape,
                 *, allow_tf32: bool = False, variant: str = "v2", negative_slope: float = 0.2, pool: int = 2):
        super().__init__()
        if tuple(multiplier_shape) != (out_channels, 1, 1, 1):
            raise ValueError(f"ModelNew: multiplier_shape must be (out_channels, 1, 1, 1) = "
                             f"({out_channels}, 1, 1, 1), got {tuple(multiplier_shape)}")
        if variant not in ("v1", "v2"):
            raise ValueError(f"ModelNew: variant must be 'v1' or 'v2', got {variant!r}")
        if not isinstance(pool, int) or not 1 <= pool <= 8:
            raise ValueError(f"ModelNew: pool must be an int in [1, 8], got {pool!r}")
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.negative_slope = float(negative_slope)
        self.pool = pool
        self.allow_tf32 = bool(allow_tf32)
        self.variant = variant

    def forward(self, x, out: torch.Tensor | None = None):
        """x: (N, C_in, D, H, W) float32 CUDA -> (N, C_out, D'//P, H'//P, W'//P); ``out`` optionally receives it."""
        helpers.check_input(x, spatial_dims=3, in_channels=self.conv_transpose.in_channels,
                            device=self.multiplier.device)
        ct = self.conv_transpose
        cfg = {"stride": ct.stride, "padding": ct.padding, "output_padding": ct.output_padding,
               "dilation": ct.dilation, "groups": ct.groups, "slope": self.negative_slope, "pool": self.pool,
               "variant": self.variant, "allow_tf32": self.allow_tf32, "out": out}
        return _FusedForwardRecomputedBackward.apply(x.contiguous(), ct.weight, ct.bias, self.multiplier, cfg)
