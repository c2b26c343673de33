"""Parity of the fused models on fresh random configurations, on a CUDA GPU (a fuzz).

The GPU tests check 50 random configurations per model with fixed seeds. This draws as many more as
time allows, from the same generators (tests/test_gpu_model_*.py: sizes across each kernel's envelope
and outside it, kernel sizes, clamp bounds of either sign, batch 1, odd sizes; ``--wide`` adds larger
sizes for models A and B, ``--channels`` wider channel counts: model A's whole range, and for B and C
well past the tests' ranges), each with fresh weights and
inputs, and checks them as PARITY.md defines it (``helpers.parity_sweep``: the fp32-accurate and TF32
modes, inputs as drawn and shifted by +100 for A and B). Every failing case is printed with its seed;
replay one with ``--start SEED --count 1``.

A CUDA error is sticky (nothing more can run in the process): it is reported with its seed and the
script stops; resume with ``--start SEED+1``. Exit status 1 if any case failed.

    python scripts/fuzz_parity.py --model A --seconds 60 [--wide | --channels] [--start 0] [--count N]
    (--wide: models A and B; --channels: every model)
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402

import helpers  # noqa: E402
import test_gpu_model_a_v3 as TA  # noqa: E402  (the generators live beside the tests that use them)
import test_gpu_model_b_v3 as TB  # noqa: E402
import test_gpu_model_c as TC  # noqa: E402
from kernels import model_c_convtranspose3d_leaky_pool as C  # noqa: E402


def wide_a(rng: random.Random):
    """Model A, larger than the tests' generator: sides up to k + 40, batch up to 17, C_in up to 16."""
    return TA._draw_config(rng, [(1, 32), (1, 32), (33, 64)], [(1, 4), (5, 16)], [1, 2, 3, 7, 17], 40)


def channels_a(rng: random.Random):
    """Model A over the issue's whole channel range: C_in 1..64 and C_out 1..128, sides up to k + 16, batch up to 3
    (small samples, so that the float64 reference stays quick with 64 input channels)."""
    return TA._draw_config(rng, [(1, 32), (33, 128)], [(1, 16), (17, 64)], [1, 2, 3], 16)


def wide_b(rng: random.Random):
    """Model B: the tests' generator, half the time with H and W up to 150 larger."""
    init, shape = TB._random_config(rng)
    if rng.random() < 0.5:
        shape = (rng.choice([1, 2, 9]), shape[1], shape[2] + rng.randint(0, 150), shape[3] + rng.randint(0, 150))
    return init, shape


def channels_b(rng: random.Random):
    """Model B with more channels than the tests' generator: groups 1..32, C_out up to 256 (a multiple of the
    groups), C_in 1..32, kernels 1, 3, 5, 7, pools 1..16, sides up to k - 1 + pool + 40, batch up to 3. Where the
    input box and weights need more shared memory than the GPU gives a block (large C_in k^2), v2 runs."""
    return TB._draw_channels_config(rng, [(1, 8), (9, 32)], [(1, 12), (13, 32)], [(1, 8), (9, 16)], 40)


def channels_c(rng: random.Random):
    """Model C with more channels than the tests' generator: C_in 1..64 (partial 16-channel groups), C_out 1..64,
    kernel 1..5, stride 1..3, any valid padding and output padding, sides 1..9, batch up to 3."""
    return TC._draw_channels_config(rng, 3, [(1, 24), (25, 64)], [(1, 16), (17, 64)], 9, [1, 2, 3])


def suite(model: str, wide: bool, channels: bool = False):
    """(configuration generator, fused modules for an init, shifts, contenders judged in the TF32 mode)."""
    if model == "A":
        generate = channels_a if channels else wide_a if wide else TA._random_config
        return generate, TA._models, (0.0, 100.0), {"v3 tf32"}
    if model == "B":
        generate = channels_b if channels else wide_b if wide else TB._random_config
        return generate, TB._models, (0.0, 100.0), {"v3 tf32"}

    def models(init):  # model C: both modes of v3 beside v1 and v2
        model, fused = TC._models(init)
        fused["v3 tf32"] = C.ModelNew(*init, variant="v3", allow_tf32=True).cuda()
        return model, fused
    return (channels_c if channels else TC._random_config), models, (0.0,), {"v3 tf32"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("A", "B", "C"), required=True)
    parser.add_argument("--seconds", type=float, default=60.0, help="stop drawing after this long (s)")
    parser.add_argument("--count", type=int, default=None, help="stop after this many configurations")
    parser.add_argument("--start", type=int, default=1_000_000, help="seed of the first configuration")
    parser.add_argument("--wide", action="store_true", help="larger sizes (models A and B)")
    parser.add_argument("--channels", action="store_true",
                        help="more channels: A C_in 1..64, C_out 1..128; B C_in 1..32, C_out up to 256; C 1..64 each")
    args = parser.parse_args()
    if args.channels and args.wide:
        parser.error("--channels and --wide are separate generators: pick one")
    if not helpers.gpu_available():
        print("No CUDA GPU visible: the fuzz needs one.")
        return 0
    generate, models, shifts, tf32 = suite(args.model, args.wide, args.channels)
    start, count, failing, on_v3 = time.perf_counter(), 0, 0, 0
    while time.perf_counter() - start < args.seconds and (args.count is None or count < args.count):
        seed = args.start + count
        init, shape = generate(random.Random(seed))
        count += 1
        try:
            model, fused = models(init)
            x = torch.empty(shape, device="cuda")
            paths = {name: module.path(x) for name, module in fused.items() if name.startswith("v3")}  # "v3" or why not
            on_v3 += next(iter(paths.values())) == "v3"  # the first v3 contender (the fp32-accurate mode)
            report = helpers.parity_sweep(model, fused, lambda s: [torch.rand(shape, device="cuda")], seeds=(seed,),
                                          shifts=shifts, tf32=tf32, raise_on_failure=False)
        except Exception as error:  # an error where PyTorch succeeds is a failure too
            failing += 1
            text = str(error).splitlines()[0] if str(error) else ""
            print(f"ERROR seed {seed}: init {init}, input {shape}: {type(error).__name__}: {text}", flush=True)
            if "CUDA error" in str(error) or type(error).__name__ == "AcceleratorError":
                print(f"a CUDA error is sticky: stopping; resume with --start {seed + 1}")
                break
            continue
        bad = report[report["passed"] == False]  # noqa: E712  (None: not judged)
        if len(bad):
            failing += 1
            table = bad.to_string(float_format=lambda v: f"{v:.3g}")
            print(f"FAIL seed {seed}: init {init}, input {shape}, paths {paths}\n{table}", flush=True)
    kind = " (channels)" if args.channels else " (wide)" if args.wide else ""
    print(f"model {args.model}{kind}: {count} configurations from seed {args.start} ({on_v3} on the v3 path), "
          f"{failing} failing, {time.perf_counter() - start:.0f} s on {torch.cuda.get_device_name()}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
