"""Probe (not a test): model A in two passes that recompute the conv (model_a_two_pass.cu) against v3.

    PYTHONPATH=. python scripts/probes/model_a_two_pass.py

Checks the probe against the float64 unfused model on six shapes inside its limits, at inputs in [0, 1) and
shifted by +100, beside the float32 yardstick and v3 in both modes; then times torch.compile, v3 (both modes) and
the probe (fp32, and the fast mode with registers capped for 2 and 3 CTAs per SM) at the KernelBench size in one
process, L2 flushed before every run, and prints each kernel's time from the profiler. Needs sm_90.
results/model_a/NOTES.md ("Two passes that recompute the conv") has its output on an H100.
"""
from pathlib import Path

import pandas as pd
import torch
from torch.utils.cpp_extension import load

import helpers
from kernels import model_a_conv3d_instnorm_clamp_max as A

probe = load("model_a_two_pass_probe", [str(Path(__file__).with_suffix(".cu"))],
             extra_cuda_cflags=["-O3", "-lineinfo", "-gencode=arch=compute_90a,code=sm_90a"], verbose=False)
print(torch.cuda.get_device_name(0), flush=True)


def run_probe(m, x, mode, out=None, stats=None):
    c = m.conv
    k = c.kernel_size[0]
    osz = [s - k + 1 for s in x.shape[2:]]
    if out is None:
        out = torch.full((x.shape[0], *osz), float("nan"), device="cuda")
    if stats is None:
        stats = torch.empty(x.shape[0] * osz[0] * c.out_channels * 3, device="cuda")
    tf32, minb = {"fp32": (False, 2), "fast2": (True, 2), "fast3": (True, 3)}[mode]
    return probe.forward(x, c.weight, m.multiplier, m.clamp_min, m.clamp_max, float(m.instance_norm.eps), tf32, out,
                      stats, minb)


shapes = [  # batch, c_in, c_out, (d, h, w), lo, hi
    (128, 3, 16, (16, 32, 32), -1.0, 1.0),
    (1, 3, 16, (16, 32, 32), -0.5, 2.0),
    (5, 2, 11, (9, 20, 32), -1.0, 1.0),
    (3, 1, 16, (7, 13, 16), 0.2, 0.9),
    (2, 3, 5, (4, 16, 64), -2.0, -0.1),
    (4, 3, 9, (5, 30, 32), 0.5, -0.5),
]
ok = True
rows = []
for i, (b, ci, co, dhw, lo, hi) in enumerate(shapes):
    m = A.Model(ci, co, 3, (co, 1, 1, 1), lo, hi).cuda()
    helpers.randomize_parameters(m, seed=200 + i)
    for shift in (0.0, 100.0):
        torch.manual_seed(300 + i)
        x = torch.rand(b, ci, *dhw, device="cuda") + shift
        with torch.no_grad():
            ref64 = m.double()(x.double())
            m.float()
            with helpers.strict_fp32():
                yard = m(x)
            outs = {"yardstick": yard}
            for mode in ("fp32", "fast2", "fast3"):
                outs[f"probe {mode}"] = run_probe(m, x, mode)
            for tf32 in (False, True):
                f = A.ModelNew(ci, co, 3, (co, 1, 1, 1), lo, hi, allow_tf32=tf32, variant="v3").cuda()
                f.load_state_dict(m.state_dict())
                outs[f"v3 {'tf32' if tf32 else 'fp32'}"] = f(x)
            torch.cuda.synchronize()
        line = {"shape": i, "shift": shift}
        for key, o in outs.items():
            e = helpers.errors_vs(ref64, o)
            line[key] = e["rel_l2"]
            if e["nan_where_truth_finite"] or o.isnan().any():
                line[key] = float("nan")
        y = line["yardstick"]
        good = line["probe fp32"] <= 4 * y + 1e-7 and line["probe fast2"] == line["probe fast2"]
        if shift == 0.0:
            good &= line["probe fast2"] < 2e-3 and line["probe fast3"] < 2e-3
        ok &= bool(good)
        line["ok"] = bool(good)
        rows.append(line)
        print(line, flush=True)
print(pd.DataFrame(rows).to_string(), flush=True)
print("CHECKS OK" if ok else "CHECKS FAILED", flush=True)

init = A.get_init_inputs()
model = A.Model(*init).cuda()
helpers.randomize_parameters(model, seed=3)
x = A.get_inputs()[0].cuda()
compiled = torch.compile(model, dynamic=False)
contenders = {}
with torch.no_grad():
    compiled(x)
    contenders["torch.compile"] = lambda: compiled(x)
    for tf32 in (False, True):
        f = A.ModelNew(*init, allow_tf32=tf32, variant="v3").cuda()
        f.load_state_dict(model.state_dict())
        o = torch.empty_like(model(x))
        contenders[f"v3 {'tf32' if tf32 else 'fp32'}"] = (lambda f=f, o=o: f(x, out=o))
    for mode in ("fp32", "fast2", "fast3"):
        o = torch.empty_like(model(x))
        st = torch.empty(x.shape[0] * (x.shape[2] - 2) * model.conv.out_channels * 3, device="cuda")
        contenders[f"probe {mode}"] = (lambda mode=mode, o=o, st=st: run_probe(model, x, mode, o, st))
    res = []
    for rep in range(2):
        t = helpers.benchmark(contenders, runs=300)
        res.append({k: v * 1e3 for k, v in t["median_ms"].to_dict().items()})
    print(pd.DataFrame(res).T.round(2).to_string(), flush=True)
    from torch.profiler import profile, ProfilerActivity
    for key, fn in contenders.items():
        if key == "torch.compile":
            continue
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(30):
                helpers.flush_l2()
                fn()
            torch.cuda.synchronize()
        ev = [e for e in prof.key_averages() if "kernel" in e.key and "flush" not in e.key.lower()]
        print(key, {e.key.split("(")[0][-45:]: round(e.device_time_total / e.count, 2) for e in ev}, flush=True)
