"""Probe (not a test, CPU only): model A's TF32 error emulated in float64, beside ``tf32_error_estimate``.

    PYTHONPATH=. python scripts/probes/model_a_tf32_emulation.py [seeds]

For each configuration and seed: the unfused model in float64 with fresh weights (``helpers.randomize_parameters``:
one multiplier 0, one negative) on inputs in [0, 1), against the same model on TF32 operands (weights rounded to
nearest, inputs truncated, as the v3 kernel's tensor cores take them; products and sums in float64). Prints, per
configuration, how many seeds miss PARITY.md's TF32 bar (relative L2 > 2e-3), how many of those the estimate would
have caught (> ``TF32_ERROR_BUDGET``), and how many seeds it switches to the fp32-accurate products. The CUDA draws
of the fuzz cannot be replayed on the CPU, so these are other weights and inputs of the same configurations.
"""
import sys

import torch

import helpers
from kernels import model_a_conv3d_instnorm_clamp_max as A
from tf32_emulation import estimate_summary, tf32_operand_error  # (scripts/probes, this script's folder)


CONFIGS = [  # name, init, input shape
    ("fuzz seed 97002588", [2, 5, 2, (5, 1, 1, 1), -0.0105, 0.0586], (3, 2, 19, 10, 26)),
    ("fuzz seed 9306011 (smaller input)", [4, 3, 5, (3, 1, 1, 1), -0.006, 0.83], (1, 4, 9, 9, 9)),
    ("fuzz seed 71001503", [4, 2, 5, (2, 1, 1, 1), -0.0165, 1.10], (5, 4, 17, 13, 15)),
    ("16 channels, [-1, 1] (KernelBench's)", [3, 16, 3, (16, 1, 1, 1), -1.0, 1.0], (2, 3, 10, 18, 18)),
    ("3 channels, [-1, 1]", [4, 3, 5, (3, 1, 1, 1), -1.0, 1.0], (1, 4, 9, 9, 9)),
    ("2 channels, [-0.3, 0.5]", [3, 2, 3, (2, 1, 1, 1), -0.3, 0.5], (2, 3, 8, 12, 12)),
]

if __name__ == "__main__":
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    for name, init, shape in CONFIGS:
        model = A.Model(*init).double()
        rows = []
        for seed in range(seeds):
            helpers.randomize_parameters(model, seed)
            torch.manual_seed(seed + 12345)
            x = torch.rand(shape, dtype=torch.float64)
            error, _ = tf32_operand_error(model, model.conv.weight, x, truncate_input=True)
            rows.append((error, A.tf32_error_estimate(model.multiplier, init[4], init[5])))
        print(estimate_summary(name, rows, A.TF32_ERROR_BUDGET), flush=True)
