"""Model C (KernelBench L2-74) v1, v2 and v3 on the GPU: parity, generality, bad inputs, gradients."""
import random

import pytest
import torch

import helpers
from kernels import model_c_convtranspose3d_leaky_pool as C

pytestmark = pytest.mark.gpu


def _models(init, **kwargs):
    torch.manual_seed(0)
    model = C.Model(*init).cuda()
    fused = {v: C.ModelNew(*init, variant=v, **kwargs).cuda() for v in C.VARIANTS}
    return model, fused


def test_kernelbench_size_parity():
    model, fused = _models(C.get_init_inputs())
    x = torch.rand(C.batch_size, C.in_channels, C.depth, C.height, C.width, device="cuda")
    assert fused["v3"].path(x) == "v3"  # the fused kernel, not the fallback
    report = helpers.parity_sweep(model, fused, lambda seed: [torch.rand_like(x)], seeds=(0, 1))
    assert report[report.contender.isin(C.VARIANTS)].passed.all()


def test_tf32_mode_parity():
    model, fused = _models(C.get_init_inputs(), allow_tf32=True)
    ext = C._load_extension(C.KERNEL_V3)
    plan = ext.describe_plan([C.depth, C.height, C.width], 4, C.in_channels, C.out_channels, [C.kernel_size] * 3,
                             [C.stride] * 3, [C.padding] * 3, [C.output_padding] * 3, 2, torch.cuda.current_device(), True)
    if plan["wgmma"]:  # on an H100 with the sm_90a build: the kernel that shares A across window offsets
        assert plan["kernel"] == "TF32, A shared across window offsets"
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(4, 16, 16, 32, 32, device="cuda")], seeds=(3,),
                         shifts=(0.0,), tf32=set(C.VARIANTS))


@pytest.mark.parametrize("init, shape, pool, slope", [
    ([3, 40, 3, 2, 1, 1, (40, 1, 1, 1)], (2, 3, 5, 9, 21), 2, 0.2),    # two channel blocks, odd sizes
    ([9, 17, 2, 2, 0, 0, (17, 1, 1, 1)], (1, 9, 4, 6, 70), 2, 0.2),    # several tiles along W, C_in 9
    ([5, 8, 5, 1, 2, 0, (8, 1, 1, 1)], (3, 5, 6, 7, 5), 3, 0.0),       # stride 1, pool 3, C_out 8
    ([4, 12, 4, 2, 1, 1, (12, 1, 1, 1)], (2, 4, 3, 5, 4), 4, 0.05),    # pool 4 over stride 2
    ([6, 5, 3, 3, 2, 2, (5, 1, 1, 1)], (2, 6, 3, 4, 3), 3, 0.2),       # stride 3, pool 3
    ([4, 6, 3, 2, 1, 1, (6, 1, 1, 1)], (2, 4, 7, 9, 8), 2, -0.3),      # negative slope: no pool-first
    ([16, 32, 3, 2, 1, 1, (32, 1, 1, 1)], (1, 16, 1, 1, 1), 2, 0.2),   # 1x1x1 input, batch 1
    ([32, 24, 3, 2, 1, 1, (24, 1, 1, 1)], (2, 32, 5, 8, 12), 2, 0.2),  # C_in 32: smaller tiles to fit
    ([30, 20, 3, 2, 1, 1, (20, 1, 1, 1)], (2, 30, 4, 6, 40), 2, 0.2),  # C_in 30: a partial channel group
    ([16, 12, 1, 2, 0, 1, (12, 1, 1, 1)], (2, 16, 5, 7, 9), 2, -0.2),  # kernel < stride: offsets with no
    ([16, 12, 1, 2, 0, 1, (12, 1, 1, 1)], (1, 16, 3, 4, 5), 2, 0.2),   # tap (y = bias), either slope sign
])
@pytest.mark.usefixtures("tf32_products_as_asked")  # the TF32 kernel itself, also on these small outputs
def test_v3_envelope_cases(init, shape, pool, slope):
    model = C.Model(*init).cuda()
    model.leaky_relu.negative_slope = slope
    model.max_pool = torch.nn.MaxPool3d(pool)
    fused = {f"v3 {mode}": C.ModelNew(*init, variant="v3", negative_slope=slope, pool=pool, allow_tf32=(mode == "tf32")).cuda()
             for mode in ("fp32", "tf32")}
    x = torch.rand(shape, device="cuda")
    assert fused["v3 fp32"].path(x) == "v3"
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(7, 8),
                         shifts=(0.0,), tf32={"v3 tf32"})
    helpers.parity_sweep(model, {"v3 fp32": fused["v3 fp32"]}, lambda seed: [torch.rand(shape, device="cuda")],
                         seeds=(9,), shifts=(100.0,))



