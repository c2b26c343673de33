"""Model A -- KernelBench level 2, problem 79: Conv3d -> x m -> InstanceNorm3d -> clamp -> x m -> max over C.

KernelBench convention: ``Model`` (the unfused reference, exactly as specified in
``shared/REFERENCE_MODELS.md``), ``ModelNew`` (same ``__init__`` signature, same parameters, so
``ModelNew(...).load_state_dict(Model(...).state_dict())`` works; its forward runs the fused
kernels), ``get_inputs()`` and ``get_init_inputs()`` at the KernelBench size.

``ModelNew`` has two forward paths, and picks between them:

* v3: the whole model in one launch of
  ``kernels/model_a_v3_fused_conv_instnorm_max.cu``. Persistent thread-block clusters, one sample
  at a time each, compute the conv on tensor cores (by default fp32-accurate: each operand scaled by
  a power of two and split into two FP16 halves, three products; 1xTF32 with ``allow_tf32=True``),
  keep it in registers while the InstanceNorm statistics are
  merged across the cluster, and write only the (N, D', H', W') output.
* v1: PyTorch's (cuDNN) Conv3d, then ``kernels/model_a_v1_fused_tail.cu``: one pass
  for the per-(n, c) statistics, one pass for normalise -> clamp -> x m -> max.

Both drop the conv bias: InstanceNorm subtracts each (n, c) plane's mean, so a per-channel
constant cancels exactly (and PyTorch would add it in a separate pass over the conv output).

``variant`` picks the path: "v3" runs v3 wherever its envelope allows (v1 elsewhere), "v1" always
v1, and "auto" (the default) the faster of the two. On small problems v1 can be the faster one, in
the fp32 mode up to 3.2x on an H100 (results/model_a/NOTES.md, "v3 against v1 on 63 small
configurations"). So "auto" times both once per input shape and mode and remembers the choice
(``helpers.auto_path``). It measures only where v1's conv output would take at most
``AUTO_MEASURE_MAX_CONV_BYTES``; above
that it runs v3, which then never allocates the conv output (the KernelBench size: 98.4 MiB), and which
was the faster on all 8 problems measured above 16 MiB (NOTES, "Above 16 MiB"). ``ModelNew.path(x)`` says which path runs and why.

Envelope of ``ModelNew``: float32 CUDA input of shape (N, C_in, D, H, W), any N (0 included),
any conv configuration ``nn.Conv3d`` accepts with its defaults, 1 <= C_out <= 8192, multiplier
of shape (C_out, 1, 1, 1), any clamp bounds. v3 needs, in addition, a GPU of compute capability
9.0 or newer, a cubic kernel of side 1..5, C_out <= 32, and a sample small enough for 16 CTAs (see
the .cu header); outside that, "v3" and "auto" run v1.
Anything else raises a ValueError/TypeError that names the argument.

TF32 mode and narrow clamp windows: with TF32 products the normalised conv output carries an error of
about 1e-3 of its spread. Where the clamp window [lo, hi] is narrow and near zero, most outputs sit at a
bound and the rest carry that error in full, so the output's relative-L2 error can pass PARITY.md's TF32
bar of 2e-3; so can a bound near 0 with few output channels, where the max over channels picks values near
that bound (the fuzz: 2.5e-3 at [-0.0105, 0.0586] with 5 channels, 7.9e-3 at [-0.006, 0.83] with 3;
results/model_a/NOTES.md). ``tf32_error_estimate`` predicts it from the multipliers and the bounds; where it
exceeds ``TF32_ERROR_BUDGET``, ``allow_tf32=True`` runs the fp32-accurate products instead
(``ModelNew.tf32_products()`` says which).

Autograd: ``ModelNew`` trains. The kernels compute the forward only; where autograd needs gradients,
the backward recomputes the unfused forward with PyTorch ops (with the conv bias, TF32 as
``tf32_products()`` says) and differentiates that (``helpers.recomputed_backward``), so gradients for the
input, the conv weight and bias and the multiplier are PyTorch's. It costs a full unfused forward plus
PyTorch's backward. Under ``torch.no_grad()`` nothing is saved.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import helpers  # the repository root must be on sys.path

KERNEL = "model_a_v1_fused_tail"
KERNEL_V3 = "model_a_v3_fused_conv_instnorm_max"
VARIANTS = ("auto", "v1", "v3")
# "auto" measures v1 against v3 only where v1's conv output (float32) takes at most this; above it, v3.
# Below the KernelBench size's 98.4 MiB; v3 was the faster on every problem measured above it.
AUTO_MEASURE_MAX_CONV_BYTES = 16 * 2**20

# KernelBench size
batch_size = 128
in_channels = 3
out_channels = 16
depth, height, width = 16, 32, 32
kernel_size = 3
multiplier_shape = (out_channels, 1, 1, 1)
clamp_min = -1.0
clamp_max = 1.0


class Model(nn.Module):
    """The unfused reference: Conv3d, x m, InstanceNorm3d, clamp, x m, max over channels."""

    def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape, clamp_min, clamp_max):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.instance_norm = nn.InstanceNorm3d(out_channels)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.conv(x)
        x = x * self.multiplier
        x = self.instance_norm(x)
        x = torch.clamp(x, self.clamp_min, self.clamp_max)
        x = x * self.multiplier
        x = torch.max(x, dim=1)[0]
        return x


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, multiplier_shape, clamp_min, clamp_max]


def tail_math_reference(y: torch.Tensor, multiplier: torch.Tensor, clamp_min: float, clamp_max: float,
                        eps: float = 1e-5) -> torch.Tensor:
    """The algebra the fused tail implements, in plain PyTorch (any dtype, any device).

    The statistics of z = m * y come from those of y: mean(z) = m mu, var(z) = m^2 var, so
    InstanceNorm(m y) = (y - mu) * a with a = m / sqrt(m^2 var + eps), and
    out = max_c m_c * clamp((y - mu) * a, lo, hi).
    """
    m = multiplier.reshape(1, -1, 1, 1, 1).to(y.dtype)
    mu = y.mean(dim=(2, 3, 4), keepdim=True)
    var = y.var(dim=(2, 3, 4), unbiased=False, keepdim=True)
    a = m / torch.sqrt(m * m * var + eps)
    return (m * torch.clamp((y - mu) * a, clamp_min, clamp_max)).max(dim=1).values


def flat_rows_conv_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """v3's "flat implicit GEMM" in plain PyTorch: conv3d(x, weight) (stride 1, no padding, no bias).

    Row q = (od * H + oh) * W + ow of a sample reads input flat index q + off(ci, kd, kh, kw), with
    off = ci * D*H*W + (kd * H + kh) * W + kw, for every tap: one GEMM [rows] x [C_in k^3] x [C_out]
    over the Do * H * W rows, then the rows with oh >= Ho or ow >= Wo are dropped. The kernel's tap
    table holds exactly these offsets (its per-CTA box starts at the CTA's first row instead of 0).
    """
    n, c_in, d, h, w = x.shape
    k = weight.shape[2]
    od, oh, ow = d - k + 1, h - k + 1, w - k + 1
    rows = od * h * w
    flat = torch.cat([x.reshape(n, -1), x.new_zeros(n, k * (h * w + w + 1))], dim=1)  # zeros past the end
    taps = [(ci, kd, kh, kw) for ci in range(c_in) for kd in range(k) for kh in range(k) for kw in range(k)]
    gathered = torch.stack([flat[:, ci * d * h * w + (kd * h + kh) * w + kw:][:, :rows]
                            for ci, kd, kh, kw in taps], dim=2)               # (N, rows, C_in k^3)
    y = gathered @ weight.reshape(weight.shape[0], -1).t()                  # (N, rows, C_out)
    y = y.reshape(n, od, h, w, -1)[:, :, :oh, :ow]                          # drop the wrapped rows
    return y.permute(0, 4, 1, 2, 3)


def unfused_reference(x, weight, bias, multiplier, clamp_min: float, clamp_max: float, eps: float) -> torch.Tensor:
    """``Model``'s forward in PyTorch ops, on the given tensors: what ``ModelNew``'s backward differentiates."""
    y = F.instance_norm(F.conv3d(x, weight, bias) * multiplier, eps=eps)
    return (torch.clamp(y, clamp_min, clamp_max) * multiplier).max(dim=1).values


# TF32 mode (see the module docstring): the error of the normalised conv output with TF32 products, as a fraction of
# its standard deviation (an upper value: a product carries 2^-11 relative of rounding, and inputs in [0, 1) have an
# RMS twice their standard deviation), and the estimated output error above which the fp32-accurate products run.
TF32_Z_ERROR = 1e-3
TF32_ERROR_BUDGET = 1.5e-3  # PARITY.md's TF32 bar is 2e-3


def tf32_error_estimate(multiplier: torch.Tensor, clamp_min: float, clamp_max: float) -> float:
    """Estimated relative-L2 error of the output with TF32 products, from the multipliers and the clamp bounds.

    Model: each channel's normalised value z_c is standard normal, independent of the others, with an error of
    TF32_Z_ERROR; out = max_c m_c clamp(z_c, lo, hi). To first order the error of out is m_c* times z_c*'s error
    where the winning channel c* has lo < z_c* < hi, and nothing where it sits at a bound. So the estimate is
    TF32_Z_ERROR * sqrt(E[m_c*^2 [lo < z_c* < hi]] / E[out^2]), by Monte Carlo (a fixed seed, at least 1 000 draws of
    every channel; CPU, float64). 0 where lo >= hi or nothing is inside (a constant output: no error). Measured
    against float64 on TF32-rounded operands (CPU, 24 seeds per configuration; results/model_a/NOTES.md,
    2026-11-28): every miss of 2e-3 had an estimate above TF32_ERROR_BUDGET; the KernelBench window stays below it.
    """
    lo, hi = float(clamp_min), float(clamp_max)
    m = multiplier.detach().reshape(-1).to("cpu", torch.float64)
    if not lo < hi or m.numel() == 0:
        return 0.0
    draws = max(1000, min(20000, 2 ** 22 // m.numel()))
    z = torch.randn(draws, m.numel(), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    values = m * z.clamp(lo, hi)
    out, winner = values.max(dim=1)
    z_winner = z.gather(1, winner[:, None])[:, 0]
    inside = ((z_winner > lo) & (z_winner < hi)).to(torch.float64)
    carried = (m[winner] ** 2 * inside).mean().item()
    if carried == 0.0:
        return 0.0
    mean_square = (out * out).mean().item()
    return math.inf if mean_square == 0.0 else TF32_Z_ERROR * math.sqrt(carried / mean_square)


_extensions = {}


def _load_extension(name: str = KERNEL):
    """The built extension (cached here so a forward does not re-hash the source)."""
    if name not in _extensions:
        _extensions[name] = helpers.load_kernel(name)
    return _extensions[name]


_v3_reasons = {}


def v3_unsupported_reason(x_shape, conv: nn.Conv3d, device_index: int) -> str:
    """'' when v3's fused kernel handles this input shape and conv on this device, else why not (cached)."""
    key = (tuple(x_shape), conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
           conv.groups, conv.padding_mode, device_index)
    if key not in _v3_reasons:
        if torch.cuda.get_device_capability(device_index) < (9, 0):
            reason = "needs compute capability 9.0 or newer (thread-block clusters)"
        elif (conv.stride != (1, 1, 1) or conv.padding != (0, 0, 0) or conv.dilation != (1, 1, 1)
              or conv.groups != 1 or conv.padding_mode != "zeros"):
            reason = "the conv must have stride 1, no padding, dilation 1 and groups 1 (nn.Conv3d's defaults)"
        else:
            reason = _load_extension(KERNEL_V3).unsupported_reason(
                list(x_shape[2:]), x_shape[0], x_shape[1], conv.out_channels, list(conv.kernel_size), device_index)
        _v3_reasons[key] = reason
    return _v3_reasons[key]


class ModelNew(nn.Module):
    """Model A fused: v3 in one kernel, v1 as cuDNN Conv3d + two CUDA passes (module docstring).

    ``allow_tf32`` (keyword, default False, named after ``torch.backends.cudnn.allow_tf32``):
    False is fp32-accurate (PARITY.md's default mode: v3 uses split FP16 products, v1 runs
    cuDNN with TF32 off); True uses single TF32 products (v3) or lets cuDNN pick a TF32 conv (v1),
    except where the clamp window is too narrow for TF32's error (``tf32_products``).
    ``variant``: "auto" (default: the faster of v3 and v1, measured once per input shape and
    mode), "v3" (v3 wherever its envelope allows) or "v1".
    """

    def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape, clamp_min, clamp_max,
                 *, allow_tf32: bool = False, variant: str = "auto"):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"ModelNew: variant must be one of {VARIANTS}, got {variant!r}")
        if tuple(multiplier_shape) != (out_channels, 1, 1, 1):
            raise ValueError(f"ModelNew: multiplier_shape must be (out_channels, 1, 1, 1) = "
                             f"({out_channels}, 1, 1, 1), got {tuple(multiplier_shape)}")
        if not 1 <= out_channels <= 8192:
            raise ValueError(f"ModelNew: out_channels must be in [1, 8192], got {out_channels}")
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.instance_norm = nn.InstanceNorm3d(out_channels)  # holds eps; no parameters
        self.clamp_min = float(clamp_min)
        self.clamp_max = float(clamp_max)
        self.allow_tf32 = bool(allow_tf32)
        self.variant = variant
        self._tf32_choice = {}  # tf32_products' remembered answer

    def tf32_products(self, x: torch.Tensor | None = None) -> bool:
        """Whether the forward uses TF32 products: ``allow_tf32``, unless ``tf32_error_estimate`` of the
        multipliers and clamp bounds exceeds ``TF32_ERROR_BUDGET`` (then the fp32-accurate products run).
        Remembered per multiplier version and bounds (``helpers.tf32_products_allowed``: one device-to-host copy
        per change; nothing read under CUDA graph capture or a ``torch.compile`` trace). ``x``, the input, is not
        used: the three models share the signature, and model C's rule depends on the input's shape."""
        return self.allow_tf32 and helpers.tf32_products_allowed(
            self._tf32_choice, (self.multiplier,), (self.clamp_min, self.clamp_max),
            lambda: tf32_error_estimate(self.multiplier, self.clamp_min, self.clamp_max), TF32_ERROR_BUDGET)

    def path(self, x: torch.Tensor, tf32: bool | None = None) -> str:
        """Which forward runs for input ``x``, and why: "v1"; "v3"; "v1 (v3 unsupported: <reason>)";
        under ``variant="auto"``, "v3 (auto: ...)" or "v1 (auto: ...)" with the measured times.
        The first two characters name the path. Under "auto" the first call for a shape times both.
        ``tf32``: the forward's ``tf32_products()`` where the caller has it already."""
        if self.variant == "v1":
            return "v1"
        if not x.is_cuda:
            return "v1 (v3 unsupported: x is not a CUDA tensor)"
        reason = v3_unsupported_reason(x.shape, self.conv, x.device.index)
        if reason:
            return f"v1 (v3 unsupported: {reason})"
        if self.variant == "v3":
            return "v3"
        return self._auto_path(x, self.tf32_products() if tf32 is None else tf32)

    def _auto_path(self, x: torch.Tensor, tf32: bool) -> str:
        k = self.conv.kernel_size[0]
        outputs = x.shape[0] * (x.shape[2] - k + 1) * (x.shape[3] - k + 1) * (x.shape[4] - k + 1)
        key = ("model A", tuple(x.shape), self.conv.out_channels, k, tf32, x.device.index)
        def candidates():  # built only while this key's answer is not known
            t = x.detach().contiguous(), self.conv.weight.detach(), self.multiplier.detach()
            return {"v3": lambda: self._forward_v3(*t, None, tf32), "v1": lambda: self._forward_v1(*t, None, tf32)}

        return helpers.auto_path(key, candidates,
                                 conv_bytes=4 * outputs * self.conv.out_channels, cap_bytes=AUTO_MEASURE_MAX_CONV_BYTES,
                                 # no sample, or one element per channel, which forward refuses
                                 measurable=outputs > x.shape[0])

    def forward(self, x, out: torch.Tensor | None = None):
        """x: (N, C_in, D, H, W) float32 CUDA -> (N, D', H', W'); ``out`` optionally receives it.

        Differentiable: where autograd needs gradients, the backward recomputes the unfused model with
        PyTorch ops (``unfused_reference``, through ``helpers.recomputed_backward``)."""
        helpers.check_input(x, spatial_dims=3, in_channels=self.conv.in_channels,
                            device=self.conv.weight.device)
        if self.conv.padding_mode != "zeros":
            raise ValueError(f"ModelNew: conv padding_mode must be 'zeros', got {self.conv.padding_mode!r}")
        tf32 = self.tf32_products()  # once per forward: the fused path, auto's key and the backward's recompute
        fused = self._forward_v3 if self.path(x, tf32)[:2] == "v3" else self._forward_v1
        bounds = (self.clamp_min, self.clamp_max, float(self.instance_norm.eps))  # as this forward ran
        return helpers.recomputed_backward(
            lambda x, weight, bias, multiplier: fused(x, weight, multiplier, out, tf32),
            lambda x, weight, bias, multiplier: unfused_reference(x, weight, bias, multiplier, *bounds),
            (x.contiguous(), self.conv.weight, self.conv.bias, self.multiplier), allow_tf32=tf32)

    def _forward_v1(self, x, weight, multiplier, out, tf32: bool):
        # A contiguous input gives cuDNN's NCDHW output; channels-last inputs would give a
        # channels-last conv output, and making that contiguous would copy the largest tensor.
        with helpers.cudnn_tf32(tf32):
            # No bias: InstanceNorm removes any per-channel constant, so the bias cannot change
            # the output, and cuDNN would add it in a separate pass over the conv output.
            y = F.conv3d(x, weight, None, self.conv.stride, self.conv.padding, self.conv.dilation, self.conv.groups)
        y = y.contiguous()  # a no-op for the NCDHW output above
        if y.shape[2] * y.shape[3] * y.shape[4] == 1:
            raise ValueError(f"ModelNew: the conv output has one spatial element per channel (shape "
                             f"{tuple(y.shape)}); InstanceNorm3d needs more than one, as in PyTorch")
        if out is None:
            out = torch.empty((y.shape[0], *y.shape[2:]), device=y.device, dtype=y.dtype)
        return _load_extension().fused_tail(y, multiplier.detach(), self.clamp_min, self.clamp_max,
                                            float(self.instance_norm.eps), out)

    def _forward_v3(self, x, weight, multiplier, out, tf32: bool):
        k = self.conv.kernel_size[0]
        out_size = [s - k + 1 for s in x.shape[2:]]
        if out_size[0] * out_size[1] * out_size[2] == 1:
            raise ValueError(f"ModelNew: the conv output has one spatial element per channel (input "
                             f"{tuple(x.shape)}); InstanceNorm3d needs more than one, as in PyTorch")
        if out is None:
            out = torch.empty((x.shape[0], *out_size), device=x.device, dtype=x.dtype)
        return _load_extension(KERNEL_V3).forward(x, weight.detach(), multiplier.detach(), self.clamp_min,
                                                  self.clamp_max, float(self.instance_norm.eps), tf32, out)
