"""Shared helpers for the fused-kernel notebooks and tests.

One function per job:

* environment  -- ``gpu_available``, ``environment_report``, ``git_commit``
* build        -- ``load_kernel`` (``kernels/<name>.cu`` through ``load_inline``, cached by source hash)
* parity       -- ``randomize_parameters``, ``parity_check``, ``parity_sweep`` (``../shared/PARITY.md``),
                  ``gradient_parity``
* autograd     -- ``recomputed_backward`` (a fused forward whose backward recomputes the unfused model),
                  ``check_forward_under_autograd``, ``check_backward_uses_its_forward``
* timing       -- ``benchmark`` (CUDA events, L2 flushed, interleaved contenders), ``batch_sweep``,
                  ``measure_ceilings``, ``fastest`` (a measured choice between equivalent paths),
                  ``time_auto_choice`` and ``auto_choice_summary`` (a check of that choice)
* results      -- ``save_results``, ``load_results``, ``save_figure``, ``plot_timings``, ``plot_roofline``,
                  ``plot_batch_sweep``,
                  ``problem_size`` (bytes and conv FLOPs behind the floors)

Units: times in milliseconds (``*_ms``), bandwidth in TB/s, arithmetic in TFLOP/s, sizes in bytes.
"""
from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import hashlib
import inspect
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent
KERNELS_DIR = ROOT / "kernels"
RESULTS_DIR = Path(os.environ.get("FUSED_RESULTS_DIR", ROOT / "results"))
BUILD_DIR = Path(os.environ.get("FUSED_KERNELS_BUILD_DIR", ROOT / ".build"))
NO_GPU_ARCH = "90a"  # compile target when no GPU is visible (H100, so CI compiles the wgmma paths too)
NVCC_FLAGS = ("-O3", "-lineinfo")


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------