def _require_wgmma(ext, device):
    """Skip unless this build of the v3 kernel runs wgmma on `device` (sm_90a on a compute capability 9.0 GPU)."""
    if not ext.describe_plan([1, 1, 1], 1, 1, 1, [1, 1, 1], [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, device.index)["wgmma"]:
        pytest.skip("this build has no wgmma (not sm_90a on a compute capability 9.0 GPU)")


class _V3Build(torch.nn.Module):
    """ModelNew's v3 forward through a given build of the v3 kernel (its own weights, loaded by the sweep)."""

    def __init__(self, init, ext, allow_tf32, pool=2, slope=0.2, smem_a=True, share_a=True):
        super().__init__()
        self.fused = C.ModelNew(*init, variant="v3", allow_tf32=allow_tf32, pool=pool, negative_slope=slope)
        self.ext, self.allow_tf32, self.pool, self.slope = ext, allow_tf32, pool, slope
        self.smem_a, self.share_a = smem_a, share_a

    def load_state_dict(self, state, *args, **kwargs):
        return self.fused.load_state_dict(state, *args, **kwargs)

    def forward(self, x, out=None):  # out= lets the parity check hand in a NaN-poisoned buffer
        ct, p = self.fused.conv_transpose, self.pool
        size = C.conv_output_size(x.shape[2:], {"stride": ct.stride, "padding": ct.padding, "kernel": ct.kernel_size,
                                                "output_padding": ct.output_padding})
        if out is None:
            out = torch.empty((x.shape[0], ct.out_channels, *(n // p for n in size)), device=x.device)
        return self.ext.forward(x, ct.weight, ct.bias, self.fused.multiplier.reshape(-1), list(ct.stride),
                                list(ct.padding), list(ct.output_padding), p, self.slope, self.allow_tf32, out,
                                smem_a=self.smem_a, share_a=self.share_a)

    def kernel_name(self, x):
        """Which v3 kernel forward runs for x (the build's describe_plan)."""
        ct = self.fused.conv_transpose
        return self.ext.describe_plan(list(x.shape[2:]), x.shape[0], ct.in_channels, ct.out_channels,
                                      list(ct.kernel_size), list(ct.stride), list(ct.padding),
                                      list(ct.output_padding), self.pool, x.device.index, self.allow_tf32,
                                      smem_a=self.smem_a, share_a=self.share_a)["kernel"]


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="on an sm_90 GPU the default build runs wgmma; elsewhere it already is the mma.sync path")
@pytest.mark.parametrize("init, shape", [
    (C.get_init_inputs(), (2, 16, 16, 32, 32)),                          # KernelBench shape, batch 2
    ([32, 24, 3, 2, 1, 1, (24, 1, 1, 1)], (2, 32, 5, 8, 12)),           # narrower channel blocks (fp32)
    ([6, 5, 3, 3, 2, 2, (5, 1, 1, 1)], (2, 6, 3, 4, 3)),                # stride 3, pool 3, one block of 8
])
def test_v3_portable_mma_sync_build_parity(init, shape):
    """The kernel built without sm_90a (mma.sync, what an A100 runs) passes parity on this H100 too."""
    portable = helpers.load_kernel(C.KERNEL_V3, arch="90", quiet=True)
    pool = 3 if init[3] == 3 else 2
    model = C.Model(*init).cuda()
    model.max_pool = torch.nn.MaxPool3d(pool)
    fused = {f"v3 mma.sync {mode}": _V3Build(init, portable, mode == "tf32", pool=pool).cuda() for mode in ("fp32", "tf32")}
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(11,), shifts=(0.0,),
                         tf32={"v3 mma.sync tf32"})
    helpers.parity_sweep(model, {"v3 mma.sync fp32": fused["v3 mma.sync fp32"]},
                         lambda seed: [torch.rand(shape, device="cuda")], seeds=(12,), shifts=(100.0,))

# TF32 with A read from shared memory (sm_90a): where it applies (16-channel groups, stride = pool along W,
# pooled H and W >= 8, a full 512-position tile in shared memory), with the shapes that stress it.
@pytest.mark.parametrize("init, shape, slope", [
    ([16, 32, 3, 2, 1, 1, (32, 1, 1, 1)], (2, 16, 8, 16, 16), 0.2),         # KernelBench's layer, smaller
    ([32, 40, 2, 2, 0, 0, (40, 1, 1, 1)], (1, 32, 3, 8, 8), 0.2),           # two channel groups, two blocks
    ([16, 8, 2, (2, 1, 2), 0, 0, (8, 1, 1, 1)], (1, 16, 3, 15, 8), 0.2),    # H step 2: block rows 2 lines apart
    ([16, 12, 3, (1, 2, 2), 1, 0, (12, 1, 1, 1)], (2, 16, 4, 9, 9), -0.2),  # D step 2; 3-12 taps per window
    ([12, 8, 5, 2, 2, 1, (8, 1, 1, 1)], (1, 12, 4, 9, 9), 0.2),             # C_in 12 (padded); 8-27 taps
    ([16, 12, 1, 2, 0, 1, (12, 1, 1, 1)], (2, 16, 3, 9, 9), -0.3),          # windows without taps
    ([48, 3, 2, 2, 0, 0, (3, 1, 1, 1)], (1, 48, 2, 8, 8), 0.2),             # three channel groups, C_out 3
])
def test_v3_tf32_smem_a_kernel_parity(init, shape, slope):
    ext = C._load_extension(C.KERNEL_V3)
    model = C.Model(*init).cuda()
    model.leaky_relu.negative_slope = slope
    fused = {f"v3 tf32 A from {where}": _V3Build(init, ext, True, slope=slope, smem_a=(where == "smem"),
                                                 share_a=False).cuda()
             for where in ("smem", "registers")}
    x = torch.rand(shape, device="cuda")
    _require_wgmma(ext, x.device)
    assert fused["v3 tf32 A from smem"].kernel_name(x) == "TF32, A from shared memory"
    assert fused["v3 tf32 A from registers"].kernel_name(x) == "TF32, A from registers"
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(21, 22),
                         shifts=(0.0,), tf32=set(fused))


# TF32 with A shared across window offsets (sm_90a): where A from shared memory applies with 32-channel blocks,
# pool 2 = stride 2 and a shift pattern the build has (kernel 2, 3 or 4; see kShiftMasks), against the two
# other TF32 kernels on the same weights.
@pytest.mark.parametrize("init, shape, slope", [
    ([16, 32, 3, 2, 1, 1, (32, 1, 1, 1)], (2, 16, 8, 16, 16), 0.2),   # KernelBench's layer, smaller (pattern 25)
    ([32, 40, 2, 2, 0, 0, (40, 1, 1, 1)], (1, 32, 3, 8, 8), 0.2),     # two channel groups, a partial 2nd block (9)
    ([16, 17, 3, 2, 1, 0, (17, 1, 1, 1)], (3, 16, 4, 9, 12), 0.0),    # C_out 17, slope 0, partial tiles
    ([16, 20, 3, 2, 0, 1, (20, 1, 1, 1)], (1, 16, 4, 9, 10), -0.2),   # kernel 3, padding 0 (19); slope < 0
    ([16, 24, 2, 2, 0, 0, (24, 1, 1, 1)], (2, 16, 3, 8, 10), 0.2),    # kernel 2, padding 0 (9)
    ([16, 24, 2, 2, 1, 1, (24, 1, 1, 1)], (2, 16, 4, 9, 10), 0.1),    # kernel 2, padding 1 (17)
    ([16, 32, 4, 2, 0, 0, (32, 1, 1, 1)], (1, 16, 3, 8, 9), -0.1),    # kernel 4, padding 0 (27); slope < 0
    ([16, 32, 3, 2, 2, 1, (32, 1, 1, 1)], (5, 16, 5, 10, 10), 0.2),   # padding 2 (19), batch 5
])
def test_v3_tf32_shared_a_kernel_parity(init, shape, slope):
    ext = C._load_extension(C.KERNEL_V3)
    model = C.Model(*init).cuda()
    model.leaky_relu.negative_slope = slope
    builds = {"shared": dict(), "smem": dict(share_a=False), "registers": dict(smem_a=False)}
    fused = {f"v3 tf32 A {where}": _V3Build(init, ext, True, slope=slope, **kw).cuda() for where, kw in builds.items()}
    x = torch.rand(shape, device="cuda")
    _require_wgmma(ext, x.device)
    assert fused["v3 tf32 A shared"].kernel_name(x) == "TF32, A shared across window offsets"
    assert fused["v3 tf32 A smem"].kernel_name(x) == "TF32, A from shared memory"
    assert fused["v3 tf32 A registers"].kernel_name(x) == "TF32, A from registers"
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(31, 32),
                         shifts=(0.0,), tf32=set(fused))


