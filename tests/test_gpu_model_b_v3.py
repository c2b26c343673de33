"""Model B (KernelBench L2-85) v3 on the GPU: the conv inside the kernel, its envelope and fallback, parity
as PARITY.md defines it, bad inputs, streams, memory.

Every parity case draws fresh weights and inputs (helpers.randomize_parameters puts zero and negative
entries in the GroupNorm weight and the scale), checks inputs as drawn and shifted by +100 where stated,
and hands the kernel an output buffer poisoned with NaN.
"""
import random

import pytest
import torch

import helpers
from kernels import model_b_conv2d_groupnorm_pool as B

pytestmark = pytest.mark.gpu


def _models(init, modes=("fp32", "tf32"), variant="v3"):
    torch.manual_seed(0)
    model = B.Model(*init).cuda()
    fused = {f"v3 {mode}": B.ModelNew(*init, variant=variant, allow_tf32=(mode == "tf32")).cuda() for mode in modes}
    for module in fused.values():
        module.load_state_dict(model.state_dict())
    return model, fused


def _v3_ext():
    return B._load_extension(B.KERNEL_V3)


def test_kernelbench_size_parity_both_modes():
    model, fused = _models(B.get_init_inputs())
    x = torch.rand(B.batch_size, B.in_channels, B.height, B.width, device="cuda")
    assert fused["v3 fp32"].path(x) == "v3"  # the fused kernel, not the fallback
    report = helpers.parity_sweep(model, fused, lambda seed: [torch.rand_like(x)], seeds=(0, 1, 2),
                                  tf32={"v3 tf32"})
    judged = report[report.contender.str.startswith("v3")]
    assert judged.passed.dropna().all()
    assert judged[judged.contender == "v3 fp32"].passed.all() and len(judged[judged.contender == "v3 fp32"]) == 6
    assert judged[judged.case.str.contains(r"\+0")].kernelbench_allclose.all()


@pytest.mark.parametrize("init, shape", [
    ([3, 16, 3, 8, (16, 1, 1), 2, -1.0, 1.0], (128, 3, 32, 32)),      # KernelBench's first release
    ([8, 64, 3, 16, (64, 1, 1), 4, 0.0, 1.0], (1, 8, 128, 128)),      # batch 1
    ([1, 1, 3, 1, (1, 1, 1), 3, -0.5, 0.5], (2, 1, 13, 17)),           # one channel in and out, odd sizes
    ([2, 8, 5, 2, (8, 1, 1), 5, 0.2, 0.9], (3, 2, 19, 23)),            # k 5, pool 5, bounds positive
    ([4, 9, 1, 3, (9, 1, 1), 8, -0.9, -0.1], (2, 4, 37, 41)),          # k 1, pool 8, bounds negative, 9 ch
    ([5, 40, 3, 5, (40, 1, 1), 2, -2.0, 2.0], (2, 5, 21, 22)),         # 40 channels: a partial chunk
    ([3, 16, 7, 4, (16, 1, 1), 16, -1.0, 1.0], (2, 3, 40, 39)),        # k 7, pool 16
    ([3, 12, 3, 4, (12, 1, 1), 4, -1.0, 1.0], (2, 3, 20, 300)),        # wide: tiles across the width
    ([6, 24, 2, 6, (24, 1, 1), 3, -1.0, 1.0], (2, 6, 50, 250)),        # even k, wide, pool 3
    ([3, 16, 3, 8, (16, 1, 1), 1, -1.0, 1.0], (2, 3, 9, 10)),          # pool 1
    ([3, 16, 3, 4, (16, 1, 1), 4, 0.5, 0.5], (2, 3, 12, 12)),          # lo == hi
    ([3, 16, 3, 4, (16, 1, 1), 6, -1.0, 1.0], (2, 3, 8, 30)),          # pool == conv output height
    ([4, 24, 3, 4, (24, 1, 1), 8, -1.0, 1.0], (2, 4, 43, 64)),         # pool 8 dividing W
    ([2, 16, 5, 2, (16, 1, 1), 16, -1.0, 1.0], (2, 2, 52, 32)),        # pool 16 dividing W
    ([40, 16, 1, 4, (16, 1, 1), 2, -1.0, 1.0], (2, 40, 21, 16)),       # 40 channels in: bulk copies by 32 lanes
    ([3, 512, 3, 1, (512, 1, 1), 2, -1.0, 1.0], (5, 3, 12, 14)),       # 512 channels in a group: the finishing
                                                                        # launch fits 3 (fp32) or 4 pieces per block
])
def test_v3_envelope_cases(init, shape):
    model, fused = _models(init)
    x = torch.rand(shape, device="cuda")
    assert fused["v3 fp32"].path(x) == "v3"
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(7, 8),
                         shifts=(0.0,), tf32={"v3 tf32"})
    helpers.parity_sweep(model, {"v3 fp32": fused["v3 fp32"]}, lambda seed: [torch.rand(shape, device="cuda")],
                         seeds=(9,), shifts=(100.0,))


def _misaligned_rand(shape, offset):
    """Fresh uniform values in a contiguous view that starts `offset` floats into its storage."""
    base = torch.rand(torch.Size(shape).numel() + offset, device="cuda")
    x = base[offset:].view(shape)
    assert (x.data_ptr() % 16 != 0) == bool(offset) and x.is_contiguous()
    return x


@pytest.mark.parametrize("shape, offset", [((2, 3, 20, 21), 0), ((2, 3, 20, 24), 1)])
def test_odd_width_and_misaligned_input_take_the_scalar_copy_path(shape, offset):
    """W not a multiple of 4, or an input not 16-byte aligned: 4-byte copies instead of 16-byte ones."""
    model, fused = _models([3, 16, 3, 4, (16, 1, 1), 2, -1.0, 1.0], modes=("fp32",))
    helpers.parity_sweep(model, fused, lambda seed: [_misaligned_rand(shape, offset)], seeds=(11,), shifts=(0.0,))


