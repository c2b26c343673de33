"""Probe (not a test, CPU only): model B's TF32 error emulated in float64, beside ``tf32_error_estimate``.

    PYTHONPATH=. python scripts/probes/model_b_tf32_emulation.py [seeds [first seed]]

For each configuration and seed: the unfused model in float64 with fresh weights (``helpers.randomize_parameters``:
GroupNorm weight and bias and the scale N(0, 1), each with one 0 and one negative element) on inputs in [0, 1),
against the same model on TF32 operands (input and conv weights rounded to nearest, ties away, as the v3 kernel's
relay and weight set-up hand them to the tensor cores; products and sums in float64). Prints, per configuration, how
many seeds miss PARITY.md's TF32 bar (relative L2 > 2e-3), how many of those the estimate would have caught
(> ``TF32_ERROR_BUDGET``), and how many seeds it switches to the fp32-accurate products. The fuzz's CUDA draws cannot
be replayed on the CPU, so these are other weights and inputs of the same configurations (the fuzz's seeds and
generators named; ``tests/test_gpu_model_b_v3.py`` replays the fuzz's own draws on a GPU).
"""
import sys

import torch

import helpers
from kernels import model_b_conv2d_groupnorm_pool as B
from tf32_emulation import estimate_summary, tf32_operand_error  # (scripts/probes, this script's folder)


CONFIGS = [  # name, init, input shape (the fuzz misses: scripts/fuzz_parity.py's draw for that seed)
    ("fuzz seed 34001668 (wide)", [8, 1, 1, 1, (1, 1, 1), 4, -0.3486, 0.00601], (1, 8, 10, 50)),
    ("fuzz seed 35008626 (wide)", [1, 10, 3, 2, (10, 1, 1), 2, -0.7273, 0.00239], (1, 1, 181, 162)),
    ("fuzz seed 69000978 (channels)", [1, 46, 1, 23, (46, 1, 1), 6, -0.2294, 0.00456], (3, 1, 32, 40)),
    ("fuzz seed 69501492 (wide)", [8, 6, 3, 1, (6, 1, 1), 3, -1.3443, 0.02815], (1, 8, 25, 22)),
    ("fuzz seed 82002709 (default)", [4, 8, 1, 4, (8, 1, 1), 8, -0.4241, -0.03625], (5, 4, 17, 104)),
    ("fuzz seed 92001739 (default)", [2, 3, 2, 1, (3, 1, 1), 7, -1.3275, 0.08718], (3, 2, 19, 124)),
    ("fuzz seed 99702113 (wide)", [3, 3, 1, 1, (3, 1, 1), 2, -0.001445, 1.5433], (9, 3, 111, 140)),
    ("KernelBench's configuration, [0, 1]", [8, 64, 3, 16, (64, 1, 1), 4, 0.0, 1.0], (1, 8, 64, 64)),
    ("first release, [-1, 1]", [3, 16, 3, 8, (16, 1, 1), 2, -1.0, 1.0], (2, 3, 32, 32)),
    ("3 channels, [-1, 1], pool 4", [4, 3, 3, 1, (3, 1, 1), 4, -1.0, 1.0], (2, 4, 30, 30)),
    ("4 channels, [-0.3, 0.5], pool 2", [3, 4, 1, 2, (4, 1, 1), 2, -0.3, 0.5], (2, 3, 24, 24)),
]


def run(seeds: int, first: int = 0, default_parameters: bool = False) -> None:
    for name, init, shape in CONFIGS:
        model = B.Model(*init).double()
        rows = []
        for seed in range(first, first + seeds):
            if default_parameters:  # nn.GroupNorm's and Model's own initialisation: gamma 1, beta 0, scale 1
                torch.manual_seed(seed)
                model.conv.reset_parameters()
            else:
                helpers.randomize_parameters(model, seed)
            torch.manual_seed(seed + 12345)
            x = torch.rand(shape, dtype=torch.float64)
            error, _ = tf32_operand_error(model, model.conv.weight, x)
            gn = model.group_norm
            rows.append((error, B.tf32_error_estimate(gn.weight, gn.bias, model.scale, init[5], init[6], init[7])))
        print(estimate_summary(name, rows, B.TF32_ERROR_BUDGET), flush=True)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    print(f"helpers.randomize_parameters draws, seeds {first} to {first + count - 1}:")
    run(count, first)
    print("default parameters (gamma 1, beta 0, scale 1):")
    run(count, first, default_parameters=True)