# The fp32-accurate (3xTF32) mode of the kernel that shares A, where its hi and lo weights and a full tile fit
# (all but kernel 4: its 64 taps' weights, twice, exceed shared memory), against the register kernel, on the
# TF32 test's shapes. Inputs as drawn and shifted by +100 (the fp32 limits of PARITY.md).
@pytest.mark.parametrize("init, shape, slope, shared", [
    ([16, 32, 3, 2, 1, 1, (32, 1, 1, 1)], (2, 16, 8, 16, 16), 0.2, True),   # KernelBench's layer (pattern 25)
    ([32, 40, 2, 2, 0, 0, (40, 1, 1, 1)], (1, 32, 3, 8, 8), 0.2, True),     # two channel groups, two blocks (9)
    ([16, 17, 3, 2, 1, 0, (17, 1, 1, 1)], (3, 16, 4, 9, 12), 0.0, True),    # C_out 17, slope 0, partial tiles
    ([16, 20, 3, 2, 0, 1, (20, 1, 1, 1)], (1, 16, 4, 9, 10), -0.2, True),   # pattern 19; slope < 0
    ([16, 24, 2, 2, 0, 0, (24, 1, 1, 1)], (2, 16, 3, 8, 10), 0.2, True),    # pattern 9
    ([16, 24, 2, 2, 1, 1, (24, 1, 1, 1)], (2, 16, 4, 9, 10), 0.1, True),    # pattern 17
    ([16, 32, 4, 2, 0, 0, (32, 1, 1, 1)], (1, 16, 3, 8, 9), -0.1, False),   # kernel 4: the register kernel
    ([16, 32, 3, 2, 2, 1, (32, 1, 1, 1)], (5, 16, 5, 10, 10), 0.2, True),   # padding 2 (19), batch 5
    ([12, 24, 3, 2, 1, 1, (24, 1, 1, 1)], (2, 12, 4, 9, 9), 0.2, True),     # C_in 12: padded channels (25)
    ([28, 18, 2, 2, 0, 0, (18, 1, 1, 1)], (1, 28, 3, 8, 9), -0.1, True),    # C_in 28: a partial 2nd group (9)
    ([20, 18, 2, 2, 0, 0, (18, 1, 1, 1)], (1, 20, 3, 8, 9), 0.2, False),    # C_in 20 pads to 24, not 16s
])
def test_v3_fp32_shared_a_kernel_parity(init, shape, slope, shared):
    ext = C._load_extension(C.KERNEL_V3)
    model = C.Model(*init).cuda()
    model.leaky_relu.negative_slope = slope
    fused = {f"v3 fp32 A {where}": _V3Build(init, ext, False, slope=slope, share_a=(where == "shared")).cuda()
             for where in ("shared", "registers")}
    x = torch.rand(shape, device="cuda")
    _require_wgmma(ext, x.device)
    expected = "3xTF32, A shared across window offsets" if shared else "3xTF32, A from registers"
    assert fused["v3 fp32 A shared"].kernel_name(x) == expected
    assert fused["v3 fp32 A registers"].kernel_name(x) == "3xTF32, A from registers"
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(33, 34),
                         shifts=(0.0, 100.0))


