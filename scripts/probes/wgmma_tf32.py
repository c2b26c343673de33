"""Probe (not a test): wgmma TF32 correctness and rate vs mma.sync on an sm_90 GPU.

    python scripts/probes/wgmma_tf32.py

Prints the largest error of one m64n64 product over K = 72 against float64 (for both readings of the
descriptor's LBO/SBO: only the first is right) and the TFLOP/s of back-to-back wgmma m64n64k8 and
mma.sync m16n8k8 on fixed operands, for a few block shapes. See the .cu header for the recipe.
"""
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

ext = load("wgmma_tf32_probe", [str(Path(__file__).with_suffix(".cu"))], extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"], verbose=False)


def tf32(x):  # round to nearest at 10 mantissa bits
    i = x.view(torch.int32)
    return ((i + 0x1000) & -0x2000).view(torch.float32)


torch.manual_seed(0)
K = 72
A = tf32(torch.randn(64, K, device="cuda")); B = tf32(torch.randn(64, K, device="cuda"))
ref = (A.double() @ B.double().t())
for sel in (0, 1):
    D = ext.check(A, B, sel); torch.cuda.synchronize()
    print("lbo_sel", sel, "max err", (D.double() - ref).abs().max().item(), "ref max", ref.abs().max().item())
out = torch.empty(132 * 8 * 128, device="cuda")
for wg, threads, blocks_per_sm in ((True, 128, 1), (True, 128, 2), (True, 256, 1), (True, 256, 2), (False, 128, 2), (False, 256, 2), (False, 512, 1)):
    iters = 2000
    blocks = 132 * blocks_per_sm
    ext.rate(out, blocks, threads, 10, wg); torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record(); ext.rate(out, blocks, threads, iters, wg); e1.record(); torch.cuda.synchronize()
    ms = e0.elapsed_time(e1)
    warps = blocks * threads // 32
    flops = (warps // 4) * iters * 9 * (2 * 64 * 64 * 8) if wg else warps * iters * (9 * 2 * 8) * (2 * 16 * 8 * 8)
    print(f"{'wgmma' if wg else 'mma.sync'} threads {threads} blocks/SM {blocks_per_sm}: {flops / ms / 1e9:.1f} TFLOP/s")