def gpu_available() -> bool:
    """True when PyTorch sees a CUDA GPU (the kernels need one to run; building does not)."""
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def git_commit() -> str:
    """Short commit of this checkout, '+dirty' when tracked files changed; $FUSED_GIT_COMMIT wins."""
    if os.environ.get("FUSED_GIT_COMMIT"):
        return os.environ["FUSED_GIT_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _nvidia_driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "n/a"
    except (OSError, subprocess.SubprocessError):
        return "n/a"


def environment_report() -> dict:
    """GPU, driver, torch, CUDA, cuDNN, nvcc, TF32 flags, Python, git commit and UTC date, as a dict."""
    report = {
        "gpu": "none (no CUDA GPU visible)",
        "capability": None,
        "sm_count": None,
        "l2_MB": None,
        "driver": _nvidia_driver(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nvcc": _nvcc_version_string(),
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if gpu_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        report.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                      sm_count=props.multi_processor_count,
                      l2_MB=round(getattr(props, "L2_cache_size", 0) / 2**20, 1))
    return report


def stamp(env: Mapping) -> str:
    """One line naming where a figure was measured: GPU | torch | CUDA | commit | date."""
    return (f"{env['gpu']} | torch {env['torch']} | CUDA {env['torch_cuda']} | "
            f"commit {env['git_commit']} | {env['date']}")


# ---------------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------------

class KernelBuildError(RuntimeError):
    """The toolchain is missing or mismatched, or nvcc rejected a kernel source."""


def _cuda_home() -> Path | None:
    """The CUDA toolkit root: $CUDA_HOME/$CUDA_PATH, else where nvcc lives, else /usr/local/cuda.

    PyTorch guesses dirname(dirname(which nvcc)), which is wrong when nvcc on PATH is a wrapper
    script (e.g. /usr/local/bin/nvcc); a root counts only if it has bin/nvcc and the CUDA headers.
    """
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates += ["/usr/local/cuda", *sorted(map(str, Path("/usr/local").glob("cuda-*")), reverse=True)]
    for c in candidates:
        if c and (Path(c) / "bin" / "nvcc").exists() and (Path(c) / "include" / "cuda_runtime.h").exists():
            return Path(c)
    return None


def _nvcc_version_string() -> str | None:
    home = _cuda_home()
    if home is None:
        return None
    try:
        out = subprocess.run([str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None


def check_toolchain() -> Path:
    """Raise KernelBuildError unless torch has CUDA, ninja is on PATH and nvcc's major matches torch's.

    Returns the CUDA toolkit root that builds will use.
    """
    if torch.version.cuda is None:
        raise KernelBuildError(f"This PyTorch ({torch.__version__}) is a CPU-only build: install a CUDA "
                               "build of PyTorch to compile the kernels.")
    home = _cuda_home()
    if home is None:
        raise KernelBuildError(
            "nvcc was not found: install the CUDA toolkit (its major version must match PyTorch's CUDA "
            f"{torch.version.cuda}) and put its bin/ on PATH or set CUDA_HOME to its root.")
    nvcc = _nvcc_version_string()
    if nvcc is None:
        raise KernelBuildError(f"Could not read the version of {home / 'bin' / 'nvcc'}.")
    if nvcc.split(".")[0] != torch.version.cuda.split(".")[0]:
        raise KernelBuildError(
            f"nvcc at {home} is CUDA {nvcc} but PyTorch was built with CUDA {torch.version.cuda}: the "
            "major versions must match. Point CUDA_HOME at a matching toolkit or install the PyTorch "
            "build for your toolkit.")
    if shutil.which("ninja") is None and not (Path(sys.executable).parent / "ninja").exists():
        raise KernelBuildError("ninja is required to build the kernels: pip install ninja")
    return home


def target_arch() -> str:
    """Architecture to compile for, as nvcc spells it after sm_: the current GPU's, else '90a'.

    Compute capability 9.0 gets '90a' (Hopper's arch-specific features, wgmma among them; such a
    binary runs only on 9.0, which is the GPU it is built for).
    """
    if gpu_available():
        major, minor = torch.cuda.get_device_capability()
        return "90a" if (major, minor) == (9, 0) else f"{major}{minor}"
    return NO_GPU_ARCH


def _readable_build_error(log: str) -> str:
    """Put the compiler's error lines first; the full log follows."""
    errors = [ln for ln in log.splitlines()  # compiler diagnostics, not ninja's command echo
              if re.search(r"\berror\b", ln) and not ln.lstrip().startswith(("[", "FAILED:"))]
    head = "\n".join(errors[:20]) if errors else "(no line mentions 'error'; see the log)"
    return f"{head}\n\n----- full build log -----\n{log}"


_LOADED: dict[str, object] = {}


def load_kernel(name: str, *, arch: str | None = None, verbose: bool = False, quiet: bool = False):
    """Build (or load from cache) ``kernels/<name>.cu`` as a Python extension module.

    The source holds its own pybind11 binding. The build directory is keyed by a hash of the
    source, the target architecture, the flags and the torch/nvcc versions, so a changed source
    rebuilds and an unchanged one loads in well under a second. Compiles with -O3 and -lineinfo
    for ``arch`` (as nvcc spells it after sm_, e.g. "90" to build an H100's portable code paths
    without the sm_90a ones), by default ``target_arch()``: the visible GPU's, or sm_90a without one.
    """
    source_path = KERNELS_DIR / f"{name}.cu"
    if not source_path.exists():
        raise FileNotFoundError(f"no kernel source {source_path}")
    source = source_path.read_text()
    home = check_toolchain()
    arch = arch or target_arch()
    flags = [*NVCC_FLAGS, f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    key = "\n".join([source, arch, *flags, torch.__version__, _nvcc_version_string() or ""])
    ext_name = f"{name}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if ext_name in _LOADED:
        return _LOADED[ext_name]

    os.environ["CUDA_HOME"] = str(home)
    cpp_extension_logger = logging.getLogger("torch.utils.cpp_extension")
    level = cpp_extension_logger.level
    cpp_extension_logger.setLevel(logging.ERROR)  # its import warns "No CUDA runtime" without a GPU
    try:
        from torch.utils import cpp_extension
    finally:
        cpp_extension_logger.setLevel(level)
    cpp_extension.CUDA_HOME = str(home)  # torch computes it at import, possibly from a wrapper script
    build_dir = BUILD_DIR / ext_name
    build_dir.mkdir(parents=True, exist_ok=True)
    cached = any(build_dir.glob(f"{ext_name}*.so"))
    start = time.perf_counter()
    try:
        module = cpp_extension.load_inline(
            name=ext_name, cpp_sources="", cuda_sources=source, extra_cflags=["-O3"],
            extra_cuda_cflags=flags, build_directory=str(build_dir), with_cuda=True, verbose=verbose)
    except RuntimeError as err:
        raise KernelBuildError(f"building kernels/{name}.cu for sm_{arch} failed:\n"
                               + _readable_build_error(str(err))) from None
    seconds = time.perf_counter() - start
    if not quiet:
        what = "loaded cached" if cached else "built"
        print(f"{what} kernels/{name}.cu for sm_{arch} in {seconds:.2f} s ({build_dir.relative_to(ROOT) if build_dir.is_relative_to(ROOT) else build_dir})")
    _LOADED[ext_name] = module
    return module


def kernel_source(name: str) -> str:
    """The text of ``kernels/<name>.cu`` (for showing in a notebook)."""
    return (KERNELS_DIR / f"{name}.cu").read_text()


# ---------------------------------------------------------------------------------------------
# Parity (../shared/PARITY.md)
# ---------------------------------------------------------------------------------------------

class ParityError(AssertionError):
    """A fused variant missed its parity criterion; the message holds the failing rows."""


_NORM_TYPES = (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm, torch.nn.LayerNorm)


# NaN and infinity bit patterns for tests that special values propagate as PyTorch's do: PyTorch's
# float("nan") (0x7fc00000), the NaN CUDA's arithmetic produces (0 / 0: 0x7fffffff), all bits set, the smallest
# payload, then +inf and -inf. Rounding to TF32 by an integer add of 2^12 carried the second and third into the
# sign bit (kernels/README.md), which float("nan") alone does not catch.
NAN_AND_INF_BITS = (0x7FC00000, 0x7FFFFFFF, -1, 0x7F800001, 0x7F800000, -0x800000)


def one_special_value_per_sample(x: torch.Tensor) -> torch.Tensor:
    """A copy of float32 ``x`` (N, C, ...) where sample n < len(NAN_AND_INF_BITS) holds the n-th bit pattern of
    ``NAN_AND_INF_BITS`` at channel 0 and inner position min(3, size - 1) along each spatial dimension (an
    element inside every receptive field's reach); the samples after those keep their finite values."""
    if x.dtype != torch.float32 or x.dim() < 3 or x.shape[0] <= len(NAN_AND_INF_BITS):
        raise ValueError(f"one_special_value_per_sample: x must be float32 (N, C, ...) with N > "
                         f"{len(NAN_AND_INF_BITS)}, got {x.dtype} of shape {tuple(x.shape)}")
    x = x.clone()
    bits = x.view(torch.int32)
    for n, value in enumerate(NAN_AND_INF_BITS):
        bits[(n, 0) + tuple(min(3, s - 1) for s in x.shape[2:])] = value
    return x


# Inputs and weights far from [0, 1) in either direction, and one large value among small ones: cases for a kernel
# that hands the tensor cores FP16 values (5 exponent bits) scaled by powers of two (scale_case applies them).
FP16_SCALE_CASES = ("inputs x 2^-40", "inputs x 2^40", "weights x 2^-30", "weights x 2^30", "one input 1e6",
                    "inputs +1e4")


@torch.no_grad()
def scale_case(model: torch.nn.Module, x: torch.Tensor, case: str, large_at: tuple) -> torch.Tensor:
    """Applies one of FP16_SCALE_CASES: scales ``model.conv``'s weights in place, or returns a copy of ``x`` scaled,
    shifted, or holding 1e6 at index ``large_at``. Zeroes the conv bias in every case (the truth then comes from the
    same changed model): with a bias of order 0.1 the float32 yardstick loses conv values of order 2^-40 to
    rounding, and PARITY.md's fp32 bar (4x the yardstick's error) would then pass anything."""
    if case not in FP16_SCALE_CASES:
        raise ValueError(f"scale_case: case must be one of {FP16_SCALE_CASES}, got {case!r}")
    model.conv.bias.zero_()
    model.conv.weight.mul_({"weights x 2^-30": 2.0 ** -30, "weights x 2^30": 2.0 ** 30}.get(case, 1.0))
    x = x.clone()
    if case == "inputs x 2^-40":
        x *= 2.0 ** -40
    elif case == "inputs x 2^40":
        x *= 2.0 ** 40
    elif case == "one input 1e6":
        x[large_at] = 1e6
    elif case == "inputs +1e4":
        x += 1e4
    return x


def check_special_values(model: torch.nn.Module, fused: torch.nn.Module, x: torch.Tensor, *, tf32: bool) -> None:
    """Raise ParityError unless ``fused`` handles ``x`` (from ``one_special_value_per_sample``) as ``model`` does
    with TF32 off (PARITY.md's yardstick): the samples holding a NaN or infinity come out entirely NaN in both,
    and the other samples are finite and match to 1e-4 (fp32-accurate) or KernelBench's 1e-2 (``tf32``)."""
    special = len(NAN_AND_INF_BITS)
    with torch.no_grad(), strict_fp32():
        expected, got = model(x), fused(x)
    if not torch.isnan(expected[:special]).all():
        raise ParityError("check_special_values: the reference does not turn every special sample into NaN")
    if not torch.isnan(got[:special]).all():
        raise ParityError("check_special_values: samples not entirely NaN: "
                          f"{[n for n in range(special) if not torch.isnan(got[n]).all()]}")
    if torch.isnan(got[special:]).any():
        raise ParityError("check_special_values: NaN in a sample without special values")
    tol = 1e-2 if tf32 else 1e-4
    try:
        torch.testing.assert_close(got[special:], expected[special:], atol=tol, rtol=tol)
    except AssertionError as error:
        raise ParityError(f"check_special_values: the finite samples differ: {error}") from None


@torch.no_grad()
def randomize_parameters(model: torch.nn.Module, seed: int) -> None:
    """Fresh weights in place: default init for layers, N(0, 1) for scales, with zeros and negatives.

    Layers with ``reset_parameters`` get PyTorch's default initialisation. The model's own
    parameters (multipliers, scales) and normalisation weights/biases are drawn from N(0, 1),
    then element 0 is set to 0 and element 1 made negative, so every check covers a zero and a
    negative scale. Parameters keep their identity (compiled graphs stay valid).
    """
    torch.manual_seed(seed)
    for module in model.modules():
        if module is not model and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    scales = [p for _, p in model.named_parameters(recurse=False)]
    for module in model.modules():
        if isinstance(module, _NORM_TYPES):
            scales += [p for p in (getattr(module, "weight", None), getattr(module, "bias", None))
                       if p is not None]
    for p in scales:
        p.copy_(torch.randn(p.shape, device=p.device, dtype=p.dtype))
        flat = p.view(-1)
        if flat.numel() >= 2:
            flat[0] = 0.0
        if flat.numel() >= 3:
            flat[1] = -flat[1].abs()


def tf32_products_allowed(memo: dict, parameters: Sequence[torch.Tensor], settings: tuple,
                          estimate: Callable[[], float], budget: float) -> bool:
    """Whether a forward asked for TF32 products may use them: ``estimate()`` (the output's estimated relative-L2
    error with TF32 products, from the parameters and settings) is at most ``budget``; else the fp32-accurate
    products run.

    ``memo`` is the module's own dict: the answer is remembered for the current parameters (their storage and
    version counters, so an in-place update or a new tensor counts as new) and settings, so the estimate and its
    device-to-host copy run once per change, not per forward. While ``torch.compile`` traces, nothing is read: the
    remembered answer, or False (fp32-accurate) where there is none. While a CUDA graph is captured, a change not yet
    estimated also gives False (nothing may be copied to the host during a capture).
    """
    if torch.compiler.is_compiling():
        return bool(memo) and next(iter(memo.values()))
    key = (settings, tuple((p.data_ptr(), p._version, p.device) for p in parameters))
    if key not in memo:
        if any(p.is_cuda for p in parameters) and torch.cuda.is_current_stream_capturing():
            return False
        memo.clear()  # one entry: the current parameters and settings
        memo[key] = estimate() <= budget
    return memo[key]


@contextlib.contextmanager
def strict_fp32():
    """TF32 off for cuDNN and cuBLAS inside the block (PARITY.md's yardstick), restored after."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def cudnn_tf32(allow: bool):
    """Context manager: cuDNN may use TF32 inside the block iff ``allow`` (its other flags kept).

    The fused models run their cuDNN convolution under this, so that ``allow_tf32=False`` gives an
    fp32-accurate conv whatever the global ``torch.backends.cudnn.allow_tf32`` says.
    """
    cudnn = torch.backends.cudnn
    return cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                       allow_tf32=allow)


class _RecomputedBackward(torch.autograd.Function):
    """Forward: ``fused(*tensors)``. Backward: ``unfused(*tensors)`` recomputed with autograd on and
    differentiated (``recomputed_backward`` below)."""

    @staticmethod
    def forward(ctx, fused, unfused, allow_tf32, *tensors):
        ctx.save_for_backward(*tensors)
        ctx.unfused, ctx.allow_tf32 = unfused, allow_tf32
        return fused(*tensors)

    @staticmethod
    def backward(ctx, grad_out):
        needs = ctx.needs_input_grad[3:]
        inputs = [None if t is None else t.detach().requires_grad_(need)
                  for t, need in zip(ctx.saved_tensors, needs)]
        wanted = [t for t, need in zip(inputs, needs) if need]
        with torch.enable_grad(), cudnn_tf32(ctx.allow_tf32):
            out = ctx.unfused(*inputs)
            grads = torch.autograd.grad(out, wanted, grad_out, allow_unused=True)
        grads = iter(torch.zeros_like(t) if g is None else g for t, g in zip(wanted, grads))
        return (None, None, None, *(next(grads) if need else None for need in needs))


def recomputed_backward(fused: Callable[..., torch.Tensor], unfused: Callable[..., torch.Tensor],
                        tensors: Sequence[torch.Tensor | None], *, allow_tf32: bool) -> torch.Tensor:
    """``fused(*tensors)``, differentiable: gradients are those of ``unfused(*tensors)``.

    The fused kernels compute a forward only. Where autograd needs gradients (grad mode on and one of
    ``tensors`` requires them), this saves ``tensors`` and, in the backward, recomputes the reference
    model with PyTorch ops (``unfused``, the same arguments; cuDNN may use TF32 iff ``allow_tf32``) and
    differentiates it: the backward costs a full unfused forward plus PyTorch's backward, and uses no
    kernel of this repository. Otherwise it calls ``fused`` directly (no autograd node, nothing saved).
    ``tensors`` may hold None (e.g. a conv without bias); an input the output does not depend on gets
    a zero gradient.
    """
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return _RecomputedBackward.apply(fused, unfused, allow_tf32, *tensors)
    return fused(*tensors)


def check_forward_under_autograd(fused: torch.nn.Module, x: torch.Tensor, *, bitwise: bool) -> None:
    """Raise ``ParityError`` unless ``fused(x)`` with ``x`` requiring a gradient is still the fused forward:
    the output carries ``recomputed_backward``'s node and equals the output under ``torch.no_grad()``, to the
    bit where ``bitwise`` (a kernel of this repository), else to 1e-6 (cuDNN's convs need not repeat to the bit)."""
    with torch.no_grad():
        plain = fused(x)
    trained = fused(x.detach().clone().requires_grad_())
    if not isinstance(trained.grad_fn, _RecomputedBackward._backward_cls):
        raise ParityError(f"check_forward_under_autograd: the output's grad_fn is {type(trained.grad_fn).__name__}")
    same = (torch.equal(trained, plain) if bitwise
            else torch.allclose(trained, plain, rtol=1e-6, atol=1e-6, equal_nan=True))
    if not same:
        raise ParityError("check_forward_under_autograd: the output under autograd differs from the one under "
                          f"no_grad by {(trained - plain).abs().max().item():.3g}")


def check_backward_uses_its_forward(fused: torch.nn.Module, x: torch.Tensor, grad_out: torch.Tensor,
                                    change: Callable[[], None]) -> None:
    """Raise ``ParityError`` unless a hyper-parameter changed between a forward and its backward (``change()``
    sets it on ``fused``) leaves that backward's input gradient as it was, while a fresh forward's gradient does
    change (so the check can fail). ``recomputed_backward`` must recompute with what the forward ran with."""
    x = x.detach().requires_grad_()
    before = torch.autograd.grad(fused(x), x, grad_out)[0]
    out = fused(x)
    change()
    after = torch.autograd.grad(out, x, grad_out)[0]
    if not torch.allclose(after, before, rtol=1e-5, atol=1e-6):
        raise ParityError("check_backward_uses_its_forward: the backward used the changed hyper-parameter "
                          f"(max |difference| {(after - before).abs().max().item():.3g})")
    if torch.allclose(torch.autograd.grad(fused(x), x, grad_out)[0], before, rtol=1e-2, atol=1e-3):
        raise ParityError("check_backward_uses_its_forward: the change does not change a fresh forward's gradient, "
                          "so this case cannot tell")


def check_input(x, *, spatial_dims: int, in_channels: int, device: torch.device, who: str = "ModelNew") -> None:
    """Raise TypeError/ValueError naming the problem unless ``x`` is a float32 CUDA tensor of shape
    (N, in_channels, *spatial) with ``spatial_dims`` spatial dimensions, on ``device``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who}: input x must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise ValueError(f"{who}: input x must be a CUDA tensor, got one on {x.device} "
                         "(the fused kernels run on NVIDIA GPUs only; use x.cuda())")
    if x.dtype != torch.float32:
        raise ValueError(f"{who}: input x must be float32, got {x.dtype}")
    rank = spatial_dims + 2
    dims = ", ".join("DHW"[3 - spatial_dims:])
    if x.dim() != rank:
        hint = (f" (the unbatched (C, {dims}) form is not supported: use x.unsqueeze(0))"
                if x.dim() == rank - 1 else "")
        raise ValueError(f"{who}: input x must be {rank}-D (N, C_in, {dims}), got {x.dim()}-D shape "
                         f"{tuple(x.shape)}{hint}")
    if x.shape[1] != in_channels:
        raise ValueError(f"{who}: input x has {x.shape[1]} channels, expected in_channels={in_channels}")
    if x.device != device:
        raise ValueError(f"{who}: input x is on {x.device} but the parameters are on {device}")


def errors_vs(truth: torch.Tensor, out: torch.Tensor) -> dict:
    """max-abs and relative-L2 error of ``out`` against ``truth`` (computed in float64), and NaN flags.

    Written out rather than taken from ``torch.testing``, which reports the worst element but no
    relative-L2 norm, the measure PARITY.md judges by.
    """
    t = truth.detach().double()
    o = out.detach().double()
    diff = o - t
    return {
        "max_abs": diff.abs().max().item() if diff.numel() else 0.0,
        "rel_l2": (diff.norm() / t.norm()).item() if t.numel() and t.norm() > 0 else diff.norm().item(),
        "nan_where_truth_finite": bool((torch.isnan(o) & ~torch.isnan(t)).any()),
    }


def _gradients(module: torch.nn.Module, inputs: Sequence[torch.Tensor], grad_out: torch.Tensor,
               dtype: torch.dtype) -> dict:
    """{"x0", "x1", ..., parameter names: gradient or None} of ``module`` at ``inputs`` (cast to ``dtype``)
    against ``grad_out``; the module's own ``.grad`` fields are left alone."""
    xs = [x.detach().to(dtype).requires_grad_() for x in inputs]
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(module(*xs), [*xs, *params.values()], grad_out.to(dtype), allow_unused=True)
    return dict(zip([f"x{i}" for i in range(len(xs))] + list(params), grads))


def gradient_parity(model: torch.nn.Module, fused: torch.nn.Module, inputs: Sequence[torch.Tensor],
                    grad_out: torch.Tensor, *, allow_tf32: bool = False, raise_on_failure: bool = True
                    ) -> pd.DataFrame:
    """Gradients of ``fused`` judged as PARITY.md judges outputs, one row per input and parameter.

    Ground truth: ``model`` in float64. Yardstick: ``model`` in float32 on the same device, cuDNN's
    TF32 as ``allow_tf32`` says (off: PARITY.md's yardstick; on: what PyTorch's TF32 gives), cuBLAS's
    off. ``fused`` must name its parameters as ``model`` does (KernelBench convention); their values
    are copied from ``model`` here. Each gradient passes when its relative-L2 error is <= 4 x the
    yardstick's + 1e-7 and its max-abs error <= 10 x the yardstick's + 1e-6 * max(1, max|truth|), with
    no NaN where the truth has none. ``truth_norm`` shows that a gradient is not zero everywhere (a
    clamp that saturates every output makes a vacuous case). A gradient that ``fused`` does not give
    fails. Raises ``ParityError`` listing the failures unless ``raise_on_failure`` is False.
    """
    fused.load_state_dict(model.state_dict())
    truth = _gradients(copy.deepcopy(model).double(), inputs, grad_out, torch.float64)
    with strict_fp32(), cudnn_tf32(allow_tf32):
        yard = _gradients(model, inputs, grad_out, torch.float32)
    got = _gradients(fused, inputs, grad_out, torch.float32)
    rows = []
    for name, want in truth.items():
        if want is None:
            continue
        row = {"tensor": name, "truth_norm": want.norm().item()}
        if got.get(name) is None:
            rows.append({**row, "passed": False})
            continue
        err, y = errors_vs(want, got[name]), errors_vs(want, yard[name])
        scale = max(1.0, want.abs().max().item())
        row.update(err, yardstick_rel_l2=y["rel_l2"], yardstick_max_abs=y["max_abs"],
                   limit_rel_l2=4 * y["rel_l2"] + 1e-7, limit_max_abs=10 * y["max_abs"] + 1e-6 * scale)
        row["passed"] = (err["rel_l2"] <= row["limit_rel_l2"] and err["max_abs"] <= row["limit_max_abs"]
                         and not err["nan_where_truth_finite"])
        rows.append(row)
    report = pd.DataFrame(rows).set_index("tensor")
    if raise_on_failure and not report.passed.all():
        raise ParityError(f"gradient parity failed:\n{report[~report.passed].to_string()}")
    return report


def _call(module: torch.nn.Module, inputs: Sequence[torch.Tensor], out_like: torch.Tensor | None):
    """Run a fused module; when it takes ``out=``, hand it a NaN-poisoned buffer and insist it is used."""
    if out_like is not None and "out" in inspect.signature(module.forward).parameters:
        poisoned = torch.full_like(out_like, float("nan"))
        result = module(*inputs, out=poisoned)
        if result.data_ptr() != poisoned.data_ptr():
            raise ParityError(f"{type(module).__name__} did not write into the out= buffer it was given")
        return result
    return module(*inputs)


def parity_check(model: torch.nn.Module, fused: Mapping[str, torch.nn.Module], inputs: Sequence[torch.Tensor],
                 *, compiled: Callable | None = None, tf32: Iterable[str] = (), kernelbench: bool = True,
                 case: str = "") -> pd.DataFrame:
    """One parity case: every contender's error against the float64 model, and its verdict.

    ``model`` is the unfused float32 reference (its weights are the case's weights); ``fused``
    maps names to modules holding the same weights; names in ``tf32`` are judged by the TF32
    criterion (rel-L2 <= 2e-3, only on unshifted inputs), the others by the fp32-accurate one.
    Returns one row per contender: max_abs, rel_l2, the limits, KernelBench's allclose vs eager,
    and ``passed`` (None for the reference rows, which are reported, not judged).
    """
    tf32 = set(tf32)
    with torch.no_grad():
        truth = copy.deepcopy(model).double()(*[x.double() for x in inputs])
        with strict_fp32():
            yardstick = model(*inputs)
        eager = model(*inputs)
        outs = {"eager (default flags)": eager, "yardstick (fp32, TF32 off)": yardstick}
        if compiled is not None:
            outs["torch.compile"] = compiled(*inputs)
        for name, module in fused.items():
            outs[name] = _call(module, inputs, eager)

    yard = errors_vs(truth, yardstick)
    truth_scale = max(1.0, truth.abs().max().item() if truth.numel() else 0.0)
    limit_rel = 4 * yard["rel_l2"] + 1e-7
    limit_abs = 10 * yard["max_abs"] + 1e-6 * truth_scale
    rows = []
    for name, out in outs.items():
        err = errors_vs(truth, out)
        row = {"case": case, "contender": name, **err, "limit_rel_l2": None, "limit_max_abs": None,
               "kernelbench_allclose": None, "passed": None}
        if out.shape != truth.shape:
            row.update(passed=False, mode="shape mismatch")
            rows.append(row)
            continue
        if kernelbench:
            row["kernelbench_allclose"] = bool(torch.allclose(out, eager, atol=1e-2, rtol=1e-2))
        if name in fused:
            if name in tf32:
                row.update(mode="tf32", limit_rel_l2=2e-3)
                passed = err["rel_l2"] <= 2e-3 if kernelbench else None  # not promised off [0, 1)
            else:
                row.update(mode="fp32", limit_rel_l2=limit_rel, limit_max_abs=limit_abs)
                passed = err["rel_l2"] <= limit_rel and err["max_abs"] <= limit_abs
            if passed is not None:
                passed = passed and not err["nan_where_truth_finite"]
                if kernelbench:
                    passed = passed and row["kernelbench_allclose"]
            row["passed"] = passed
        else:
            row["mode"] = "reference"
        rows.append(row)
    return pd.DataFrame(rows)


def parity_sweep(model: torch.nn.Module, fused: Mapping[str, torch.nn.Module],
                 make_inputs: Callable[[int], Sequence[torch.Tensor]], seeds: Iterable[int] = (0, 1, 2),
                 *, shifts: Iterable[float] = (0.0, 100.0), compiled: Callable | None = None,
                 tf32: Iterable[str] = (), raise_on_failure: bool = True) -> pd.DataFrame:
    """``parity_check`` over fresh weights and inputs for each seed, and each input shift.

    For each seed: ``randomize_parameters(model, seed)``, copy the weights into every fused
    module, draw ``make_inputs(seed)`` (expected in [0, 1)) and check it as drawn and shifted by
    each of ``shifts`` (KernelBench's allclose applies to the unshifted inputs only). Raises
    ParityError listing the failing rows when a judged contender fails, unless told not to.
    """
    tables = []
    for seed in seeds:
        randomize_parameters(model, seed)
        for module in fused.values():
            module.load_state_dict(model.state_dict())
        inputs = make_inputs(seed)
        for shift in shifts:
            shifted = [x + shift for x in inputs] if shift else list(inputs)
            tables.append(parity_check(model, fused, shifted, compiled=compiled, tf32=tf32,
                                       kernelbench=(shift == 0), case=f"seed {seed}, input +{shift:g}"))
    report = pd.concat(tables, ignore_index=True)
    failed = report[report["passed"] == False]  # noqa: E712  (None means not judged)
    if raise_on_failure and len(failed):
        raise ParityError("parity failed:\n" + failed.to_string())
    return report


def parity_summary(report: pd.DataFrame) -> pd.DataFrame:
    """Worst case per contender: max of max_abs and rel_l2, and whether every judged case passed."""
    judged = report.assign(passed_num=report["passed"].map({True: 1, False: 0}))
    return judged.groupby("contender", sort=False).agg(
        mode=("mode", "first"), worst_max_abs=("max_abs", "max"), worst_rel_l2=("rel_l2", "max"),
        kernelbench_allclose=("kernelbench_allclose", lambda s: None if s.isna().all() else bool(s.dropna().all())),
        all_passed=("passed_num", lambda s: None if s.isna().all() else bool(s.min() == 1)),
        cases=("case", "nunique"))


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------

_FLUSH_BUFFER: dict[int, torch.Tensor] = {}


def flush_l2() -> None:
    """Evict the L2 cache by writing a buffer several times its size (on the current stream)."""
    device = torch.cuda.current_device()
    if device not in _FLUSH_BUFFER:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 * 2**20)
        _FLUSH_BUFFER[device] = torch.empty(max(4 * l2, 256 * 2**20), dtype=torch.int8, device="cuda")
    _FLUSH_BUFFER[device].zero_()


def benchmark(contenders: Mapping[str, Callable[[], object]], *, runs: int = 200, warmup: int = 10,
              flush: bool = True, queue_ahead_us: float = 0.0) -> pd.DataFrame | None:
    """Time each contender with CUDA events: ``runs`` runs each after ``warmup``, L2 flushed before each.

    Contenders are interleaved (run i of every contender before run i + 1 of any, in rotating
    order) so drift in clocks or temperature hits all alike. The time is from a start event to an
    end event on the GPU, so it includes host overhead wherever the host is slower than the GPU
    (the GPU then waits for launches). ``queue_ahead_us`` > 0 keeps the GPU busy that long
    (``torch.cuda._sleep``, at least that long at clocks up to 2 GHz) after the flush and before
    the start event, so that a contender's launches are queued before its start event runs: the
    time is then the GPU's alone (for a contender that does not synchronize). Returns a DataFrame indexed by
    contender with median_ms, p10_ms, p90_ms, min_ms, mean_ms, runs and speedup_vs_first
    (median of the first contender over each median); the per-run samples are in
    ``df.attrs['samples']``. Without a GPU it prints that and returns None.
    """
    if not gpu_available():
        print("No CUDA GPU visible: nothing timed (the committed results/ hold the GPU measurements).")
        return None
    if runs < 100:
        raise ValueError(f"runs={runs}: use at least 100 runs for a median and a spread")
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    torch.cuda.synchronize()
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(runs)] for name in names}
    for i in range(runs):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            if flush:
                flush_l2()
            if queue_ahead_us > 0:
                torch.cuda._sleep(int(queue_ahead_us * 2000))  # cycles: >= queue_ahead_us at <= 2 GHz
            start, end = events[name][i]
            start.record()
            contenders[name]()
            end.record()
    torch.cuda.synchronize()
    samples = pd.DataFrame([{"contender": name, "run": i, "ms": s.elapsed_time(e)}
                            for name in names for i, (s, e) in enumerate(events[name])])
    grouped = samples.groupby("contender", sort=False)["ms"]
    summary = pd.DataFrame({
        "median_ms": grouped.median(), "p10_ms": grouped.quantile(0.1), "p90_ms": grouped.quantile(0.9),
        "min_ms": grouped.min(), "mean_ms": grouped.mean(), "runs": grouped.size()}).loc[names]
    summary["speedup_vs_first"] = summary["median_ms"].iloc[0] / summary["median_ms"]
    summary.index.name = "contender"
    summary.attrs["samples"] = samples
    return summary


def check_kernelbench_allclose(outputs: Mapping[str, torch.Tensor], reference: torch.Tensor, where: str,
                               reference_name: str = "the reference") -> None:
    """Raise ParityError naming every output in ``outputs`` whose shape differs from ``reference``'s or that
    fails KernelBench's criterion against it (``torch.allclose``, atol = rtol = 1e-2, NaN unequal).

    A guard before timing, so that a time never stands for a wrong answer; the parity proof is
    ``parity_sweep`` against float64. ``where`` starts the message (e.g. "batch 4")."""
    wrong = [name for name, out in outputs.items()
             if out.shape != reference.shape or not torch.allclose(out, reference, atol=1e-2, rtol=1e-2)]
    if wrong:
        raise ParityError(f"{where}: {wrong} differ from {reference_name} beyond atol = rtol = 1e-2")


def batch_sweep(contenders: Mapping[str, Callable[[torch.Tensor], torch.Tensor]],
                make_input: Callable[[int], torch.Tensor], batches: Sequence[int], *,
                runs: int = 100, queue_ahead_us: float = 500.0) -> pd.DataFrame | None:
    """Time every contender at each batch size: one interleaved ``benchmark`` per size, L2 flushed.

    At small batch sizes a forward's host overhead (Python, dispatch, launches) can exceed its GPU
    time, and timing it would measure the host. So each run is queued behind ``queue_ahead_us`` of
    GPU sleep (see ``benchmark``) and the sweep reports GPU time: what the contenders cost the card,
    not the latency a given host adds.

    ``contenders`` maps names to callables taking the input; the first is the reference.
    ``make_input(batch)`` draws a fresh input of that batch size. Before a size is timed, each
    contender's output is checked against the reference's with KernelBench's criterion
    (``torch.allclose``, atol = rtol = 1e-2, NaN unequal): a contender that fails raises
    ParityError, since its time would mean nothing. (This is a guard, not the parity proof: that
    is ``parity_sweep`` against float64.) Returns a long DataFrame, one row per (batch,
    contender): median_ms, p10_ms, p90_ms, us_per_sample (median, microseconds) and
    speedup_vs_first; every run's time is in ``df.attrs['samples']`` (batch, contender, run, ms).
    Without a GPU it prints that and returns None.
    """
    if not gpu_available():
        print("No CUDA GPU visible: nothing timed (the committed results/ hold the GPU measurements).")
        return None
    names = list(contenders)
    tables, samples = [], []
    for batch in batches:
        x = make_input(batch)
        with torch.no_grad():
            outs = {name: fn(x) for name, fn in contenders.items()}
        check_kernelbench_allclose(outs, outs[names[0]], f"batch {batch}", names[0])
        del outs
        with torch.no_grad():
            summary = benchmark({name: (lambda fn=fn: fn(x)) for name, fn in contenders.items()}, runs=runs,
                                queue_ahead_us=queue_ahead_us)
        runs_of_size = summary.attrs.pop("samples")  # (pd.concat compares attrs, and cannot compare DataFrames)
        samples.append(runs_of_size.assign(batch=batch)[["batch", "contender", "run", "ms"]])
        summary = summary.reset_index()
        summary.insert(0, "batch", batch)
        summary["us_per_sample"] = summary["median_ms"] * 1e3 / batch
        tables.append(summary[["batch", "contender", "median_ms", "p10_ms", "p90_ms", "us_per_sample",
                               "speedup_vs_first"]])
    sweep = pd.concat(tables, ignore_index=True)
    sweep.attrs["samples"] = pd.concat(samples, ignore_index=True)
    return sweep


_FASTEST: dict = {}
FASTEST_MARGIN = 0.05  # another candidate must beat the first by more than this fraction


def fastest(key, candidates: Mapping[str, Callable[[], object]]) -> tuple[str, dict[str, float]]:
    """Which of ``candidates`` runs fastest for ``key``: measured on first use, then remembered.

    The idea of cuDNN's benchmark mode, for a module that has more than one way to compute the same
    thing (a fused kernel, or PyTorch's conv and a fused tail) and no model of which is faster where.
    ``candidates`` maps names to no-argument callables that launch the work on the current CUDA
    stream; ``key`` is anything hashable that fixes their cost (shapes, options, device). The first
    candidate is the default: another is chosen only when its median is more than ``FASTEST_MARGIN``
    below the default's, so near-ties do not flip between processes.

    Timed as the notebooks time: ``benchmark``, 100 interleaved runs each after 3 warm-ups, under
    ``torch.no_grad()``, L2 flushed before each run, each run queued behind 300 µs of GPU sleep (GPU
    time: what each costs the card, without the launch overhead of this host). The flush matters:
    without it a kernel's code and data stay in L2 between runs, and on an H100 the unflushed choice
    missed the faster path by 9-28 % on 8 of 124 small (configuration, mode) pairs, the flushed one on
    1 (results/model_*/NOTES.md, "ModelNew's default"). The flush buffer (``flush_l2``, 256 MiB) is handed back to PyTorch's caching allocator
    afterwards unless it existed before. So the first call for a key costs about
    100 × (0.4 ms + the candidates' times) of GPU time, and the buffer's allocation.

    Returns (name, {name: median ms}). Nothing is timed, and the default comes back with an empty
    dict and is not remembered, without a GPU, while a CUDA graph is being captured or while
    ``torch.compile`` traces.
    """
    names = list(candidates)
    if not names:
        raise ValueError("fastest: no candidates")
    if key in _FASTEST:
        return _FASTEST[key]
    if not gpu_available() or torch.cuda.is_current_stream_capturing() or torch.compiler.is_compiling():
        return names[0], {}
    device = torch.cuda.current_device()
    had_flush_buffer = device in _FLUSH_BUFFER
    try:
        with torch.no_grad():
            summary = benchmark(candidates, runs=100, warmup=3, flush=True, queue_ahead_us=300.0)
    finally:
        if not had_flush_buffer:
            _FLUSH_BUFFER.pop(device, None)
    times = {name: float(summary.loc[name, "median_ms"]) for name in names}
    best = min(names, key=times.get)
    if times[best] >= (1 - FASTEST_MARGIN) * times[names[0]]:
        best = names[0]
    _FASTEST[key] = (best, times)
    return _FASTEST[key]


_AUTO_PATHS: dict = {}  # auto_path's answers: (key, conv_bytes, cap_bytes, measurable) -> (fastest()'s entry, answer)


def auto_path(key, candidates: Callable[[], Mapping[str, Callable[[], object]]], *, conv_bytes: int,
              cap_bytes: int, measurable: bool = True) -> str:
    """Which path a ``ModelNew(variant="auto")`` runs, and why, as the string its ``path(x)`` returns.

    ``candidates()`` returns the mapping ``fastest`` takes: the fused default first (e.g. "v3"), then the path
    through PyTorch's conv (e.g. "v1"), each a no-argument callable. It is called only when the answer for this key
    is not known yet, so a forward whose answer is known builds none of them. ``conv_bytes`` is what that conv's
    output would take for this input (bytes). Above ``cap_bytes`` nothing is timed, so that the choice never
    allocates a tensor that large, and the default runs. ``measurable`` False (no sample, or a shape the forward
    refuses) also keeps the default untimed. Otherwise ``fastest(key, candidates())`` decides: about
    100 x (0.4 ms + both paths' times), L2 flushed, on the first forward of each key (input shape, configuration,
    mode), which then takes up to about a second near the cap. The answer is remembered (as long as ``fastest``
    remembers its measurement), so later forwards cost a dictionary lookup. The models' docstrings say what they
    measured.

    Returns "<name> (auto: ...)"; the first two characters name the path, e.g.
    "v3 (auto: measured v3 12.3 us, v1 20.1 us)" or
    "v3 (auto: v1's conv output would take 98.4 MiB, over 16 MiB: not measured)".
    """
    memo_key = (key, conv_bytes, cap_bytes, measurable)
    known = _AUTO_PATHS.get(memo_key)
    if known is not None and (known[0] is None or _FASTEST.get(key) is known[0]):
        return known[1]
    candidates = candidates()
    default, other = list(candidates)[:2]
    if conv_bytes > cap_bytes:
        answer = (f"{default} (auto: {other}'s conv output would take {conv_bytes / 2**20:.1f} MiB, over "
                  f"{cap_bytes / 2**20:.0f} MiB: not measured)")
    elif not measurable:
        answer = f"{default} (auto: nothing to measure)"
    else:
        name, ms = fastest(key, candidates)
        if not ms:  # nothing remembered: a later forward measures
            return f"{name} (auto: not measured: no GPU, or a CUDA graph capture or torch.compile trace in progress)"
        answer = f"{name} (auto: measured " + ", ".join(f"{n} {1e3 * t:.1f} us" for n, t in ms.items()) + ")"
    _AUTO_PATHS[memo_key] = (_FASTEST.get(key) if conv_bytes <= cap_bytes and measurable else None, answer)
    return answer


def time_auto_choice(model: torch.nn.Module, make_fused: Callable[[str, bool], torch.nn.Module], x: torch.Tensor,
                     variants: Sequence[str]) -> pd.DataFrame:
    """What a ``ModelNew(variant="auto")`` chose for input ``x``, in each accuracy mode, against both choices timed.

    ``make_fused(variant, allow_tf32)`` builds a fused module; ``variants`` are the two that "auto"
    chooses between, its default first (e.g. ("v3", "v1")). For each mode (fp32-accurate, TF32), the
    "auto" module's ``path(x)`` (its first call for this shape measures, see ``fastest``); every
    module's output must match ``model``'s within KernelBench's allclose (atol = rtol = 1e-2), else
    ParityError. Then one interleaved ``benchmark`` of the two variants in both modes: GPU time (300 µs
    queued ahead), L2 flushed, 100 runs. "auto" runs the code of the variant it chose, so its time is
    that variant's: timed as a contender of its own, it ran right after its twin and measured up to
    31 % faster than the same kernel (its code still cached, the likely cause).

    Returns one row per mode: mode, auto chose, ``TF32 products`` (whether the modules of that mode
    multiply in TF32: False in the fp32-accurate mode; in the TF32 mode the "auto" module's
    ``tf32_products()`` where it has one, which can switch to the fp32-accurate products),
    ``<variant> us`` (median, µs) for each, ``chosen us`` and ``chosen / faster``. Empty where the
    default variant does not run its own path for ``x`` (outside its envelope: nothing to choose).
    Without a GPU, None.
    """
    if not gpu_available():
        print("No CUDA GPU visible: nothing timed (the committed results/ hold the GPU measurements).")
        return None
    contenders, rows = {}, []
    for mode, tf32 in (("fp32", False), ("TF32", True)):
        modules = {v: make_fused(v, tf32).cuda() for v in (*variants, "auto")}
        for module in modules.values():
            module.load_state_dict(model.state_dict())
        if modules[variants[0]].path(x) != variants[0]:
            return pd.DataFrame()
        chose = modules["auto"].path(x)[:2]
        with torch.no_grad():
            check_kernelbench_allclose({f"{v} ({mode})": module(x) for v, module in modules.items()}, model(x),
                                       "time_auto_choice", "the model")
        contenders.update({f"{v} {mode}": (lambda m=modules[v]: m(x)) for v in variants})
        products = getattr(modules["auto"], "tf32_products", lambda x: tf32)(x)
        rows.append({"mode": mode, "auto chose": chose, "TF32 products": bool(tf32 and products)})
    with torch.no_grad():
        us = benchmark(contenders, runs=100, queue_ahead_us=300.0)["median_ms"] * 1e3
    for row in rows:
        times = {v: float(us[f"{v} {row['mode']}"]) for v in variants}
        row.update({f"{v} us": t for v, t in times.items()})
        row["chosen us"] = times[row["auto chose"]]
        row["chosen / faster"] = row["chosen us"] / min(times.values())
    return pd.DataFrame(rows)


def auto_choice_summary(table: pd.DataFrame, variants: Sequence[str]) -> pd.DataFrame:
    """Per mode, from ``time_auto_choice`` rows: how often "auto" chose the other variant and how often that
    one was the faster, the summed times (ms) of each variant always, of the faster each time and of
    "auto", how far "auto"'s choice fell behind the faster (worst ratio, count within 1.07), and where the
    table has the column, in how many configurations the modules multiplied in TF32."""
    default, other = variants
    columns = {}
    for mode, rows in table.groupby("mode", sort=False):
        faster = rows[[f"{v} us" for v in variants]].min(axis=1)
        columns[mode] = pd.Series({
            "configurations": len(rows), f"auto chose {other}": int((rows["auto chose"] == other).sum()),
            f"{other} the faster": int((rows[f"{other} us"] < rows[f"{default} us"]).sum()),
            f"sum, {default} always (ms)": rows[f"{default} us"].sum() / 1e3,
            f"sum, {other} always (ms)": rows[f"{other} us"].sum() / 1e3,
            "sum, the faster each time (ms)": faster.sum() / 1e3, "sum, auto (ms)": rows["chosen us"].sum() / 1e3,
            "auto / the faster, worst": rows["chosen / faster"].max(),
            "auto within 1.07 of the faster": int((rows["chosen / faster"] <= 1.07).sum())})
        if "TF32 products" in rows:
            columns[mode]["with TF32 products"] = int(rows["TF32 products"].sum())
    return pd.DataFrame(columns)


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    fn()
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(pd.Series(times).median())


def measure_ceilings() -> dict | None:
    """Measure this GPU's ceilings: copy bandwidth (TB/s, bytes read + written) and GEMM rates.

    ``fp32_TFLOPs`` is an 8192^3 float32 matmul with TF32 off (the FFMA rate), ``tf32_TFLOPs``
    the same with TF32 on, ``fp16_TFLOPs`` the same in float16 (the rate of FP16 tensor-core
    products, which some fp32-accurate kernels split their operands into). Takes a few seconds;
    returns None without a GPU.
    """
    if not gpu_available():
        return None
    n = 1 << 28  # 1 GiB of float32
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda: dst.copy_(src), 20)
    del src, dst
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    flops = 2 * 8192**3
    with strict_fp32():
        fp32_ms = _median_ms(lambda: a @ b, 10)
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        tf32_ms = _median_ms(lambda: a @ b, 10)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    a16, b16 = a.half(), b.half()
    fp16_ms = _median_ms(lambda: a16 @ b16, 10)
    return {"gpu": torch.cuda.get_device_name(), "copy_TBps": 2 * 4 * n / copy_ms / 1e9,
            "fp32_TFLOPs": flops / fp32_ms / 1e9, "tf32_TFLOPs": flops / tf32_ms / 1e9,
            "fp16_TFLOPs": flops / fp16_ms / 1e9}


# ---------------------------------------------------------------------------------------------
# Results and plots
# ---------------------------------------------------------------------------------------------

def problem_size(module) -> dict:
    """Sizes behind a reference model's floors at its KernelBench size, from shapes alone.

    ``module`` is a kernels/model_*.py module (KernelBench convention). Its ``Model`` runs on the
    meta device (no memory, no GPU). Returns ``x_bytes`` and ``out_bytes`` (float32 input and
    output, bytes) and ``conv_flops``, 2 FLOPs (a multiply and an add) per product of the model's
    one convolution: 2 * outputs * C_in / groups * taps for a conv, 2 * inputs * C_out / groups *
    taps for a transposed conv (each input meets every tap once).
    """
    import math

    import torch.nn as nn

    shapes: dict = {}
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        convs = [m for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)]
        if len(convs) != 1:
            raise ValueError(f"problem_size: expected one convolution in {module.__name__}.Model, found {len(convs)}")
        conv = convs[0]
        conv.register_forward_hook(lambda m, args, y: shapes.update(x=args[0].shape, y=y.shape))
        inputs = module.get_inputs()
        out = model(*inputs)
    taps = math.prod(conv.kernel_size)
    if conv.transposed:
        flops = 2 * math.prod(shapes["x"]) * (conv.out_channels // conv.groups) * taps
    else:
        flops = 2 * math.prod(shapes["y"]) * (conv.in_channels // conv.groups) * taps
    return {"x_bytes": sum(x.numel() * x.element_size() for x in inputs),
            "out_bytes": out.numel() * out.element_size(), "conv_flops": flops}


def save_results(stem: str, env: Mapping, **tables: pd.DataFrame | Mapping) -> Path:
    """Write ``results/<stem>/<name>.csv`` for each DataFrame (and ``<name>_samples.csv`` for
    per-run timing samples), ``<name>.json`` for each dict, and ``env.json``. Returns the folder."""
    folder = RESULTS_DIR / stem
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "env.json").write_text(json.dumps(dict(env), indent=1, default=str) + "\n")
    for name, table in tables.items():
        if isinstance(table, pd.DataFrame):
            table.to_csv(folder / f"{name}.csv")
            if "samples" in table.attrs:
                table.attrs["samples"].to_csv(folder / f"{name}_samples.csv", index=False)
        else:
            (folder / f"{name}.json").write_text(json.dumps(dict(table), indent=1, default=str) + "\n")
    return folder


def load_results(stem: str, root: Path | str | None = None) -> dict:
    """Read back what ``save_results`` wrote: {'env': dict, '<name>': DataFrame or dict, ...}.

    ``root``: the folder holding ``<stem>/``; by default ``RESULTS_DIR`` (where this process writes).
    """
    folder = (Path(root) if root is not None else RESULTS_DIR) / stem
    if not folder.exists():
        raise FileNotFoundError(f"no committed results in {folder}: run the notebook on a GPU first")
    out: dict = {}
    for path in sorted(folder.glob("*.json")):
        out[path.stem] = json.loads(path.read_text())
    for path in sorted(folder.glob("*.csv")):
        if not path.stem.endswith("_samples"):
            out[path.stem] = pd.read_csv(path, index_col=0)
    return out


def save_figure(fig, stem: str, name: str) -> None:
    """Save a matplotlib figure as results/<stem>/<name>.png (150 dpi) and .svg."""
    folder = RESULTS_DIR / stem
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / f"{name}.png", dpi=150, bbox_inches="tight")
    fig.savefig(folder / f"{name}.svg", bbox_inches="tight")


def _titled_and_saved(fig, title: str, env: Mapping, save_stem: str | None, name: str):
    """A figure's title over its run stamp; saved as results/<save_stem>/<name>.png and .svg when asked."""
    fig.suptitle(f"{title}\n{stamp(env)}", fontsize=10)
    fig.tight_layout()
    if save_stem:
        save_figure(fig, save_stem, name)
    return fig


def plot_timings(summary: pd.DataFrame, env: Mapping, title: str, save_stem: str | None = None,
                 baseline: str | None = None):
    """Two bar charts: median time (ms, whiskers p10-p90) and speedup over ``baseline``.

    ``baseline`` defaults to the first row. Rows named "part: ..." (leading spaces allowed) are
    components timed alone, not whole forwards: they get a time bar but no speedup. Stamped with
    GPU, torch, CUDA, commit and date; saved as results/<save_stem>/timing.png and .svg when
    ``save_stem`` is given. Returns the figure.
    """
    import matplotlib.pyplot as plt

    baseline = baseline or summary.index[0]
    names = list(summary.index)
    med = summary["median_ms"]
    err = [med - summary["p10_ms"], summary["p90_ms"] - med]
    is_part = [name.strip().startswith("part:") for name in names]
    speedup = (summary.loc[baseline, "median_ms"] / med).where([not p for p in is_part], 0.0)
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(12, 0.55 * len(names) + 2.2))
    ax_t.barh(names, med, xerr=err, color="tab:blue", capsize=3)
    ax_t.set_xlabel("median time (ms), whiskers p10-p90")
    for y, v in enumerate(med):
        ax_t.annotate(f"{v:.3f}", (v, y), xytext=(4, 0), textcoords="offset points", va="center",
                      fontsize=8)
    ax_s.barh(names, speedup, color="tab:green")
    ax_s.axvline(1.0, color="grey", lw=0.8)
    ax_s.set_xlabel(f"speedup over {baseline} (x)")
    ax_s.set_yticklabels([])
    for y, (v, part) in enumerate(zip(speedup, is_part)):
        ax_s.annotate("part, timed alone" if part else f"{v:.2f}x", (v, y), xytext=(4, 0),
                      textcoords="offset points", va="center", fontsize=8, color="grey" if part else "black")
    for ax in (ax_t, ax_s):
        ax.invert_yaxis()
        ax.margins(x=0.18)
    return _titled_and_saved(fig, title, env, save_stem, "timing")