@pytest.mark.parametrize("init, pool, reason", [
    ([4, 6, 3, 3, 1, 0, (6, 1, 1, 1)], 2, "multiple of every stride"),
    ([64, 64, 5, 1, 2, 0, (64, 1, 1, 1)], 2, "shared memory"),
])
def test_v3_falls_back_to_v2_outside_its_envelope(init, pool, reason):
    model = C.Model(*init).cuda()
    model.max_pool = torch.nn.MaxPool3d(pool)
    fused = C.ModelNew(*init, pool=pool).cuda()
    shape = (2, init[0], 4, 5, 6)
    assert reason in fused.path(torch.rand(shape, device="cuda"))
    helpers.parity_sweep(model, {"v3 fallback": fused}, lambda seed: [torch.rand(shape, device="cuda")],
                         seeds=(4,))


def _random_config(rng: random.Random):
    k, s = rng.randint(1, 5), rng.randint(1, 3)
    p, op = rng.randint(0, k - 1), rng.randint(0, s - 1)
    c_out = rng.randint(1, 24)
    c_in = rng.randint(1, 12) if rng.random() < 0.6 else rng.randint(13, 40)  # 16-channel groups, partial ones
    init = [c_in, c_out, k, s, p, op, (c_out, 1, 1, 1)]
    def out_size(n):
        return (n - 1) * s - 2 * p + k + op
    # sizes whose conv output holds at least one 2 x 2 x 2 window (the reference raises otherwise)
    spatial = [rng.choice([n for n in range(1, 10) if out_size(n) >= 2]) for _ in range(3)]
    return init, (rng.choice([1, 1, 2, 3]), init[0], *spatial)


@pytest.mark.parametrize("index", range(50))
def test_random_configurations_parity(index):
    init, shape = _random_config(random.Random(3000 + index))
    model, fused = _models(init)
    fused["v3 tf32"] = C.ModelNew(*init, variant="v3", allow_tf32=True).cuda()  # its own box layout (16-channel groups)
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(index,),
                         tf32={"v3 tf32"})


def _draw_channels_config(rng: random.Random, max_stride: int, c_out_ranges, c_in_ranges, max_side: int, batches):
    """More channels than the generator above: C_out and C_in each from one of their ranges (picked evenly; C_in
    past 16 makes several 16-channel groups, the last partial), kernel 1..5, stride 1..max_stride, any valid
    padding and output padding, sides 1..max_side. The wide-channel test below and the fuzz's ``--channels``
    (scripts/fuzz_parity.py) draw through it, in the order the fuzz always drew, so its seeds name the same
    configurations as before."""
    k, s = rng.randint(1, 5), rng.randint(1, max_stride)
    p, op = rng.randint(0, k - 1), rng.randint(0, s - 1)
    c_out = rng.choice([rng.randint(lo, hi) for lo, hi in c_out_ranges])
    c_in = rng.choice([rng.randint(lo, hi) for lo, hi in c_in_ranges])
    init = [c_in, c_out, k, s, p, op, (c_out, 1, 1, 1)]

    def out_size(n):
        return (n - 1) * s - 2 * p + k + op
    # sizes whose conv output holds at least one 2 x 2 x 2 window (the reference raises otherwise)
    spatial = [rng.choice([n for n in range(1, max_side + 1) if out_size(n) >= 2]) for _ in range(3)]
    return init, (rng.choice(batches), c_in, *spatial)


def test_random_wide_channel_counts_parity():
    """More channels than the generator above draws: 16 random configurations with C_in 17..64 (several 16-channel
    groups, the last partial) and C_out 25..64, both modes; v3 where its envelope allows."""
    ran_v3 = 0
    for index in range(16):
        init, shape = _draw_channels_config(random.Random(4000 + index), 2, [(25, 64)], [(17, 64)], 8, [1, 2])
        model, fused = _models(init)
        fused["v3 tf32"] = C.ModelNew(*init, variant="v3", allow_tf32=True).cuda()
        ran_v3 += fused["v3"].path(torch.empty(shape, device="cuda")) == "v3"
        helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(index,),
                             tf32={"v3 tf32"})
    assert ran_v3 >= 8, ran_v3  # v3 exercised at these channel counts, not only v2 (10 of 16 on an H100)


@pytest.mark.parametrize("slope, pool", [(0.0, 2), (0.01, 3), (1.0, 2), (-0.3, 2)])
def test_other_slopes_and_pools(slope, pool):
    """Negative slope: leaky is not monotone, v2 must fall back to v1 and still be right."""
    init = [4, 6, 3, 2, 1, 1, (6, 1, 1, 1)]
    model = C.Model(*init).cuda()
    model.leaky_relu.negative_slope = slope
    model.max_pool = torch.nn.MaxPool3d(pool)
    fused = {v: C.ModelNew(*init, variant=v, negative_slope=slope, pool=pool).cuda() for v in ("v1", "v2")}
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(2, 4, 7, 9, 8, device="cuda")], seeds=(5,))


