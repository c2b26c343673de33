"""Shared by the models' TF32 emulation probes (CPU only): TF32 rounding, and a model's error on TF32 operands.

The probes (``model_{a,b,c}_tf32_emulation.py``) run a model in float64 against itself with its conv weights and
its input rounded to TF32, as the TF32 kernels hand them to the tensor cores (products and sums in float64).
"""
import torch


def tf32(t: torch.Tensor, truncate: bool = False) -> torch.Tensor:
    """t as TF32 (10 mantissa bits): rounded to nearest (ties away from zero), or truncated; returned in float64."""
    bits = t.float().view(torch.int32)
    if not truncate:
        bits = bits + 0x1000
    return (bits & ~0x1FFF).view(torch.float32).double()


def tf32_operand_error(model: torch.nn.Module, weight: torch.nn.Parameter, x: torch.Tensor,
                       truncate_input: bool = False) -> tuple[float, int]:
    """(relative L2 error, output values) of ``model`` (float64) on TF32 operands against the same model on ``x``:
    ``weight`` (its conv weight) rounded to nearest and ``x`` rounded, or truncated where the kernel truncates it.
    The error is 0 where the output is all zeros. ``weight`` is restored."""
    with torch.no_grad():
        truth = model(x)
        saved = weight.data.clone()
        weight.data = tf32(saved)
        try:
            emulated = model(tf32(x, truncate=truncate_input))
        finally:
            weight.data = saved
    norm = truth.norm()
    return ((emulated - truth).norm() / norm).item() if norm > 0 else 0.0, truth.numel()


def estimate_summary(name: str, rows: list[tuple[float, float]], budget: float) -> str:
    """One line for a configuration's (emulated error, estimate) pairs, one per seed: how many seeds miss
    PARITY.md's TF32 bar (2e-3), how many of those the estimate catches (> ``budget``), how many it switches."""
    misses = [estimate for error, estimate in rows if error > 2e-3]
    return (f"{name}: {len(misses)} of {len(rows)} seeds miss 2e-3 (worst {max(e for e, _ in rows):.2e}); "
            f"caught {sum(e > budget for e in misses)}; switched {sum(e > budget for _, e in rows)}; "
            f"estimate {min(e for _, e in rows):.2e}-{max(e for _, e in rows):.2e}")