def plot_batch_sweep(sweep: pd.DataFrame, flops_per_sample: float, ceilings: Mapping, env: Mapping,
                     title: str, save_stem: str | None = None):
    """``batch_sweep``'s table as two panels over the batch size (log axes).

    Left: median time per sample (microseconds), whiskers p10-p90. Right: the conv's achieved rate,
    ``flops_per_sample`` x batch / median (TFLOP/s of the model's conv, whatever a contender
    actually multiplies), with the card's measured FP32 FFMA and TF32 matmul rates from
    ``measure_ceilings`` drawn as horizontal lines. Saved as results/<save_stem>/batch_sweep.png
    and .svg when ``save_stem`` is given. Returns the figure.
    """
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(13, 5))
    for i, (name, rows) in enumerate(sweep.groupby("contender", sort=False)):
        rows = rows.sort_values("batch")
        per_sample = 1e3 / rows["batch"]
        err = [(rows["median_ms"] - rows["p10_ms"]) * per_sample, (rows["p90_ms"] - rows["median_ms"]) * per_sample]
        style = dict(color=f"C{i}", marker="o", ms=4, label=name.strip())
        ax_t.errorbar(rows["batch"], rows["us_per_sample"], yerr=err, capsize=2, **style)
        ax_r.plot(rows["batch"], flops_per_sample * rows["batch"] / (rows["median_ms"] * 1e-3) / 1e12, **style)
    for key, label, ls in (("tf32_TFLOPs", "TF32 matmul", "--"), ("fp32_TFLOPs", "FP32 FFMA matmul", ":")):
        if key in ceilings:
            ax_r.axhline(ceilings[key], color="grey", ls=ls, lw=1)
            ax_r.annotate(f"{label}, measured: {ceilings[key]:.0f} TFLOP/s", (0.99, ceilings[key]),
                          xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points",
                          ha="right", fontsize=8, color="grey")
    ax_t.set_ylabel("median time per sample (µs), whiskers p10-p90")
    ax_r.set_ylabel("conv FLOPs / median time (TFLOP/s)")
    batches = sorted(sweep["batch"].unique())
    for ax in (ax_t, ax_r):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.grid(True, which="major", alpha=0.3)
    ax_t.legend(fontsize=8)
    return _titled_and_saved(fig, title, env, save_stem, "batch_sweep")