def _channels_draw(rng: random.Random):  # scripts/fuzz_parity.py's channels_c
    return _draw_channels_config(rng, 3, [(1, 24), (25, 64)], [(1, 16), (17, 64)], 9, [1, 2, 3])


# The fuzz's TF32 misses of PARITY.md's relative L2 (results/model_c/NOTES.md; README, Limits): (seed, its generator in
# scripts/fuzz_parity.py, relative L2 the fuzz measured with TF32 products). Each output has at most 560 values.
_FORMER_TF32_MISSES = [
    (9505206, _channels_draw, 3.30e-3), (9512352, _channels_draw, 2.14e-3), (9517380, _channels_draw, 9.74e-3),
    (31000372, _channels_draw, 3.32e-3), (31004508, _channels_draw, 2.14e-3), (71000522, _random_config, 2.31e-3),
    (71003210, _random_config, 5.43e-3), (83003247, _random_config, 2.2e-3), (95000074, _random_config, 3.0e-3),
    (95001443, _random_config, 2.07e-3),
]


@pytest.mark.parametrize("seed, draw, was", _FORMER_TF32_MISSES)
def test_tf32_mode_on_former_misses(seed, draw, was):
    """The fuzz's TF32 misses, replayed with its own weights and inputs: on outputs of fewer than
    TF32_MIN_OUTPUT_VALUES values allow_tf32=True runs the fp32-accurate products, and passes the TF32 bar on both
    paths (v3 where its envelope allows, and v2)."""
    init, shape = draw(random.Random(seed))
    for variant in ("v3", "v2"):
        model = C.Model(*init).cuda()
        fused = {"tf32": C.ModelNew(*init, variant=variant, allow_tf32=True).cuda()}
        x = torch.empty(shape, device="cuda")
        assert not fused["tf32"].tf32_products(x) and fused["tf32"]._config(x)["allow_tf32"] is False
        report = helpers.parity_sweep(model, fused, lambda s: [torch.rand(shape, device="cuda")], seeds=(seed,),
                                      shifts=(0.0,), tf32=("tf32",), raise_on_failure=False)
        assert report[report.contender == "tf32"].passed.all(), f"{variant}:\n{report.to_string()}"


@pytest.mark.parametrize("variant, allow_tf32", [("v2", False), ("v3", False), ("v3", True)])
def test_gradients_match_pytorch(variant, allow_tf32):
    """ModelNew trains: its backward recomputes the unfused model (helpers.recomputed_backward). Every gradient
    (input, conv weight and bias, multiplier) is judged as PARITY.md judges outputs, against PyTorch's float32
    gradients with TF32 as the mode says. Under autograd the forward is still the fused kernel's."""
    init = [4, 6, 3, 2, 1, 1, (6, 1, 1, 1)]
    model = C.Model(*init).cuda()
    helpers.randomize_parameters(model, 9)
    fused = C.ModelNew(*init, variant=variant, allow_tf32=allow_tf32).cuda()
    x = torch.rand(2, 4, 5, 6, 7, device="cuda")
    assert fused.path(x) == variant
    report = helpers.gradient_parity(model, fused, [x], torch.randn(2, 6, 5, 6, 7, device="cuda"),
                                     allow_tf32=allow_tf32)
    assert (report.truth_norm > 0).all()
    helpers.check_forward_under_autograd(fused, x, bitwise=variant == "v3")


def test_non_contiguous_channels_last_and_empty_batch():
    model, fused = _models([3, 5, 3, 2, 1, 1, (5, 1, 1, 1)])
    x = torch.rand(2, 3, 5, 6, 7, device="cuda")
    with torch.no_grad():
        expected = model.double()(x.double())
        for name, xi in {"channels_last_3d": x.to(memory_format=torch.channels_last_3d),
                         "transposed view": x.transpose(3, 4).contiguous().transpose(3, 4)}.items():
            for v, f in fused.items():
                f.load_state_dict(model.state_dict())
                torch.testing.assert_close(f(xi).double(), expected, atol=1e-5, rtol=1e-5, msg=f"{name} {v}")
        for f in fused.values():
            assert f(torch.rand(0, 3, 5, 6, 7, device="cuda")).shape == (0, 5, 5, 6, 7)


@pytest.mark.parametrize("make, message", [
    (lambda: torch.rand(2, 16, 4, 4, 4), "CUDA"),
    (lambda: torch.rand(2, 16, 4, 4, 4, device="cuda", dtype=torch.float64), "float32"),
    (lambda: torch.rand(2, 16, 4, 4, 4, device="cuda", dtype=torch.float16), "float32"),
    (lambda: torch.rand(16, 4, 4, 4, device="cuda"), "unbatched"),
    (lambda: torch.rand(2, 15, 4, 4, 4, device="cuda"), "in_channels=16"),
])
def test_bad_inputs_raise_clearly(make, message):
    _, fused = _models(C.get_init_inputs())
    with pytest.raises((ValueError, TypeError), match=message):
        fused["v2"](make())


def test_pool_larger_than_output_raises():
    init = [2, 3, 1, 1, 0, 0, (3, 1, 1, 1)]
    fused = C.ModelNew(*init, pool=4).cuda()
    with pytest.raises(ValueError, match="larger than the conv output"):
        fused(torch.rand(1, 2, 3, 8, 8, device="cuda"))