@pytest.mark.parametrize("init, shape, reason", [
    ([64, 16, 5, 4, (16, 1, 1), 2, -1.0, 1.0], (2, 64, 20, 20), "shared memory"),
    ([3, 8, 9, 4, (8, 1, 1), 2, -1.0, 1.0], (2, 3, 20, 20), "kernel must be 1..7"),
])
def test_v3_falls_back_to_v2_outside_its_envelope(init, shape, reason):
    model, fused = _models(init, modes=("fp32",))
    x = torch.rand(shape, device="cuda")
    path = fused["v3 fp32"].path(x)
    assert path.startswith("v2 (v3 unsupported") and reason in path, path
    helpers.parity_sweep(model, {"v3 fallback": fused["v3 fp32"]}, lambda seed: [torch.rand(shape, device="cuda")],
                         seeds=(4,), shifts=(0.0,))


@pytest.mark.parametrize("c_in, k, inside", [(24, 3, True), (25, 3, False), (14, 5, True), (15, 5, False)])
def test_envelope_edge_in_shared_memory(c_in, k, inside):
    """At W = 128 on an H100 (227 KB per block), the largest C_in that fits runs v3 and one more falls back:
    the plan's shared-memory budget and the launch agree at the edge."""
    if torch.cuda.get_device_properties(0).shared_memory_per_block_optin != 232448:
        pytest.skip("the edge is computed for a 227 KB shared-memory limit (H100)")
    init = [c_in, 64, k, 16, (64, 1, 1), 4, -1.0, 1.0]
    model, fused = _models(init, modes=("fp32",))
    shape = (1, c_in, 12, 128)
    path = fused["v3 fp32"].path(torch.rand(shape, device="cuda"))
    assert (path == "v3") == inside, path
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(6,), shifts=(0.0,))


def test_conv_with_non_default_stride_or_padding_falls_back():
    init = [3, 8, 3, 4, (8, 1, 1), 2, -1.0, 1.0]
    for attr, value in (("stride", (2, 2)), ("padding", (1, 1))):
        model, fused = _models(init, modes=("fp32",))
        for m in (model, fused["v3 fp32"]):
            setattr(m.conv, attr, value)
        x = torch.rand(2, 3, 17, 19, device="cuda")
        assert "stride 1, no padding" in fused["v3 fp32"].path(x)
        helpers.parity_sweep(model, fused, lambda seed: [torch.rand_like(x)], seeds=(5,), shifts=(0.0,))


def test_window_larger_than_conv_output_raises_like_pytorch():
    model, fused = _models([3, 4, 3, 2, (4, 1, 1), 8, 0.0, 1.0], modes=("fp32",))
    x = torch.rand(1, 3, 8, 30, device="cuda")  # conv output 6 x 28 < pool 8 in height
    with pytest.raises(RuntimeError):
        model(x)
    with pytest.raises(ValueError, match="larger than the conv output"):
        fused["v3 fp32"](x)


def _random_config(rng: random.Random):
    groups = rng.randint(1, 8)
    c_out = groups * rng.choice([rng.randint(1, 4), rng.randint(5, 12)])
    k = rng.choice([1, 2, 3, 3, 5])
    pool = rng.choice([1, 2, 2, 3, 4, 4, 5, 6, 7, 8])
    lo = rng.uniform(-2.0, 1.0)
    hi = lo + rng.choice([0.0, rng.uniform(0.05, 2.5)])
    c_in = rng.choice([rng.randint(1, 4), rng.randint(5, 12)])
    init = [c_in, c_out, k, groups, (c_out, 1, 1), pool, lo, hi]
    width = k - 1 + pool + rng.choice([rng.randint(0, 40), rng.randint(40, 200)])
    shape = (rng.choice([1, 1, 2, 3, 5]), c_in, k - 1 + pool + rng.randint(0, 60), width)
    return init, shape


def test_random_configurations_parity():
    """50 random configurations, both modes, inputs as drawn and +100; v3 where its envelope allows."""
    ran_v3 = 0
    for index in range(50):
        init, shape = _random_config(random.Random(8000 + index))
        model, fused = _models(init)
        x = torch.rand(shape, device="cuda")
        ran_v3 += fused["v3 fp32"].path(x) == "v3"
        helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(index,),
                             shifts=(0.0, 100.0), tf32={"v3 tf32"})
    assert ran_v3 >= 45, ran_v3


