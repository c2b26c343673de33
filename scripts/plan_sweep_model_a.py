"""How good is model A v3's launch plan? Times every plan it could run against the one it picks (CUDA GPU).

A plan is a (tiles per warp, cluster size) pair (the warps follow from them; see ``plan_info``). The
kernel picks one with a cost model (``choose_plan_uncached`` in
``kernels/model_a_v3_fused_conv_instnorm_max.cu``); this forces each valid plan in turn through
``forward(..., cluster_size, tiles_per_warp=...)`` and times each with ``helpers.benchmark`` (CUDA
events, L2 flushed before each run; each plan in a loop of its own, see ``sweep_one``). Each forced
plan's output is also compared with the picked plan's (they differ only in the order of sums: at
most 1e-3 apart).

It prints, per configuration and mode, the picked plan, the fastest, and their ratio, then every
plan's median; ``--csv`` saves one row per plan. The default configurations are the small batches
the cost model was fitted on (results/model_a/NOTES.md, eighth round) and a few it was not.

    python scripts/plan_sweep_model_a.py [--runs 100] [--csv plans.csv] [--only-unseen]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

import helpers  # noqa: E402

# (batch, C_in, C_out, (D, H, W), k)
FITTED = [
    *[(b, 3, 16, (16, 32, 32), 3) for b in (1, 4, 8, 16, 30)],
    *[(b, 3, 32, (4, 10, 10), 3) for b in (1, 8, 64)],
    *[(b, 8, 32, (8, 24, 24), 3) for b in (1, 4, 16)],
    *[(b, 1, 5, (12, 20, 20), 2) for b in (2, 12)],
    (3, 16, 24, (6, 12, 12), 3),
    *[(b, 4, 12, (10, 40, 40), 3) for b in (1, 6)],
    *[(b, 2, 8, (5, 16, 16), 3) for b in (1, 8)],
    (2, 3, 16, (3, 8, 8), 3),
]
UNSEEN = [
    (2, 6, 20, (7, 18, 18), 3),
    (1, 12, 16, (6, 16, 16), 3),
    (5, 2, 28, (9, 30, 30), 2),
    (3, 1, 1, (20, 33, 33), 4),
    (1, 24, 8, (6, 9, 9), 5),
    (10, 3, 16, (16, 32, 32), 3),
    (4, 5, 9, (12, 48, 48), 3),
    (7, 40, 30, (5, 10, 10), 3),
]


def sweep_one(ext, config, tf32: bool, runs: int) -> pd.DataFrame | None:
    """Times every valid plan of one configuration and mode; one row per plan (times in ms)."""
    n, c_in, c_out, size, k = config
    device = torch.cuda.current_device()
    try:
        picked = ext.plan_info(list(size), n, c_in, c_out, [k] * 3, tf32, device)
    except RuntimeError as err:
        print(f"skipped {config}: {err}")
        return None
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand((n, c_in, *size), device="cuda", generator=gen)
    w = (torch.rand((c_out, c_in, k, k, k), device="cuda", generator=gen) - 0.5) / math.sqrt(c_in * k ** 3)
    m = torch.randn(c_out, device="cuda", generator=gen)
    out_shape = (n, *(s - k + 1 for s in size))

    def run(cs: int, mt: int, out: torch.Tensor):
        return ext.forward(x, w, m, -0.5, 0.7, 1e-5, tf32, out, cluster_size=cs, tiles_per_warp=mt)

    reference = run(0, 0, torch.empty(out_shape, device="cuda"))
    plans, contenders = {}, {}
    for mt in range(1, 17):  # the kernel refuses the tiles per warp it has no instantiation for
        for cs in range(1, 17):
            try:
                info = ext.plan_info(list(size), n, c_in, c_out, [k] * 3, tf32, device, cluster_size=cs,
                                     tiles_per_warp=mt)
            except RuntimeError:
                continue  # no such instantiation, or outside the envelope for this cluster size
            if info["active_clusters"] < 1:
                continue
            name = f"cs{cs}_mt{mt}"
            out = torch.full(out_shape, float("nan"), device="cuda")
            gap = (run(cs, mt, out) - reference).abs().max().item()
            if not gap <= 1e-3:
                print(f"MISMATCH {config} tf32={tf32} {name}: max |difference| {gap}")
            plans[name] = info
            contenders[name] = lambda cs=cs, mt=mt, out=out: run(cs, mt, out)
    # Each plan in its own loop. A run that follows a run of other code was up to 10 us slower in the fp32 mode
    # (results/model_a/NOTES.md, eighth round; by my reading the SM's instruction cache, which the L2 flush does
    # not clear, though that was not isolated), and helpers.benchmark's rotation gives each contender a fixed
    # predecessor: plans of one instantiation in a row would be favoured. Alone, every run follows a run of the
    # same code, so all plans are timed alike.
    timing = {name: helpers.benchmark({name: fn}, runs=runs).loc[name, ["median_ms", "p10_ms", "p90_ms"]]
              for name, fn in contenders.items()}
    picked_name = f"cs{picked['cluster_size']}_mt{picked['m_tiles_per_warp']}"
    return pd.DataFrame([{
        "batch": n, "c_in": c_in, "c_out": c_out, "size": "x".join(map(str, size)), "k": k, "tf32": tf32,
        "plan": name, "picked": name == picked_name, "cluster_size": info["cluster_size"],
        "tiles_per_warp": info["m_tiles_per_warp"], "warps": info["warps"],
        "active_clusters": info["active_clusters"], **timing[name]} for name, info in plans.items()])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="timed runs per plan (>= 100)")
    parser.add_argument("--csv", type=Path, help="save one row per plan here (rewritten after each configuration)")
    parser.add_argument("--only-unseen", action="store_true", help="only the configurations not fitted on")
    args = parser.parse_args()
    if not helpers.gpu_available():
        print("No CUDA GPU visible: nothing to time.")
        return 0
    from kernels import model_a_conv3d_instnorm_clamp_max as model_a
    ext = model_a._load_extension(model_a.KERNEL_V3)
    print(helpers.stamp(helpers.environment_report()))
    configs = UNSEEN if args.only_unseen else [*FITTED, *UNSEEN]
    tables = []
    for config in configs:
        for tf32 in (False, True):
            table = sweep_one(ext, config, tf32, args.runs)
            if table is None:
                continue
            tables.append(table)
            ranked = table.sort_values("median_ms")
            best, picked = ranked.iloc[0], table[table.picked].iloc[0]
            print(f"{'unseen' if config in UNSEEN else 'fitted'} batch {config[0]}, C_in {config[1]}, C_out "
                  f"{config[2]}, {config[3]}, k {config[4]}, {'TF32' if tf32 else 'fp32'}: picked {picked.plan} "
                  f"({picked.warps} warps) {picked.median_ms * 1e3:.1f} us, fastest {best.plan} ({best.warps} "
                  f"warps) {best.median_ms * 1e3:.1f} us: {picked.median_ms / best.median_ms:.2f}x", flush=True)
            print("   ", " ".join(f"{r.plan}:{r.median_ms * 1e3:.1f}" for r in ranked.itertuples()), flush=True)
            if args.csv:  # after every configuration, so that a run cut short keeps what it measured
                pd.concat(tables).to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