def test_v3_no_large_allocation_and_deterministic():
    _, fused = _models(C.get_init_inputs())
    x = torch.rand(C.batch_size, C.in_channels, C.depth, C.height, C.width, device="cuda")
    out = torch.full((C.batch_size, C.out_channels, 16, 32, 32), float("nan"), device="cuda")
    with torch.no_grad():
        expected = fused["v3"](x).clone()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fused["v3"](x, out=out)
        torch.cuda.synchronize()
        assert torch.cuda.max_memory_allocated() - before < 1 << 20  # nothing of the conv output's 268 MB
    assert torch.equal(out, expected)


@pytest.mark.parametrize("allow_tf32", [False, True])
def test_v3_runs_on_the_current_stream(on_busy_side_stream, allow_tf32):
    init = [5, 12, 3, 2, 1, 1, (12, 1, 1, 1)]
    fused = C.ModelNew(*init, variant="v3", allow_tf32=allow_tf32).cuda()
    x_stale, x_new = torch.rand(2, 5, 6, 8, 9, device="cuda"), torch.rand(2, 5, 6, 8, 9, device="cuda")
    with torch.no_grad():
        assert fused.path(x_new) == "v3"
        expected = fused(x_new)
        assert torch.equal(on_busy_side_stream(fused, x_stale, x_new), expected)
        wrong = on_busy_side_stream(on_busy_side_stream.on_default_stream(fused), x_stale, x_new)
        assert not torch.equal(wrong, expected)  # the check can fail


def test_v3_extension_checks_name_the_argument():
    ext = C._load_extension(C.KERNEL_V3)
    x = torch.rand(2, 3, 4, 4, 4, device="cuda")
    w = torch.rand(3, 5, 3, 3, 3, device="cuda")
    p = torch.rand(5, device="cuda")
    out = torch.empty(2, 5, 4, 4, 4, device="cuda")
    ok = (x, w, p, p, [2, 2, 2], [1, 1, 1], [1, 1, 1], 2, 0.2, False, out, 0)
    assert ext.forward(*ok) is not None
    cases = {"x must be float32": {0: x.double()}, "weight must be .C_in": {1: w[:2]},
             "bias must hold one value": {2: p[:4]}, "multiplier must be on": {3: p.cpu()},
             "out must have shape": {10: out[:1]}, "multiple of every stride": {4: [3, 2, 2]},
             "x must be contiguous": {0: x.transpose(2, 3)}, "channels_per_block must be": {11: 12}}
    for pattern, change in cases.items():
        args = list(ok)
        for i, v in change.items():
            args[i] = v
        with pytest.raises(RuntimeError, match=pattern):
            ext.forward(*args)


@pytest.mark.parametrize("allow_tf32", [False, True])
def test_v3_channel_blocks_give_identical_results(allow_tf32):
    """8, 16 or 32 channels per CTA change the blocking, not the arithmetic of any channel."""
    ext = C._load_extension(C.KERNEL_V3)
    torch.manual_seed(11)
    x = torch.rand(2, 5, 6, 7, 9, device="cuda")
    w, b, m = torch.randn(5, 40, 3, 3, 3, device="cuda"), torch.randn(40, device="cuda"), torch.randn(40, device="cuda")
    outs = []
    for block in (8, 16, 32):
        out = torch.full((2, 40, 6, 7, 9), float("nan"), device="cuda")
        outs.append(ext.forward(x, w, b, m, [2, 2, 2], [1, 1, 1], [1, 1, 1], 2, 0.2, allow_tf32, out, block))
    assert not outs[0].isnan().any()
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


