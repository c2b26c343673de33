"""Probe (not a test, CPU only): model C's TF32 error emulated in float64, by the output's size.

    PYTHONPATH=. python scripts/probes/model_c_tf32_emulation.py [default|channels] [first seed] [count]

Draws configurations from the fuzz's generators for model C (``scripts/fuzz_parity.py``: the tests' generator, or
``--channels``'s), each with fresh weights (``helpers.randomize_parameters``: the multiplier N(0, 1) with one 0 and one
negative element) and inputs in [0, 1), and runs the unfused model in float64 against the same model on TF32 operands
(input and transposed-conv weights rounded to nearest, ties away, as the TF32 kernels hand them to the tensor cores;
products and sums in float64). Prints how many miss PARITY.md's TF32 bar (relative L2 > 2e-3) per band of output
size (N x C_out x pooled positions) and the misses themselves: the measurement behind ``TF32_MIN_OUTPUT_VALUES``
(results/model_c/NOTES.md, 2026-11-28). These are not the fuzz's own draws (its CUDA generator cannot be replayed on
the CPU); ``tests/test_gpu_model_c.py::test_tf32_mode_on_former_misses`` replays those on a GPU.
"""
import random
import sys
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import helpers  # noqa: E402
import test_gpu_model_c as TC  # noqa: E402  (the generators live beside the tests that use them)
from kernels import model_c_convtranspose3d_leaky_pool as C  # noqa: E402
from tf32_emulation import tf32_operand_error  # noqa: E402  (scripts/probes, this script's folder)

GENERATORS = {
    "default": TC._random_config,
    "channels": lambda rng: TC._draw_channels_config(rng, 3, [(1, 24), (25, 64)], [(1, 16), (17, 64)], 9, [1, 2, 3]),
}


def emulate(init, shape, seed: int) -> tuple[int, float]:
    """(output values, relative L2 of the model on TF32 operands against float64) for one draw."""
    model = C.Model(*init).double()
    helpers.randomize_parameters(model, seed)
    torch.manual_seed(seed + 12345)
    x = torch.rand(shape, dtype=torch.float64)
    error, values = tf32_operand_error(model, model.conv_transpose.weight, x)
    return values, error


def main(generator: str = "default", first: int = 50_000_000, count: int = 2000) -> None:
    torch.set_num_threads(1)
    rows = []
    for seed in range(first, first + count):
        init, shape = GENERATORS[generator](random.Random(seed))
        values, error = emulate(init, shape, seed)
        rows.append({"seed": seed, "c_in": init[0], "c_out": init[1], "k": init[2], "stride": init[3],
                     "input": shape, "values": values, "rel_l2": error})
    table = pd.DataFrame(rows)
    table["miss"] = table.rel_l2 > 2e-3
    bands = pd.cut(table["values"], [0, 64, 256, 1024, C.TF32_MIN_OUTPUT_VALUES, float("inf")], right=False)
    print(f"{generator} generator, seeds {first}..{first + count - 1}: "
          f"{int(table.miss.sum())} of {len(table)} over 2e-3")
    print(table.groupby(bands, observed=True).agg(configurations=("miss", "size"), misses=("miss", "sum"),
                                                  worst=("rel_l2", "max")).to_string())
    print(table[table.miss].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "default", *(int(a) for a in sys.argv[2:4]))
