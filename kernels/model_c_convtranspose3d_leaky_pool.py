"""Model C -- KernelBench level 2, problem 74: ConvTranspose3d -> LeakyReLU -> x m -> LeakyReLU -> MaxPool3d.

KernelBench convention: ``Model`` (the unfused reference, exactly as specified in
``shared/REFERENCE_MODELS.md``), ``ModelNew`` (same ``__init__`` signature and parameters, so
``ModelNew(...).load_state_dict(Model(...).state_dict())`` works), ``get_inputs()`` and
``get_init_inputs()`` at the KernelBench size.

``ModelNew`` has three forward variants, and by default picks between the last two:

* ``variant="v3"``: the whole model in one launch of
  ``kernels/model_c_v3_fused_convtranspose_pool.cu``: the transposed conv is computed on tensor
  cores per stride phase (3xTF32 split products by default, fp32-accurate; 1xTF32 with
  ``allow_tf32=True``), pooled in registers, and only the pooled output is written.
* ``variant="v2"``: PyTorch's (cuDNN) ConvTranspose3d without its bias, then one pass of
  ``kernels/model_c_v1_v2_leaky_pool.cu`` that pools first -- a max-pool where m >= 0, a min-pool
  where m < 0 (f is monotone for a non-negative slope) -- and applies f once.
* ``variant="v1"``: the same conv, then f(v) = leaky(m * leaky(v + bias)) on every element and a
  max-pool, in one pass.

Autograd: ``ModelNew`` trains. The kernels compute the forward only; where autograd needs gradients,
the backward recomputes the unfused forward with PyTorch ops (TF32 as ``tf32_products(x)`` says) and
differentiates that (``helpers.recomputed_backward``), so gradients for the input, the conv weight and
bias and the multiplier are PyTorch's. It costs a full unfused forward plus PyTorch's backward. Under
``torch.no_grad()`` nothing is saved.

Envelope of ``ModelNew``: float32 CUDA input (N, C_in, D, H, W), any N (0 included), any
configuration ``nn.ConvTranspose3d`` accepts, multiplier of shape (C_out, 1, 1, 1), pool 1..8
and no larger than the conv output, any negative slope (v2 falls back to v1 when it is
negative). v3 needs, in addition, the pool to be a multiple of the stride in every dimension
and C_in x kernel volume small enough for the weight block to sit in shared memory (see the
.cu header), on a GPU of compute capability 8.0 or newer; outside that, v3 runs v2.
Anything else raises a ValueError/TypeError naming the argument.

``variant="auto"`` (the default) runs the faster of v3 and v2. On small problems v2 is often the
faster one: on 30 small random configurations on an H100, in 21 (fp32-accurate mode, by up to 9.5x)
and 16 (TF32, up to 7.1x) (results/model_c/NOTES.md, "ModelNew's default: the faster of v3 and v2,
measured"). So "auto" times both once per input shape and configuration and remembers the choice
(``helpers.auto_path``). It measures only where v2's conv output would take at most
``AUTO_MEASURE_MAX_CONV_BYTES`` (128 MiB); above that it runs v3, which never allocates the conv output, as
at the KernelBench size (256 MiB). ``ModelNew.path(x)`` says which variant runs and why.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import helpers  # the repository root must be on sys.path

KERNEL = "model_c_v1_v2_leaky_pool"
KERNEL_V3 = "model_c_v3_fused_convtranspose_pool"
VARIANTS = ("auto", "v1", "v2", "v3")
# "auto" measures v2 against v3 only where v2's conv output (float32) takes at most this; above it, v3.
# Below the KernelBench size's 256 MiB, so that size never allocates the conv output; above 16 MiB v2 was
# still the faster on some problems (results/model_c/NOTES.md, "Above 16 MiB").
AUTO_MEASURE_MAX_CONV_BYTES = 128 * 2**20
# allow_tf32=True multiplies in TF32 only where the output holds at least this many values (N x C_out x pooled
# positions); below it the fp32-accurate products run. PARITY.md's relative L2 over a handful of values turns on the
# few largest, and TF32's rounding of the operands took it past 2e-3 on such outputs: every recorded miss had at most
# 560 values (the fuzz's 10 on an H100; 35 of 140 627 configurations of the fuzz's generators emulated in float64 on
# the CPU, scripts/probes/model_c_tf32_emulation.py, none above 252 values; the worst from 4 096 values up, 1.5e-3).
# A rule from those measurements, not a bound. Such outputs are small problems, where the products cost little.
TF32_MIN_OUTPUT_VALUES = 4096

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


def stride_phase_reference(x: torch.Tensor, weight: torch.Tensor, stride, padding, output_padding,
                           pool: int) -> torch.Tensor:
    """v3's algebra in plain PyTorch: max_pool3d(conv_transpose3d(x, weight), pool) (no bias) computed as
    v3 does, one ordinary convolution per window offset (= stride phase), max over the offsets.

    Needs pool % stride == 0 per dimension. Per dimension, window offset r takes the taps
    k = (r + padding) mod stride, + stride, ... and reads input p * (pool / stride) + (r + padding - k) / stride
    for pooled position p (zero outside x), as the kernel's tap tables do.
    """
    n, _, *in_size = x.shape
    kernel = weight.shape[2:]
    out_size = [(i - 1) * s - 2 * p + k + op for i, s, p, k, op in zip(in_size, stride, padding, kernel, output_padding)]
    pooled = [o // pool for o in out_size]
    step = [pool // s for s in stride]
    margin = max(kernel) + pool  # every index the taps reach, shifted to be >= 0
    xp = F.pad(x, [margin, margin + pool * max(pooled)] * 3)
    def taps(d, r):
        return [(k, (r + padding[d] - k) // stride[d]) for k in range((r + padding[d]) % stride[d], kernel[d], stride[d])]
    best = None
    for rd in range(pool):
        for rh in range(pool):
            for rw in range(pool):
                y = x.new_zeros(n, weight.shape[1], *pooled)
                for kd, cd in taps(0, rd):
                    for kh, ch in taps(1, rh):
                        for kw, cw in taps(2, rw):
                            xs = xp[:, :, margin + cd::step[0], margin + ch::step[1], margin + cw::step[2]]
                            xs = xs[:, :, :pooled[0], :pooled[1], :pooled[2]]
                            y += torch.einsum("nidhw,io->nodhw", xs, weight[:, :, kd, kh, kw])
                best = y if best is None else torch.maximum(best, y)
    return best


_extensions = {}


def _load_extension(name: str = KERNEL):
    """The built extension (cached here so a forward does not re-hash the source)."""
    if name not in _extensions:
        _extensions[name] = helpers.load_kernel(name)
    return _extensions[name]


def conv_output_size(in_size, cfg):
    """Spatial size of conv_transpose3d's output for input spatial size ``in_size`` (dilation 1)."""
    return tuple((n - 1) * s - 2 * p + k + op for n, s, p, k, op in
                 zip(in_size, cfg["stride"], cfg["padding"], cfg["kernel"], cfg["output_padding"]))


