"""Probe (not a test): the throughput of mma.sync on this GPU, m16n8k8 TF32 against m16n8k16 FP16 and BF16.

    python scripts/probes/mma_sync_rate.py

Prints TFLOP/s and nanoseconds per mma per warp scheduler for 4 or 8 independent chains per warp and 16 or 32
warps per SM, one block per SM, every SM. The rate that no longer rises with chains or warps is the tensor cores'
rate for mma.sync: results/model_a/NOTES.md (fifth round) compares model A's kernel against it.
"""
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

ext = load("mma_sync_rate_probe", [str(Path(__file__).with_suffix(".cu"))],
           extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"], verbose=False)

sms = torch.cuda.get_device_properties(0).multi_processor_count
print(torch.cuda.get_device_name(0), f"({sms} SMs)")
out = torch.empty(sms * 32 * 32, device="cuda")
iters = 4096
for kind, name, k in ((0, "m16n8k8 TF32", 8), (1, "m16n8k16 FP16", 16), (2, "m16n8k16 BF16", 16)):
    for chains, warps in ((4, 16), (8, 16), (8, 32)):
        ext.run(out, kind, chains, sms, warps, 16)  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        ext.run(out, kind, chains, sms, warps, iters)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end)
        mmas = sms * warps * chains * iters
        tflops = mmas * 2 * 16 * 8 * k / (ms * 1e-3) / 1e12
        ns_per_mma = ms * 1e6 / (mmas / (sms * 4))  # per warp scheduler (4 per SM)
        print(f"{name:14s} {chains} chains x {warps:2d} warps/SM: {tflops:6.1f} TFLOP/s, {ns_per_mma:.2f} ns per mma per scheduler")