def _draw_channels_config(rng: random.Random, group_ranges, c_in_ranges, pool_ranges, most_extra: int):
    """More channels than the generator above: groups and C_in and pools each from one of their ranges (picked
    evenly), C_out a multiple of the groups up to 256, kernels 1, 3, 5, 7, sides k - 1 + pool + 0..most_extra,
    batch up to 3, clamp bounds of either sign (equal half the time). The wide-channel test below and the fuzz's
    ``--channels`` (scripts/fuzz_parity.py) draw through it, in the order the fuzz always drew, so its seeds name
    the same configurations as before."""
    groups = rng.choice([rng.randint(lo, hi) for lo, hi in group_ranges])
    c_out = groups * rng.randint(1, max(1, 256 // groups))
    k = rng.choice([1, 3, 5, 7])
    pool = rng.choice([rng.randint(lo, hi) for lo, hi in pool_ranges])
    clamp_lo = rng.uniform(-2.0, 1.0)
    clamp_hi = clamp_lo + rng.choice([0.0, rng.uniform(0.05, 2.5)])
    c_in = rng.choice([rng.randint(lo, hi) for lo, hi in c_in_ranges])
    init = [c_in, c_out, k, groups, (c_out, 1, 1), pool, clamp_lo, clamp_hi]
    side = k - 1 + pool
    return init, (rng.choice([1, 2, 3]), c_in, side + rng.randint(0, most_extra), side + rng.randint(0, most_extra))


def test_random_wide_channel_counts_parity():
    """More channels than the generator above draws: 16 random configurations with 9..32 groups, C_out up to 256,
    C_in 13..32, kernels 1..7 and pools 1..16, both modes, inputs as drawn and +100. Where the input box and weights
    need more shared memory than the GPU gives a block (large C_in k^2), v2 runs."""
    ran_v3 = 0
    for index in range(16):
        init, shape = _draw_channels_config(random.Random(9000 + index), [(9, 32)], [(13, 32)], [(1, 16)], 30)
        model, fused = _models(init)
        ran_v3 += fused["v3 fp32"].path(torch.empty(shape, device="cuda")) == "v3"
        helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(index,),
                             shifts=(0.0, 100.0), tf32={"v3 tf32"})
    assert ran_v3 >= 8, ran_v3  # v3 exercised at these channel counts, not only v2 (9 of 16 on an H100)


# Configurations drawn by scripts/fuzz_parity.py --model B --wide (seed) on which the fp32 mode was over PARITY.md's
# bar at +100 (1.26x and 1.31x the limit) before the kernel subtracted r(n, ci) from its input (input_shift;
# results/model_b/NOTES.md). Both run the mma.sync GEMM (fewer than 17 output channels). The seed draws the fuzz's
# weights and inputs again.
_FORMER_FP32_MISSES = [
    (31001450, [9, 1, 3, 1, (1, 1, 1), 4, 0.7375055309285043, 2.555026153954512], (2, 9, 113, 220)),
    (31004265, [9, 8, 2, 4, (8, 1, 1), 5, 0.4212455132191515, 0.8107252767297225], (1, 9, 14, 8)),
]


@pytest.mark.parametrize("seed, init, shape", _FORMER_FP32_MISSES)
def test_fp32_mode_on_former_misses_at_plus_100(seed, init, shape):
    """The fuzz's former fp32 misses at +100, replayed: both shifts within PARITY.md's fp32 bar."""
    model, fused = _models(init, modes=("fp32",))
    assert fused["v3 fp32"].path(torch.empty(shape, device="cuda")) == "v3"
    report = helpers.parity_sweep(model, fused, lambda s: [torch.rand(shape, device="cuda")], seeds=(seed,),
                                  shifts=(0.0, 100.0), raise_on_failure=False)
    judged = report[report.contender == "v3 fp32"]
    assert len(judged) == 2 and judged.passed.all(), report.to_string()


def _shift_sample(j: int, rows: int, cols: int) -> int:
    """The flat offset of input_shift's sample j (0..15) in a plane (shift_sample_offset in the kernel)."""
    return (2 * (j // 4) + 1) * rows // 8 * cols + (2 * (j % 4) + 1) * cols // 8


@pytest.mark.parametrize("init, shape", [
    ([3, 8, 1, 4, (8, 1, 1), 2, -1.0, 1.0], (2, 3, 10, 16)),    # mma.sync, bulk copies (W % 4 == 0)
    ([3, 8, 1, 4, (8, 1, 1), 2, -1.0, 1.0], (2, 3, 10, 15)),    # mma.sync, cp.async
    ([3, 32, 3, 8, (32, 1, 1), 2, -1.0, 1.0], (2, 3, 14, 20)),  # wgmma where built for it, and mma.sync
])
@pytest.mark.parametrize("case", ["an offset per channel and sample", "inputs + 1e4",
                                  "1e6 at two of the three candidates and two more samples"])
def test_fp32_mode_input_shift(init, shape, case):
    """The fp32 mode convolves x - r(n, ci) (input_shift) and adds d_c = sum_ci r(n, ci) sum_taps w back in the
    second launch. On both GEMMs and both box copies, each case must stay within PARITY.md's fp32 bar: offsets
    that differ per channel and sample (each plane has its own r, and GroupNorm does not remove d_c, which differs
    per channel), a large common offset, and a plane with 1e6 at four of its 16 samples, two of them among the
    three whose median is the candidate: only 4 samples agree with it, and no shift may be taken."""
    model = B.Model(*init).cuda()
    fused = {"v3 fp32": B.ModelNew(*init, variant="v3").cuda(), "v3 fp32 mma.sync": B.ModelNew(*init, variant="v3", wgmma=False).cuda()}
    c_in = init[0]
    for seed in (50, 51):
        helpers.randomize_parameters(model, seed)
        for module in fused.values():
            module.load_state_dict(model.state_dict())
        x = torch.rand(shape, device="cuda")
        if case == "an offset per channel and sample":
            x += torch.tensor([[100.0, -50.0, 1e3], [7.0, 100.0, -3e3]], device="cuda")[:, :c_in].view(2, c_in, 1, 1)
        elif case == "inputs + 1e4":
            x += 1e4
        else:
            plane = x.view(2, c_in, -1)[0, 1]
            for j in (5, 6, 0, 15):
                plane[_shift_sample(j, *shape[2:])] = 1e6
        assert all(module.path(x) == "v3" for module in fused.values())
        report = helpers.parity_check(model, fused, [x], kernelbench=False, case=f"{case}, seed {seed}")
        judged = report[report.contender.isin(list(fused))]
        assert len(judged) == 2 and judged.passed.all(), report.to_string()


@pytest.mark.parametrize("case", ["first, middle and last elements at 100", "a frame at 100"])
def test_fp32_mode_plane_with_a_few_elements_far_from_the_rest(case):
    """Planes in [0, 1) but for a few elements at 100: the first, middle (at 128 x 128 on the left edge) and last,
    or a frame. input_shift's rule before this one (the median of those three elements where they agree) took
    r = 100 there, and every other value was convolved as about -100: 25x the fp32 bar at the KernelBench sizes
    (H200, results/model_b/NOTES.md). The interior grid of samples sees neither."""
    init, shape = list(B.get_init_inputs()), (2, 8, 128, 128)
    model = B.Model(*init).cuda()
    fused = {"v3 fp32": B.ModelNew(*init, variant="v3").cuda()}
    for seed in (1, 2):
        helpers.randomize_parameters(model, seed)
        fused["v3 fp32"].load_state_dict(model.state_dict())
        x = torch.rand(shape, device="cuda")
        if case == "a frame at 100":
            x[..., 0, :] = x[..., -1, :] = x[..., :, 0] = x[..., :, -1] = 100.0
        else:
            planes = x.view(shape[0], shape[1], -1)
            size = planes.shape[2]
            planes[:, :, 0] = planes[:, :, size // 2] = planes[:, :, size - 1] = 100.0
        assert fused["v3 fp32"].path(x) == "v3"
        report = helpers.parity_check(model, fused, [x], kernelbench=False, case=f"seed {seed}")
        judged = report[report.contender == "v3 fp32"]
        assert judged.passed.all(), report.to_string()


def test_plan_info_at_kernelbench_size():
    info = _v3_ext().plan_info(128, 128, 128, 8, 64, 3, 3, 4, False, torch.cuda.current_device(), by_phase=False)
    # Four conv rows of the whole 128-wide input per tile: 512 GEMM rows, 32 tiles for 126 rows.
    assert (info["tile_rows"], info["box_stride"], info["tile_cols"]) == (4, 128, 126)
    assert info["tiles_per_sample"] == 32 and info["channel_chunks"] == 2 and info["k_steps"] == 9
    assert info["pool_in_registers"] == 1
    assert info["bulk_copy"] == (torch.cuda.get_device_capability() >= (9, 0))  # TMA bulk copies on sm_90+
    # An sm_90a build (helpers.target_arch on a 9.0 GPU) runs the GEMM on wgmma in both modes.
    hopper = torch.cuda.get_device_capability() == (9, 0)
    assert info["wgmma"] == hopper
    tf32 = _v3_ext().plan_info(128, 128, 128, 8, 64, 3, 3, 4, True, torch.cuda.current_device())
    assert tf32["wgmma"] == hopper and tf32["k_steps"] == 9
    assert _v3_ext().plan_info(128, 128, 128, 8, 64, 3, 3, 4, True, torch.cuda.current_device(),
                               wgmma=False)["wgmma"] == 0
    # Both modes take the by-phase kernel there (one CTA per tile and SM, all 64 channels): TF32 in 9 k8 steps,
    # fp32 in 5 k16 steps of FP16 hi and lo products.
    fp32 = _v3_ext().plan_info(128, 128, 128, 8, 64, 3, 3, 4, False, torch.cuda.current_device())
    assert info["by_phase"] == 0 and tf32["by_phase"] == hopper and fp32["by_phase"] == hopper
    if hopper:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert tf32["channel_chunks"] == 1 and tf32["ctas"] == sms
        assert fp32["channel_chunks"] == 1 and fp32["ctas"] == sms and fp32["k_steps"] == 5
    for allow_tf32 in (True, False):
        assert _v3_ext().plan_info(128, 128, 128, 8, 64, 3, 3, 4, allow_tf32, torch.cuda.current_device(),
                                   by_phase=False)["by_phase"] == 0


@pytest.mark.parametrize("h, w, c_in, c_out, k, pool, expected", [
    (128, 128, 8, 64, 3, 4, 1),   # KernelBench
    (7, 128, 1, 33, 3, 4, 1),     # one input channel, 33 output channels, two tiles
    (128, 128, 8, 32, 3, 4, 0),   # 32 channels: one 32-channel chunk wastes less than one m64
    (128, 128, 8, 65, 3, 4, 0),   # more than one m64
    (128, 128, 9, 64, 3, 4, 0),   # C_in 9: two k8 slices per tap
    (128, 132, 8, 64, 3, 4, 0),   # W != 128
    (128, 128, 8, 64, 5, 4, 0),   # k 5
    (128, 128, 8, 64, 3, 2, 0),   # pool 2
])
def test_by_phase_plan_envelope(h, w, c_in, c_out, k, pool, expected):
    """Where both modes take the by-phase kernel (on an sm_90a build)."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    device = torch.cuda.current_device()
    for allow_tf32 in (True, False):
        assert _v3_ext().plan_info(h, w, 2, c_in, c_out, k, k, pool, allow_tf32, device)["by_phase"] == expected * hopper


@pytest.mark.parametrize("c_in, k, steps", [
    (3, 3, 6), (1, 5, 15), (4, 7, 28),  # two taps of a column per k8 slice (C_in <= 4): kw * ceil(kh / 2)
    (5, 3, 9), (12, 3, 18),             # C_in > 4: one tap's channels per k8 slice
])
def test_chunks_k_steps(c_in, k, steps):
    """The 32-channel chunks on wgmma, both modes: at C_in <= 4 a k8 slice takes the quad 0 of two taps of one
    column (kw * ceil(kh / 2) k-steps, not kh * kw with a zero quad in each)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma GEMM needs an sm_90a build on a compute capability 9.0 GPU")
    device = torch.cuda.current_device()
    for tf32 in (True, False):
        info = _v3_ext().plan_info(40, 64, 2, c_in, 32, k, k, 2, tf32, device)
        assert info["wgmma"] == 1 and info["by_phase"] == 0
        assert info["k_steps"] == steps, (tf32, info)


@pytest.mark.parametrize("c_in, k_steps, blocks", [
    (1, 5, 6), (3, 5, 6), (4, 5, 6),  # two taps' quad 0 per k8 slice; one slice's halves swap for phase 3
    (5, 9, 9), (8, 9, 9),             # one tap's two quads per k8 slice
])
def test_by_phase_k_steps(c_in, k_steps, blocks):
    """At C_in <= 4 the by-phase kernel packs two taps into a k8 slice: 5 k-steps for 3 x 3 taps, not 9. The fp32
    mode's FP16 k16 slices hold two taps of up to 8 channels: 5 k-steps and 6 weight blocks (hi and lo) at any C_in."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the by-phase kernel needs an sm_90a build on a compute capability 9.0 GPU")
    info = _v3_ext().plan_info(128, 128, 2, c_in, 64, 3, 3, 4, True, torch.cuda.current_device())
    assert info["by_phase"] == 1
    assert (info["k_steps"], info["phase_weight_blocks"]) == (k_steps, blocks)
    fp32 = _v3_ext().plan_info(128, 128, 2, c_in, 64, 3, 3, 4, False, torch.cuda.current_device())
    assert (fp32["by_phase"], fp32["k_steps"], fp32["phase_weight_blocks"]) == (1, 5, 6)


@pytest.mark.parametrize("init, shape", [
    ([8, 64, 3, 16, (64, 1, 1), 4, 0.0, 1.0], (3, 8, 128, 128)),       # KernelBench channels, odd batch
    ([8, 64, 3, 16, (64, 1, 1), 4, 0.0, 1.0], (21, 8, 128, 128)),      # 672 tiles: 5-6 per CTA, both raw boxes reused
    ([3, 64, 3, 16, (64, 1, 1), 4, -0.5, 2.0], (9, 3, 128, 128)),      # C_in 3 (5 k-steps), 2-3 tiles per CTA
    ([8, 64, 3, 16, (64, 1, 1), 4, -1.0, 1.0], (1, 8, 131, 128)),      # batch 1; the last tile has one conv row
    ([3, 48, 3, 6, (48, 1, 1), 4, -1.0, 1.0], (2, 3, 10, 128)),        # C_in 3 (a padded quad), 48 channels
    ([5, 40, 3, 8, (40, 1, 1), 4, -0.5, 0.5], (5, 5, 23, 128)),        # C_in 5, 40 channels
    ([8, 33, 3, 11, (33, 1, 1), 4, -2.0, -0.1], (2, 8, 7, 128)),       # 33 channels, negative bounds
    ([1, 64, 3, 4, (64, 1, 1), 4, 0.2, 0.9], (2, 1, 6, 128)),          # C_in 1, one tile
])
@pytest.mark.parametrize("mode", ["tf32", "fp32"])
@pytest.mark.usefixtures("tf32_products_as_asked")  # the TF32 kernels themselves
def test_by_phase_against_the_chunks(init, shape, mode):
    """The by-phase kernel passes parity and agrees with the 32-channel chunks. TF32 mode: far below TF32's error
    (both multiply the same TF32 operands, in another order); inputs shifted by +100 (not judged against float64
    there) must agree as well: the statistics' shifts at work. fp32 mode (FP16 hi and lo products against the
    chunks' 3xTF32): both judged against float64 at +0 and +100, and agreeing to 1e-6 at +0, +100 and -7."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the by-phase kernel needs an sm_90a build on a compute capability 9.0 GPU")
    torch.manual_seed(2)
    model = B.Model(*init).cuda()
    tf32 = mode == "tf32"
    fused = {f"v3 {mode} by phase": B.ModelNew(*init, variant="v3", allow_tf32=tf32).cuda(),
             f"v3 {mode} chunks": B.ModelNew(*init, variant="v3", allow_tf32=tf32, by_phase=False).cuda()}
    info = _v3_ext().plan_info(shape[2], shape[3], shape[0], init[0], init[1], init[2], init[2], init[5], tf32,
                               torch.cuda.current_device())
    assert info["by_phase"] == 1
    draw = lambda seed: [torch.rand(shape, device="cuda")]
    report = helpers.parity_sweep(model, fused, draw, seeds=(31, 32), shifts=(0.0,) if tf32 else (0.0, 100.0),
                                  tf32=set(fused) if tf32 else ())
    assert report[report.contender.isin(list(fused))].passed.all()
    for shift in (0.0, 100.0, -7.0):
        x = draw(0)[0] + shift
        with torch.no_grad():
            by_phase, chunks = fused[f"v3 {mode} by phase"](x), fused[f"v3 {mode} chunks"](x)
        assert not torch.isnan(by_phase).any()
        assert helpers.errors_vs(chunks, by_phase)["rel_l2"] < (1e-5 if tf32 else 1e-6), shift


@pytest.mark.parametrize("mode", ["tf32", "fp32"])
@pytest.mark.usefixtures("tf32_products_as_asked")  # the TF32 kernels themselves
def test_by_phase_statistics_shift_far_from_the_next_tile(mode):
    """The by-phase kernel shifts a tile's statistics by its CTA's mean two tiles back, often another sample's.
    Samples whose means differ by orders of magnitude force the second, self-centred pass in the TF32 mode; the fp32
    mode moves the shift by the change of d = sum r sum w between the samples (so its first pass usually holds, and
    where the moved shift is off the second pass still runs: only the time can tell them apart, not this test). The
    output agrees with the 32-channel chunks', and a NaN sample stays confined to itself. In the fp32 mode each box
    also gets its own FP16 scale, here over 2.5 decades from one CTA's tile to the next."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the by-phase kernel needs an sm_90a build on a compute capability 9.0 GPU")
    init = B.get_init_inputs()
    torch.manual_seed(4)
    model = B.Model(*init).cuda()
    helpers.randomize_parameters(model, 4)
    by_phase = B.ModelNew(*init, variant="v3", allow_tf32=(mode == "tf32")).cuda()
    chunks = B.ModelNew(*init, variant="v3", allow_tf32=(mode == "tf32"), by_phase=False).cuda()
    for module in (by_phase, chunks):
        module.load_state_dict(model.state_dict())
    # Spreads well above TF32's spacing at each offset (at 1e4 the relay would round [0, 1) away entirely).
    offsets = torch.tensor([0.0, 300.0, -30.0, 1e3, 0.5, -500.0, 100.0, 0.0, 3e3, -2.0], device="cuda")
    scales = torch.tensor([1.0, 1.0, 5.0, 10.0, 1.0, 20.0, 1.0, 1.0, 1e2, 1.0], device="cuda")
    x = torch.rand(10, 8, 64, 128, device="cuda") * scales.view(-1, 1, 1, 1) + offsets.view(-1, 1, 1, 1)
    x[4, 0, 5, 5] = float("nan")
    with torch.no_grad():
        got, expected = by_phase(x), chunks(x)
    assert torch.isnan(got[4]).all() and torch.isnan(expected[4]).all()
    others = [i for i in range(10) if i != 4]
    assert not torch.isnan(got[others]).any()
    for i in others:  # per sample: each has its own scale
        assert helpers.errors_vs(expected[i], got[i])["rel_l2"] < (1e-5 if mode == "tf32" else 1e-6), i


@pytest.mark.parametrize("init, shape, offset, on_wgmma", [
    ([8, 64, 3, 16, (64, 1, 1), 4, 0.0, 1.0], (1, 8, 128, 128), 0, 1),     # KernelBench channels, batch 1
    ([3, 40, 5, 8, (40, 1, 1), 2, -1.0, 1.0], (2, 3, 30, 64), 0, 1),        # C_in 3 padded to 8; a partial chunk
    ([12, 24, 1, 4, (24, 1, 1), 4, -1.0, 1.0], (3, 12, 21, 100), 0, 1),     # two k8 slices per tap, k 1
    ([5, 32, 7, 4, (32, 1, 1), 8, -0.5, 0.5], (2, 5, 40, 72), 0, 1),        # k 7, pool 8
    ([3, 32, 3, 4, (32, 1, 1), 2, -1.0, 1.0], (2, 3, 20, 24), 1, 1),        # misaligned x: cp.async boxes
    ([3, 24, 3, 4, (24, 1, 1), 4, -1.0, 1.0], (2, 3, 20, 300), 0, 1),       # tiles across the width
    ([4, 32, 3, 4, (32, 1, 1), 3, -1.0, 1.0], (2, 4, 31, 64), 0, 1),        # pool 3: the general pooling
    ([17, 48, 3, 6, (48, 1, 1), 4, -1.0, 1.0], (2, 17, 22, 128), 0, 1),     # C_in 17: three slices, 7 padded
    ([1, 32, 3, 4, (32, 1, 1), 2, -1.0, 1.0], (2, 1, 21, 64), 0, 1),        # C_in 1: paired taps, 6 k-steps, not 9
    ([2, 32, 7, 4, (32, 1, 1), 4, -1.0, 1.0], (2, 2, 30, 64), 0, 1),        # C_in 2, k 7: 28 k-steps, not 49
    ([3, 32, 3, 4, (32, 1, 1), 2, -1.0, 1.0], (2, 3, 20, 21), 0, 0),        # BS = 21: mma.sync
    ([3, 16, 3, 4, (16, 1, 1), 2, -1.0, 1.0], (2, 3, 20, 24), 0, 0),        # 16 channels: mma.sync
])
@pytest.mark.parametrize("mode", ["fp32", "tf32"])
@pytest.mark.usefixtures("tf32_products_as_asked")  # the TF32 kernels themselves
def test_gemm_on_wgmma_and_on_mma_sync(init, shape, offset, on_wgmma, mode):
    """The two GEMMs (wgmma from the relaid box where the plan allows it, mma.sync) both pass parity in both
    modes, and agree with each other far below the modes' errors: they multiply the same TF32 operands (hi and
    lo in the fp32-accurate mode) and differ only in the order of the k sum. The plan takes wgmma where
    expected on an sm_90a build."""
    if torch.cuda.get_device_capability() != (9, 0):
        on_wgmma = 0
    torch.manual_seed(1)
    model = B.Model(*init).cuda()
    tf32 = mode == "tf32"
    fused = {f"v3 {mode} wgmma": B.ModelNew(*init, variant="v3", allow_tf32=tf32).cuda(),
             f"v3 {mode} mma.sync": B.ModelNew(*init, variant="v3", allow_tf32=tf32, wgmma=False).cuda()}
    for module in fused.values():
        module.load_state_dict(model.state_dict())
    info = _v3_ext().plan_info(shape[2], shape[3], shape[0], init[0], init[1], init[2], init[2], init[5], tf32,
                               torch.cuda.current_device())
    assert info["wgmma"] == on_wgmma
    draw = lambda seed: [_misaligned_rand(shape, offset)]
    helpers.parity_sweep(model, fused, draw, seeds=(21, 22), shifts=(0.0,) if tf32 else (0.0, 100.0),
                         tf32=set(fused) if tf32 else ())
    x = draw(0)[0]
    with torch.no_grad():
        first, second = fused[f"v3 {mode} wgmma"](x), fused[f"v3 {mode} mma.sync"](x)
    assert helpers.errors_vs(second, first)["rel_l2"] < (1e-5 if tf32 else 1e-6)


@pytest.mark.parametrize("h, w, c_in, k, pool, in_registers", [
    (128, 128, 8, 3, 4, 1),   # KernelBench: whole rows, BS = 128
    (32, 32, 3, 3, 2, 1),     # first release: pool 2, BS = 32
    (43, 64, 4, 3, 8, 1),     # pool 8, BS = 64: one shuffle
    (52, 32, 2, 5, 16, 1),    # pool 16, BS = 32: two shuffles
    (20, 300, 3, 3, 4, 1),    # tiles across the width: the stride is rounded up to a multiple of P
    (20, 21, 3, 3, 2, 0),     # whole rows of odd width: P does not divide BS
    (50, 250, 6, 2, 3, 0),    # pool 3
    (9, 10, 3, 3, 1, 0),      # pool 1
])
def test_pooling_path_per_configuration(h, w, c_in, k, pool, in_registers):
    """Which pooling path a plan takes. The parity tests above run these sizes (the KernelBench test, the envelope
    cases and the odd-width test), so both paths are exercised."""
    info = _v3_ext().plan_info(h, w, 2, c_in, 16, k, k, pool, False, torch.cuda.current_device())
    assert info["pool_in_registers"] == in_registers, info


def test_extension_checks_name_the_argument():
    ext = _v3_ext()
    x = torch.rand(2, 3, 10, 11, device="cuda")
    w = torch.randn(8, 3, 3, 3, device="cuda")
    p = torch.randn(8, device="cuda")
    out = torch.empty(2, 8, 4, 4, device="cuda")
    ok = [x, w, p, p, p, p, 4, 2, -1.0, 1.0, 1e-5, False, out]
    cases = {
        "x must be a CUDA tensor": {0: x.cpu()},
        "x must be float32": {0: x.double()},
        "x must be 4-D": {0: x[0]},
        "x must be contiguous": {0: x.transpose(2, 3)},
        "weight must be on": {1: w.cpu()},
        r"weight must be \(C_out, C_in": {1: w[:, :2].contiguous()},
        "bias must hold one value": {2: p[:3]},
        "gamma must be float32": {3: p.double()},
        "beta must be contiguous": {4: torch.randn(8, 2, device="cuda")[:, 0]},
        "scale must be on": {5: p.cpu()},
        r"groups \(3\) must divide C_out": {6: 3},
        r"out must have shape \(N, C_out, Ho / pool, Wo / pool\)": {12: out[:1]},
        "out must be float32": {12: out.double()},
        "eps must be > 0": {10: 0.0},
        "outside v3's envelope: pool must be in": {7: 17},
        "outside v3's envelope: the pool window is larger": {7: 10},
    }
    for pattern, change in cases.items():
        args = list(ok)
        for i, v in change.items():
            args[i] = v
        with pytest.raises(RuntimeError, match=pattern):
            ext.forward(*args)
    # More channels in one group than the finishing launch's shared memory holds (48 KB: 24 bytes per channel, and
    # 68 per input channel in the fp32 mode): refused before either kernel launches (out stays untouched).
    big = torch.randn(3100, device="cuda")
    out_big = torch.full((2, 3100, 4, 4), 7.0, device="cuda")
    with pytest.raises(RuntimeError, match="too many channels per group"):
        ext.forward(x, torch.randn(3100, 3, 3, 3, device="cuda"), big, big, big, big, 1, 2, -1.0, 1.0, 1e-5, False,
                    out_big)
    torch.cuda.synchronize()
    assert bool((out_big == 7.0).all())


def test_no_allocation_beyond_the_output_and_the_pooled_intermediate():
    _, fused = _models(B.get_init_inputs(), modes=("fp32",))
    x = torch.rand(B.batch_size, B.in_channels, B.height, B.width, device="cuda")
    fused["v3 fp32"](x)  # warm: extension loaded
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fused["v3 fp32"](x)
    torch.cuda.synchronize()
    output = B.batch_size * B.out_channels * 31 * 31 * 4
    # The pooled intermediate lives in the output itself; the only other allocation is the statistics
    # workspace (4.2 MB). The conv output would be 16.5x the output.
    assert torch.cuda.max_memory_allocated() - before <= 2 * output


def test_repeatable_bits():
    """Same inputs, same bits: the statistics merge has a fixed order; no race between CTAs."""
    _, fused = _models(B.get_init_inputs())
    x = torch.rand(8, 8, 128, 128, device="cuda")
    for module in fused.values():
        first = module(x)
        for _ in range(5):
            assert torch.equal(module(x), first)


# The fuzz's TF32 misses (relative L2 over PARITY.md's 2e-3, each with a clamp bound near 0; the last one KernelBench's
# allclose): (seed, its generator in scripts/fuzz_parity.py, init, input shape, relative L2 the fuzz measured with TF32
# products).
_FORMER_TF32_MISSES = [
    (34001668, "wide", [8, 1, 1, 1, (1, 1, 1), 4, -0.3485762608457632, 0.006006988686894532], (1, 8, 10, 50),
     2.07e-3),
    (35008626, "wide", [1, 10, 3, 2, (10, 1, 1), 2, -0.7272558964954507, 0.002389754110535769], (1, 1, 181, 162),
     2.1e-3),
    (69000978, "channels", [1, 46, 1, 23, (46, 1, 1), 6, -0.22935201359383361, 0.004555378098134388], (3, 1, 32, 40),
     2.04e-3),
    (69501492, "wide", [8, 6, 3, 1, (6, 1, 1), 3, -1.3443473543811617, 0.02815378298900062], (1, 8, 25, 22), 4.42e-3),
    (82002709, "default", [4, 8, 1, 4, (8, 1, 1), 8, -0.42409627609951217, -0.03625285761141478], (5, 4, 17, 104),
     2.77e-3),
    (92001739, "default", [2, 3, 2, 1, (3, 1, 1), 7, -1.3275182787441064, 0.0871806537460722], (3, 2, 19, 124),
     2.21e-3),
    pytest.param(99702113, "wide", [3, 3, 1, 1, (3, 1, 1), 2, -0.001444565398830644, 1.5432599881527898],
                 (9, 3, 111, 140), 2.92e-3, marks=pytest.mark.xfail(strict=True, reason=(
                     "a known miss the estimate does not catch: its model leaves out the offsets between the channels "
                     "of a group (here 3 channels in one group, k 1); results/model_b/NOTES.md, 2026-11-28"))),
    pytest.param(99702281, "wide", [3, 42, 3, 7, (42, 1, 1), 1, -0.8141534263112966, 0.14273795759559016],
                 (9, 3, 111, 215), 5.86e-4, marks=pytest.mark.xfail(strict=True, reason=(
                     "a known miss of KernelBench's allclose (atol 1e-2), not of the relative L2: with |gamma scale| "
                     "up to 7.3 one value's TF32 error reaches 0.011; the estimate models the relative L2 only"))),
]


def _wide_draw(rng: random.Random):  # scripts/fuzz_parity.py's wide_b
    init, shape = _random_config(rng)
    if rng.random() < 0.5:
        shape = (rng.choice([1, 2, 9]), shape[1], shape[2] + rng.randint(0, 150), shape[3] + rng.randint(0, 150))
    return init, shape


_FUZZ_DRAWS = {  # scripts/fuzz_parity.py's generators for model B
    "default": _random_config,
    "wide": _wide_draw,
    "channels": lambda rng: _draw_channels_config(rng, [(1, 8), (9, 32)], [(1, 12), (13, 32)], [(1, 8), (9, 16)], 40),
}


@pytest.mark.parametrize("seed, generator, init, shape, was", _FORMER_TF32_MISSES)
def test_tf32_mode_on_former_misses(seed, generator, init, shape, was):
    """The fuzz's TF32 misses, replayed with its own weights and inputs: allow_tf32=True now runs the fp32-accurate
    products where tf32_error_estimate predicts a miss, and passes the TF32 bar on both paths (v3 and v2)."""
    assert _FUZZ_DRAWS[generator](random.Random(seed)) == (init, shape)  # the draw the fuzz made
    for variant in ("v3", "v2"):
        model, fused = _models(init, modes=("tf32",), variant=variant)
        assert fused["v3 tf32"].path(torch.empty(shape, device="cuda"))[:2] == variant
        report = helpers.parity_sweep(model, fused, lambda s: [torch.rand(shape, device="cuda")], seeds=(seed,),
                                      shifts=(0.0,), tf32=("v3 tf32",), raise_on_failure=False)
        judged = report[report.contender == "v3 tf32"]
        products = "TF32" if fused["v3 tf32"].tf32_products() else "fp32-accurate"
        assert len(judged) == 1 and judged.passed.all(), f"{variant}, {products} products:\n{report.to_string()}"


def test_empty_batch():
    _, fused = _models(B.get_init_inputs(), modes=("fp32",))
    assert fused["v3 fp32"](torch.rand(0, 8, 128, 128, device="cuda")).shape == (0, 64, 31, 31)


def test_runs_on_the_current_stream(on_busy_side_stream):
    _, fused = _models([3, 8, 3, 4, (8, 1, 1), 2, -1.0, 1.0], modes=("fp32",))
    module = fused["v3 fp32"]
    x_stale, x_new = torch.rand(3, 3, 20, 24, device="cuda"), torch.rand(3, 3, 20, 24, device="cuda")
    assert module.path(x_new) == "v3"
    with torch.no_grad():
        expected = module(x_new)
        assert torch.equal(on_busy_side_stream(module, x_stale, x_new), expected)
        wrong = on_busy_side_stream(on_busy_side_stream.on_default_stream(module), x_stale, x_new)
        assert not torch.equal(wrong, expected)


def test_nan_input_propagates_like_pytorch():
    """A NaN in a sample's input makes PyTorch's GroupNorm NaN for the whole sample; so does v3."""
    model, fused = _models([2, 4, 3, 2, (4, 1, 1), 2, -1.0, 1.0], modes=("fp32",))
    x = torch.rand(2, 2, 10, 12, device="cuda")
    x[1, 0, 3, 3] = float("nan")
    with torch.no_grad():
        expected, got = model(x), fused["v3 fp32"](x)
    assert torch.isnan(expected[1]).all() and torch.isnan(got[1]).all()
    assert not torch.isnan(got[0]).any()
    torch.testing.assert_close(got[0], expected[0], atol=1e-4, rtol=1e-4)


def test_statistics_shift_far_from_the_next_tile():
    """A CTA shifts each tile's statistics by its previous tile's mean, and that tile is another sample's.
    Samples whose means differ by orders of magnitude force the second, self-centred pass; every sample still
    meets the fp32 criterion against float64 (one parity case over the batch), and a NaN sample stays
    confined to itself (its shift is not carried to the next tile)."""
    model, fused = _models(B.get_init_inputs(), modes=("fp32",))
    torch.manual_seed(3)
    offsets = torch.tensor([0.0, 1e4, -30.0, 1e4, 0.5, -1e4, 100.0, 0.0, 3e3, -2.0], device="cuda")
    scales = torch.tensor([1.0, 1.0, 5.0, 1e-3, 1.0, 2.0, 1.0, 1.0, 1e2, 1.0], device="cuda")
    x = torch.rand(10, 8, 64, 128, device="cuda") * scales.view(-1, 1, 1, 1) + offsets.view(-1, 1, 1, 1)
    assert fused["v3 fp32"].path(x) == "v3"
    report = helpers.parity_check(model, fused, [x], kernelbench=False, case="per-sample offsets and scales")
    assert report[report.contender == "v3 fp32"].passed.all(), report.to_string()
    shifts = torch.tensor([0.0, 100.0, -30.0] * 3 + [1.0], device="cuda").view(-1, 1, 1, 1)
    x = torch.rand(10, 8, 64, 128, device="cuda") + shifts
    x[4, 0, 5, 5] = float("nan")
    with torch.no_grad(), helpers.strict_fp32():
        expected, got = model(x), fused["v3 fp32"](x)
    assert torch.isnan(expected[4]).all() and torch.isnan(got[4]).all()
    others = [i for i in range(10) if i != 4]
    assert not torch.isnan(got[others]).any()
    torch.testing.assert_close(got[others], expected[others], atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("mode, c_out", [("fp32", 4), ("tf32", 4), ("fp32", 32), ("tf32", 32)])
@pytest.mark.usefixtures("tf32_products_as_asked")  # the TF32 kernels themselves
def test_nan_payloads_and_infinities_propagate_in_both_modes(mode, c_out):
    """Every NaN payload and infinity in a sample's input makes the sample NaN, as in PyTorch, in both modes
    (bulk-copy and cp.async boxes; 32 channels: the GEMM on wgmma on sm_90a); the other samples stay finite and
    right."""
    model, fused = _models([2, c_out, 3, 2, (c_out, 1, 1), 2, -1.0, 1.0], modes=(mode,))
    for width in (12, 13):  # W % 4 == 0: TMA bulk box copies on sm_90; 13: cp.async
        x = torch.rand(len(helpers.NAN_AND_INF_BITS) + 2, 2, 10, width, device="cuda")
        x = helpers.one_special_value_per_sample(x)
        assert fused[f"v3 {mode}"].path(x) == "v3"
        helpers.check_special_values(model, fused[f"v3 {mode}"], x, tf32=(mode == "tf32"))


@pytest.mark.parametrize("mode", ["tf32", "fp32"])
@pytest.mark.usefixtures("tf32_products_as_asked")  # the TF32 kernels themselves
def test_nan_payloads_and_infinities_propagate_in_the_by_phase_kernel(mode):
    """As above for the by-phase kernel (W = 128, 64 channels): every NaN payload and infinity makes its sample
    NaN; the other samples stay finite and right. (In the fp32 mode a box's non-finite values also set its FP16
    scale: the sample is NaN whatever the scale.)"""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the by-phase kernel needs an sm_90a build on a compute capability 9.0 GPU")
    model, fused = _models([8, 64, 3, 16, (64, 1, 1), 4, -1.0, 1.0], modes=(mode,))
    x = torch.rand(len(helpers.NAN_AND_INF_BITS) + 2, 8, 10, 128, device="cuda")
    x = helpers.one_special_value_per_sample(x)
    assert _v3_ext().plan_info(10, 128, x.shape[0], 8, 64, 3, 3, 4, mode == "tf32",
                               torch.cuda.current_device())["by_phase"]
    helpers.check_special_values(model, fused[f"v3 {mode}"], x, tf32=(mode == "tf32"))


@pytest.mark.parametrize("case", helpers.FP16_SCALE_CASES)
def test_by_phase_fp32_mode_scales_its_fp16_operands(case):
    """The fp32 mode's by-phase kernel hands the tensor cores FP16 values (5 exponent bits), scaled by powers of two
    per input box and per output channel (weights) so that nothing overflows or underflows: far from [0, 1) in
    either direction, and with one large value among small ones, it must stay within PARITY.md's fp32 bar. The conv
    bias is zeroed so that conv values of order 2^-40 are not lost to its rounding in the float32 yardstick (whose
    error sets the bar). Not run against a build without the scaling: that the first four would overflow or
    underflow FP16 without it is reasoned, not measured."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the by-phase kernel needs an sm_90a build on a compute capability 9.0 GPU")
    init = [8, 64, 3, 16, (64, 1, 1), 4, -1.0, 1.0]
    model, fused = _models(init, modes=("fp32",))
    for seed in (40, 41):
        helpers.randomize_parameters(model, seed)
        # 10 tiles per sample: CTAs of one tile, boxes of one sample
        x = helpers.scale_case(model, torch.rand((3, 8, 40, 128), device="cuda"), case, (1, 2, 17, 9))
        fused["v3 fp32"].load_state_dict(model.state_dict())
        assert _v3_ext().plan_info(40, 128, 3, 8, 64, 3, 3, 4, False, torch.cuda.current_device())["by_phase"]
        report = helpers.parity_check(model, fused, [x], kernelbench=False, case=f"{case}, seed {seed}")
        judged = report[report.contender == "v3 fp32"]
        assert judged.passed.all(), report.to_string()