def plot_roofline(summary: pd.DataFrame, floors_ms: Mapping[str, float], env: Mapping, title: str,
                  save_stem: str | None = None):
    """Each contender's median time (ms, log scale) against named floors drawn as vertical lines.

    ``floors_ms`` maps a label (e.g. 'bytes: 31.6 MB at 3.0 TB/s') to the time that floor allows.
    Saved as results/<save_stem>/roofline.png and .svg when ``save_stem`` is given.
    """
    import matplotlib.pyplot as plt

    names = list(summary.index)
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(names) + 2.2))
    ax.barh(names, summary["median_ms"], color="tab:blue")
    styles = ["--", ":", "-.", (0, (5, 1, 1, 1))]
    for i, (label, ms) in enumerate(floors_ms.items()):
        ax.axvline(ms, color=f"C{i + 1}", ls=styles[i % len(styles)], label=f"{label}: {ms:.4f} ms")
    for y, v in enumerate(summary["median_ms"]):
        ax.annotate(f"{v:.3f} ms", (v, y), xytext=(4, 0), textcoords="offset points", va="center",
                    fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("median time (ms, log scale)")
    ax.invert_yaxis()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)
    ax.set_title(f"{title}\n{stamp(env)}", fontsize=10)
    fig.tight_layout()
    if save_stem:
        save_figure(fig, save_stem, "roofline")
    return fig