_v3_reasons = {}


def v3_unsupported_reason(x_shape, cfg, device_index: int) -> str:
    """'' when v3's fused kernel handles this input shape and configuration, else why not (cached)."""
    key = (tuple(x_shape[1:]), cfg["out_channels"], cfg["kernel"], cfg["stride"], cfg["padding"],
           cfg["output_padding"], cfg["pool"], cfg["groups"], cfg["dilation"], cfg["allow_tf32"], device_index)
    if key not in _v3_reasons:
        if torch.cuda.get_device_capability(device_index) < (8, 0):
            _v3_reasons[key] = "needs compute capability 8.0 or newer (cp.async, TF32 mma.sync)"
        elif cfg["groups"] != 1 or tuple(cfg["dilation"]) != (1, 1, 1):
            _v3_reasons[key] = "groups and dilation must be 1"
        else:
            _v3_reasons[key] = _load_extension(KERNEL_V3).unsupported_reason(
                list(x_shape[2:]), x_shape[1], cfg["out_channels"], list(cfg["kernel"]), list(cfg["stride"]),
                list(cfg["padding"]), list(cfg["output_padding"]), cfg["pool"], device_index, cfg["allow_tf32"])
    return _v3_reasons[key]


def unfused_reference(x, weight, bias, multiplier, cfg):
    """``Model``'s forward in PyTorch ops, on the given tensors: what ``ModelNew``'s backward differentiates."""
    y = F.conv_transpose3d(x, weight, bias, stride=cfg["stride"], padding=cfg["padding"],
                           output_padding=cfg["output_padding"], dilation=cfg["dilation"], groups=cfg["groups"])
    y = F.leaky_relu(F.leaky_relu(y, cfg["slope"]) * multiplier, cfg["slope"])
    return F.max_pool3d(y, cfg["pool"])