# Small tiles whose idle warpgroups take a share of the window offsets (the plan's window_split), in the mode given:
# (batch, C_in, C_out, k, stride, padding, output_padding, input D x H x W, pool, slope, allow_tf32, NaN in the input).
# 2 rows per tile; 16-channel blocks beside padded channels; 32-row tiles, ~50 per CTA (each box reused after its
# partial maxima); a negative slope (the max of f(y)); partial maxima over padded channels (a single channel group
# with some: TF32 C_in 14, 11 and 10, fp32 C_in 5), whose zeros must come back before the box's next tile: with a NaN
# in the input and boxes reused, a NaN left there would reach other samples; pool 4 at stride 2 with kernel 1, where only 8 of the 64 window
# offsets have taps (split 4: sets 0 and 2 take them; C_in 40, so that three sets' partial maxima fit in the box).
@pytest.mark.parametrize("n, c_in, c_out, k, s, pad, out_pad, size, pool, slope, tf32, nan", [
    (1, 32, 24, 4, 1, 3, 0, (6, 5, 7), 2, 0.2, False, False),
    (1, 32, 24, 4, 1, 3, 0, (6, 5, 7), 2, 0.2, True, False),
    (8, 14, 17, 4, 1, 3, 0, (6, 6, 8), 2, 0.2, False, False),
    (32, 10, 20, 4, 1, 0, 0, (27, 15, 18), 2, 0.2, False, False),
    (1, 32, 24, 4, 1, 3, 0, (6, 5, 7), 2, -0.3, False, False),
    (8, 14, 17, 4, 1, 3, 0, (6, 6, 8), 2, 0.2, False, True),
    (8, 14, 17, 4, 1, 3, 0, (6, 6, 8), 2, 0.2, True, False),
    (4, 11, 16, 2, 1, 0, 0, (8, 3, 5), 2, 0.2, True, False),
    (2, 5, 5, 4, 1, 2, 0, (5, 5, 9), 2, 0.2, False, True),
    (32, 10, 20, 4, 1, 0, 0, (27, 15, 18), 2, 0.2, True, True),
    (2, 40, 6, 1, 2, 0, 1, (5, 5, 5), 4, 0.2, False, False),
])
def test_v3_window_split_gives_the_same_bits(n, c_in, c_out, k, s, pad, out_pad, size, pool, slope, tf32, nan):
    """Window offsets spread over the idle warpgroups change who computes a max, not its value: the outputs must be
    bitwise those of one warpgroup set walking every offset (split_windows=False)."""
    ext = C._load_extension(C.KERNEL_V3)
    plan = ext.describe_plan(list(size), n, c_in, c_out, [k] * 3, [s] * 3, [pad] * 3, [out_pad] * 3, pool, 0, tf32)
    assert plan["problem"] == "" and plan["window_split"] > 1, plan
    assert ext.describe_plan(list(size), n, c_in, c_out, [k] * 3, [s] * 3, [pad] * 3, [out_pad] * 3, pool, 0, tf32,
                             split_windows=False)["window_split"] == 1
    torch.manual_seed(k * 100 + c_in)
    x = torch.rand(n, c_in, *size, device="cuda")
    if nan:
        x[n // 2, c_in // 2, size[0] // 2, 1, 2] = float("nan")
    w = torch.randn(c_in, c_out, k, k, k, device="cuda") / (c_in * k**3) ** 0.5
    b, m = torch.randn(c_out, device="cuda"), torch.randn(c_out, device="cuda")
    m[0], m[1] = 0.0, -abs(float(m[1]))
    conv = C.conv_output_size(size, {"stride": (s,) * 3, "padding": (pad,) * 3, "kernel": (k,) * 3,
                                     "output_padding": (out_pad,) * 3})
    outs = []
    for split in (True, False):
        out = torch.full((n, c_out, *(c // pool for c in conv)), float("nan"), device="cuda")  # poisoned
        outs.append(ext.forward(x, w, b, m, [s] * 3, [pad] * 3, [out_pad] * 3, pool, slope, tf32, out,
                                split_windows=split))
    assert outs[0].isnan().any() == nan and (nan or not outs[1].isnan().any())
    if nan:  # the NaN stays in its own sample
        assert not outs[0][torch.arange(n, device="cuda") != n // 2].isnan().any()
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))


@pytest.mark.parametrize("tf32", [False, True])
def test_v3_window_split_only_where_it_shares_taps(tf32):
    """Kernel 1 at stride 2 and pool 2: one of the 8 window offsets has taps, so no split shortens the busiest set's
    walk, and the plan keeps one set (a split there would only add its merge)."""
    ext = C._load_extension(C.KERNEL_V3)
    plan = ext.describe_plan([3, 3, 3], 1, 16, 6, [1] * 3, [2] * 3, [0] * 3, [1] * 3, 2, 0, tf32)
    assert plan["problem"] == "" and plan["window_split"] == 1, plan
    # the same tile with kernel 2 (every offset has taps) splits
    assert ext.describe_plan([3, 3, 3], 1, 16, 6, [2] * 3, [2] * 3, [0] * 3, [1] * 3, 2, 0, tf32)["window_split"] > 1


def test_extension_checks_name_the_argument():
    ext = C._load_extension()
    y = torch.rand(2, 3, 4, 4, 4, device="cuda")
    p = torch.rand(3, device="cuda")
    out = torch.empty(2, 3, 2, 2, 2, device="cuda")
    ok = (y, p, p, 0.2, 2, True, out)
    cases = {"pool must be in": {4: 0}, "is larger than the conv output": {4: 5},
             "multiplier must hold one value per channel": {2: p[:2]}, "bias must be on": {1: p.cpu()},
             "out must have shape": {6: out[:1]}, "y must be 5-D": {0: y[0]}}
    for pattern, change in cases.items():
        args = list(ok)
        for i, v in change.items():
            args[i] = v
        with pytest.raises(RuntimeError, match=pattern):
            ext.fused_tail(*args)


@pytest.mark.parametrize("pool_first", [False, True])
def test_vector_and_scalar_paths_agree_with_the_algebra(pool_first):
    """W % 4 == 0 and aligned takes the float4 path; the same data one float off alignment the scalar one."""
    ext = C._load_extension()
    base = torch.randn(2 * 3 * 6 * 8 * 12 + 1, device="cuda") * 2 + 1
    m = torch.tensor([1.5, -0.7, 0.0], device="cuda")
    bias = torch.tensor([0.3, -0.2, 0.1], device="cuda")
    for y in (base[:-1].view(2, 3, 6, 8, 12).clone(), base[1:].view(2, 3, 6, 8, 12)):
        out = torch.full((2, 3, 3, 4, 6), float("nan"), device="cuda")
        ext.fused_tail(y, bias, m, 0.2, 2, pool_first, out)
        truth = C.pool_first_reference(y.double() + bias.double().view(1, -1, 1, 1, 1), m.double(), 0.2, 2)
        torch.testing.assert_close(out.double(), truth, atol=1e-6, rtol=1e-6)


# NaN bit patterns: PyTorch's float("nan"), the NaN CUDA's arithmetic produces (0 / 0), all bits set, and the
# smallest payload. Rounding an operand to TF32 by an integer add of 2^12 carried the second and third into the
# sign bit (-0: a finite output where PyTorch's is NaN).
NAN_BITS = (0x7FC00000, 0x7FFFFFFF, -1, 0x7F800001)
INF_BITS = (0x7F800000, -0x800000)  # +inf, -inf


@pytest.mark.parametrize("allow_tf32", [False, True])
def test_nan_payloads_and_infinities_reach_the_outputs_pytorch_gives(allow_tf32):
    """Special values at scattered input positions reach exactly the outputs they reach in PyTorch (the model
    has no normalisation, so they stay local): NaN of every payload in both modes, in every TF32 kernel this
    build has; +-inf in the TF32 mode. (The fp32-accurate mode splits v = hi + lo, and an infinite v has a NaN lo:
    there an infinity comes out as NaN, not checked here.)"""
    init, shape = [16, 32, 3, 2, 1, 1, (32, 1, 1, 1)], (2, 16, 8, 16, 16)
    ext = C._load_extension(C.KERNEL_V3)
    torch.manual_seed(5)
    model = C.Model(*init).cuda()
    if allow_tf32:
        builds = {"shared": dict(), "smem": dict(share_a=False), "registers": dict(smem_a=False)}
        if not ext.describe_plan(list(shape[2:]), shape[0], 16, 32, [3] * 3, [2] * 3, [1] * 3, [1] * 3, 2,
                                 torch.cuda.current_device(), True)["wgmma"]:
            builds = {"registers": dict()}
    else:
        builds = {"default": dict()}
    fused = {where: _V3Build(init, ext, allow_tf32, **kw).cuda() for where, kw in builds.items()}
    for f in fused.values():
        f.load_state_dict(model.state_dict())
    x = torch.rand(shape, device="cuda")
    specials = NAN_BITS + (INF_BITS if allow_tf32 else ())
    positions = [(0, 0, 1, 2, 3), (0, 5, 6, 12, 9), (1, 3, 2, 7, 14), (1, 15, 5, 1, 1), (0, 9, 3, 10, 14),
                 (1, 8, 7, 15, 0)]
    for position, value in zip(positions, specials):
        x.view(torch.int32)[position] = value
    with torch.no_grad(), helpers.strict_fp32():
        expected = model(x)
    assert torch.isnan(expected).any() and not torch.isnan(expected).all()
    for where, f in fused.items():
        with torch.no_grad():
            got = f(x)
        assert torch.equal(torch.isnan(got), torch.isnan(expected)), where
        assert torch.equal(torch.isposinf(got), torch.isposinf(expected)), where
        assert torch.equal(torch.isneginf(got), torch.isneginf(expected)), where
        finite = torch.isfinite(expected)
        tol = 1e-2 if allow_tf32 else 1e-4  # TF32: KernelBench's criterion
        torch.testing.assert_close(got[finite], expected[finite], atol=tol, rtol=tol)


def test_backward_differentiates_the_forward_that_ran():
    """A slope changed between a forward and its backward does not change the gradients: the backward recomputes
    with the slope that forward ran with (and the new slope does change a fresh forward's gradients)."""
    init = [4, 6, 3, 2, 1, 1, (6, 1, 1, 1)]
    fused = C.ModelNew(*init).cuda()
    helpers.randomize_parameters(fused, 6)
    x, grad_out = torch.rand(2, 4, 5, 6, 7, device="cuda"), torch.randn(2, 6, 5, 6, 7, device="cuda")
    helpers.check_backward_uses_its_forward(fused, x, grad_out, lambda: setattr(fused, "negative_slope", 0.6))


def test_auto_measures_small_problems_once_and_runs_what_it_chose(monkeypatch, measured_auto_choice):
    init = [4, 6, 3, 2, 1, 1, (6, 1, 1, 1)]
    for allow_tf32 in (False, True):
        model = C.Model(*init).cuda()
        helpers.randomize_parameters(model, seed=13)
        fused = C.ModelNew(*init, allow_tf32=allow_tf32).cuda()
        fused.load_state_dict(model.state_dict())
        x = torch.rand(2, 4, 5, 6, 7, device="cuda")
        key = ("model C", tuple(x.shape), tuple(fused._config(x).items()), x.device.index)
        name = measured_auto_choice(fused, x, key, lambda: C.ModelNew(*init, allow_tf32=allow_tf32).cuda())
        assert name in ("v2", "v3")
        ran, fused_forward = [], C._fused  # the forward runs the chosen variant, and only that one
        with monkeypatch.context() as patch:
            patch.setattr(C, "_fused", lambda *a: ran.append(a[-1]["path"]) or fused_forward(*a))
            with torch.no_grad():
                fused(x)
        assert ran == [name]
        helpers.parity_sweep(model, {"auto tf32" if allow_tf32 else "auto": fused},
                             lambda seed: [torch.rand(x.shape, device="cuda")], seeds=(23,),
                             shifts=(0.0,) if allow_tf32 else (0.0, 100.0), tf32={"auto tf32"})


def test_auto_runs_v3_unmeasured_above_the_cap(monkeypatch):
    monkeypatch.setattr(helpers, "benchmark", lambda *a, **k: pytest.fail("measured"))
    fused = C.ModelNew(*C.get_init_inputs()).cuda()
    x = torch.empty(C.batch_size, C.in_channels, C.depth, C.height, C.width, device="cuda")
    assert fused.path(x).startswith("v3 (auto: v2's conv output would take 256.0 MiB"), fused.path(x)
    assert fused.path(torch.empty(0, C.in_channels, 4, 4, 4, device="cuda")) == "v3 (auto: nothing to measure)"