def _fused(x, weight, bias, multiplier, cfg):
    """The forward: v3's single kernel, or cuDNN's transposed conv + v1/v2's fused pass."""
    p = cfg["pool"]
    conv_size = conv_output_size(x.shape[2:], cfg)
    if min(conv_size) < p:
        raise ValueError(f"ModelNew: the pool window ({p}) is larger than the conv output "
                         f"{conv_size}; PyTorch's MaxPool3d refuses this too")
    out = cfg["out"]
    if out is None:
        out = torch.empty((x.shape[0], cfg["out_channels"], *(s // p for s in conv_size)), device=x.device,
                          dtype=x.dtype)
    if cfg["path"] == "v3":
        return _load_extension(KERNEL_V3).forward(
            x, weight, bias, multiplier.reshape(-1), list(cfg["stride"]), list(cfg["padding"]),
            list(cfg["output_padding"]), p, cfg["slope"], cfg["allow_tf32"], out)
    with helpers.cudnn_tf32(cfg["allow_tf32"]):
        y = F.conv_transpose3d(x, weight, None, stride=cfg["stride"], padding=cfg["padding"],
                               output_padding=cfg["output_padding"], dilation=cfg["dilation"],
                               groups=cfg["groups"]).contiguous()
    return _load_extension().fused_tail(y, bias, multiplier.reshape(-1), cfg["slope"], p, cfg["path"] == "v2", out)


class ModelNew(nn.Module):
    """Model C fused: v3 in one kernel, v1/v2 as cuDNN's transposed conv + one fused pass (module docstring).

    ``allow_tf32`` (keyword, default False, named after ``torch.backends.cudnn.allow_tf32``): False
    is fp32-accurate (v3: 3xTF32 split products; v1/v2: cuDNN with TF32 off); True uses single TF32
    products (v3) or lets cuDNN pick TF32 (v1/v2), as eager PyTorch does by default for this model,
    except on outputs of fewer than ``TF32_MIN_OUTPUT_VALUES`` values (``tf32_products(x)``).
    ``variant``: "auto" (default: the faster of v3 and v2, measured once per input shape and
    configuration), "v3" (v3 wherever its envelope allows, v2 elsewhere), "v2" or "v1".
    ``negative_slope`` (keyword, default 0.2 as in the reference).
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, multiplier_shape,
                 *, allow_tf32: bool = False, variant: str = "auto", negative_slope: float = 0.2, pool: int = 2):
        super().__init__()
        if tuple(multiplier_shape) != (out_channels, 1, 1, 1):
            raise ValueError(f"ModelNew: multiplier_shape must be (out_channels, 1, 1, 1) = "
                             f"({out_channels}, 1, 1, 1), got {tuple(multiplier_shape)}")
        if variant not in VARIANTS:
            raise ValueError(f"ModelNew: variant must be one of {VARIANTS}, got {variant!r}")
        if not isinstance(pool, int) or not 1 <= pool <= 8:
            raise ValueError(f"ModelNew: pool must be an int in [1, 8], got {pool!r}")
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.negative_slope = float(negative_slope)
        self.pool = pool
        self.allow_tf32 = bool(allow_tf32)
        self.variant = variant

    def tf32_products(self, x: torch.Tensor) -> bool:
        """Whether a forward on ``x`` multiplies in TF32: ``allow_tf32``, where the output (N x C_out x pooled
        positions) holds at least ``TF32_MIN_OUTPUT_VALUES`` values; else the fp32-accurate products run (v3's
        3xTF32, or cuDNN with TF32 off). From the shapes alone: nothing is read from the GPU."""
        ct = self.conv_transpose
        sizes = conv_output_size(x.shape[2:], {"stride": ct.stride, "padding": ct.padding, "kernel": ct.kernel_size,
                                               "output_padding": ct.output_padding})
        values = x.shape[0] * ct.out_channels * math.prod(s // self.pool for s in sizes)
        return self.allow_tf32 and values >= TF32_MIN_OUTPUT_VALUES

    def _config(self, x: torch.Tensor):
        ct = self.conv_transpose
        return {"out_channels": ct.out_channels, "kernel": ct.kernel_size, "stride": ct.stride,
                "padding": ct.padding, "output_padding": ct.output_padding, "dilation": ct.dilation,
                "groups": ct.groups, "slope": self.negative_slope, "pool": self.pool,
                "allow_tf32": self.tf32_products(x)}

    def path(self, x: torch.Tensor) -> str:
        """Which forward runs for input ``x``, and why: "v1"; "v2"; "v3"; "v2 (v3 unsupported: <reason>)";
        under ``variant="auto"``, "v3 (auto: ...)" or "v2 (auto: ...)" with the measured times.
        The first two characters name the variant. Under "auto" the first call for a shape times both."""
        return self._path(x, self._config(x))

    def _path(self, x: torch.Tensor, cfg: dict) -> str:
        if self.variant in ("v1", "v2"):
            return self.variant
        if not x.is_cuda:
            return "v2 (v3 unsupported: x is not a CUDA tensor)"
        reason = v3_unsupported_reason(x.shape, cfg, x.device.index)
        if reason:
            return f"v2 (v3 unsupported: {reason})"
        return "v3" if self.variant == "v3" else self._auto_path(x, cfg)

    def _auto_path(self, x: torch.Tensor, cfg: dict) -> str:
        conv_size = conv_output_size(x.shape[2:], cfg)
        key = ("model C", tuple(x.shape), tuple(cfg.items()), x.device.index)
        ct = self.conv_transpose
        def candidates():  # built only while this key's answer is not known
            t = [v.detach() for v in (x.contiguous(), ct.weight, ct.bias, self.multiplier)]
            return {p: lambda p=p: _fused(*t, {**cfg, "path": p, "out": None}) for p in ("v3", "v2")}

        return helpers.auto_path(key, candidates,
                                 conv_bytes=4 * x.shape[0] * cfg["out_channels"] * math.prod(conv_size),
                                 cap_bytes=AUTO_MEASURE_MAX_CONV_BYTES,
                                 # no sample, or a pool window forward refuses
                                 measurable=x.shape[0] > 0 and min(conv_size) >= cfg["pool"])

    def forward(self, x, out: torch.Tensor | None = None):
        """x: (N, C_in, D, H, W) float32 CUDA -> (N, C_out, D'//P, H'//P, W'//P); ``out`` optionally receives it."""
        helpers.check_input(x, spatial_dims=3, in_channels=self.conv_transpose.in_channels,
                            device=self.multiplier.device)
        cfg = self._config(x)  # the TF32 rule (tf32_products) once: path, kernel and the backward's recompute
        cfg["path"] = self._path(x, cfg)[:2]
        cfg["out"] = out
        ct = self.conv_transpose
        return helpers.recomputed_backward(lambda *t: _fused(*(v.detach() for v in t), cfg),
                                           lambda *t: unfused_reference(*t, cfg),
                                           (x.contiguous(), ct.weight, ct.bias, self.multiplier),
                                           allow_tf32=cfg["allow_tf32"])
