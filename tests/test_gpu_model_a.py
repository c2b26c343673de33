"""Model A (KernelBench L2-79) on the GPU: parity as PARITY.md defines it, generality, bad inputs.

``ModelNew``'s default, ``variant="auto"``, runs the faster of v3 and v1 (measured once per shape and
mode; v3 alone above ``A.AUTO_MEASURE_MAX_CONV_BYTES``), and v1 where v3's envelope does not reach;
so the tests of the default cover whichever runs. The v1-only tests say so (v3 has its own tests in
test_gpu_model_a_v3.py, which force ``variant="v3"``).

Every parity case draws fresh weights and inputs, includes a zero and a negative multiplier
(helpers.randomize_parameters), checks inputs as drawn and shifted by +100, and hands the kernel
an output buffer poisoned with NaN.
"""
import random

import pytest
import torch

import helpers
from kernels import model_a_conv3d_instnorm_clamp_max as A

pytestmark = pytest.mark.gpu


def _pair(init, **new_kwargs):
    torch.manual_seed(0)
    model = A.Model(*init).cuda()
    fused = A.ModelNew(*init, **new_kwargs).cuda()
    fused.load_state_dict(model.state_dict())
    return model, fused


def test_kernelbench_size_parity():
    model, fused = _pair(A.get_init_inputs(), variant="v1")
    report = helpers.parity_sweep(model, {"v1 fused tail": fused},
                                  lambda seed: [torch.rand(A.batch_size, A.in_channels, A.depth, A.height,
                                                           A.width, device="cuda")], seeds=(0, 1, 2))
    judged = report[report.contender == "v1 fused tail"]
    assert judged.passed.all() and len(judged) == 6
    assert judged[judged.case.str.contains(r"\+0")].kernelbench_allclose.all()


def test_tf32_mode_parity():
    model, fused = _pair(A.get_init_inputs(), allow_tf32=True, variant="v1")
    helpers.parity_sweep(model, {"v1 tf32": fused}, lambda seed: [torch.rand(16, 3, 16, 32, 32, device="cuda")],
                         seeds=(3,), tf32={"v1 tf32"})


def _random_config(rng: random.Random):
    k = rng.randint(1, 5)
    lo = rng.uniform(-2.0, 1.0)
    hi = lo + rng.choice([0.0, rng.uniform(0.05, 2.5)])  # lo == hi included; either sign
    init = [rng.randint(1, 16), rng.choice([rng.randint(1, 40), rng.randint(41, 130)]), k, None, lo, hi]
    init[3] = (init[1], 1, 1, 1)
    shape = (rng.choice([1, 1, 2, 3, 5]), init[0], *(k + rng.randint(0, 19) for _ in range(3)))
    return init, shape


@pytest.mark.parametrize("index", range(30))
def test_random_shapes_parity(index):
    init, shape = _random_config(random.Random(1000 + index))
    model, fused = _pair(init)
    helpers.parity_sweep(model, {"ModelNew": fused}, lambda seed: [torch.rand(shape, device="cuda")],
                         seeds=(index,))


@pytest.mark.parametrize("shape", [(1, 1, 3, 3, 4), (1, 2, 60, 70, 90), (2, 3, 5, 7, 11)])
def test_edge_shapes_parity(shape):
    """Two-element planes (PyTorch refuses one), planes split into chunks (few planes, many positions), odd sizes."""
    init = [shape[1], 1 if shape[0] == 1 and shape[2] > 3 else 5, 3, None, -0.5, 0.7]
    init[3] = (init[1], 1, 1, 1)
    model, fused = _pair(init)
    helpers.parity_sweep(model, {"ModelNew": fused}, lambda seed: [torch.rand(shape, device="cuda")], seeds=(7,))


def test_misaligned_and_odd_conv_output_direct():
    """The extension on a conv output that starts 4 bytes past a 16-byte boundary (scalar head path)."""
    ext = A._load_extension()
    base = torch.randn(2 * 3 * 4 * 4 * 4 + 1, device="cuda", dtype=torch.float32) * 3 + 50
    y = base[1:].view(2, 3, 4, 4, 4)
    assert y.data_ptr() % 16 != 0
    m = torch.tensor([0.7, -1.3, 0.0], device="cuda")
    out = torch.full((2, 4, 4, 4), float("nan"), device="cuda")
    ext.fused_tail(y, m, -0.4, 0.9, 1e-5, out)
    truth = A.tail_math_reference(y.double(), m.double(), -0.4, 0.9)
    torch.testing.assert_close(out.double(), truth, atol=2e-6, rtol=1e-5)


def test_large_offset_statistics_direct():
    """Planes with mean 1e3 and std 1e-2: E[x^2] - E[x]^2 in float32 would return garbage."""
    ext = A._load_extension()
    y = (torch.randn(2, 4, 9, 17, 33, device="cuda", dtype=torch.float64) * 1e-2 + 1e3).float()
    m = torch.tensor([1.5, -0.5, 0.0, 2.0], device="cuda")
    out = torch.full((2, 9, 17, 33), float("nan"), device="cuda")
    ext.fused_tail(y, m, -1.0, 1.0, 1e-5, out)
    truth = A.tail_math_reference(y.double(), m.double(), -1.0, 1.0)
    # Values of y carry float32 rounding of 1e3 (6e-5 absolute, 6e-3 of a std): compare to that.
    err = helpers.errors_vs(truth, out)
    assert err["rel_l2"] < 1e-6, err


@pytest.mark.parametrize("variant", A.VARIANTS)
def test_non_contiguous_and_channels_last_inputs(variant):
    model, fused = _pair([3, 8, 3, (8, 1, 1, 1), -0.3, 0.8], variant=variant)
    x = torch.rand(2, 3, 12, 14, 16, device="cuda")
    expected = model.double()(x.double())
    cases = {
        "channels_last_3d": x.to(memory_format=torch.channels_last_3d),
        "transposed view": x.transpose(3, 4).contiguous().transpose(3, 4),
        "sliced": torch.rand(2, 3, 12, 14, 32, device="cuda")[..., ::2],
    }
    cases["sliced"].copy_(x)
    for name, xi in cases.items():
        assert not xi.is_contiguous(), name
        torch.testing.assert_close(fused(xi).double(), expected, atol=1e-5, rtol=1e-5, msg=name)


def test_empty_batch():
    model, fused = _pair(A.get_init_inputs())
    x = torch.rand(0, 3, 16, 32, 32, device="cuda")
    out = fused(x)
    assert out.shape == model(x).shape == (0, 14, 30, 30)


@pytest.mark.parametrize("make, message", [
    (lambda: torch.rand(2, 3, 8, 8, 8), "CUDA"),
    (lambda: torch.rand(2, 3, 8, 8, 8, device="cuda", dtype=torch.float64), "float32"),
    (lambda: torch.rand(2, 3, 8, 8, 8, device="cuda", dtype=torch.float16), "float32"),
    (lambda: torch.rand(3, 8, 8, 8, device="cuda"), "unbatched"),
    (lambda: torch.rand(1, 2, 3, 8, 8, 8, device="cuda"), "5-D"),
    (lambda: torch.rand(2, 4, 8, 8, 8, device="cuda"), "in_channels=3"),
    (lambda: [torch.rand(2, 3, 8, 8, 8, device="cuda")], "torch.Tensor"),
    (lambda: torch.rand(2, 3, 3, 3, 3, device="cuda"), "one spatial element"),
])
def test_bad_inputs_raise_clearly(make, message):
    _, fused = _pair([3, 4, 3, (4, 1, 1, 1), -1.0, 1.0])
    with pytest.raises((ValueError, TypeError), match=message):
        fused(make())


def test_extension_checks_name_the_argument():
    ext = A._load_extension()
    y = torch.rand(2, 3, 4, 5, 6, device="cuda")
    m = torch.rand(3, device="cuda")
    out = torch.empty(2, 4, 5, 6, device="cuda")
    bad_calls = {
        "y .*CUDA": (y.cpu(), m, out),
        "y must be float32": (y.double(), m, out),
        "y must be 5-D": (y[0], m, out),
        "y must be contiguous": (y.transpose(2, 3), m, out),
        "one value per channel": (y, m[:2], out),
        "multiplier must be on": (y, m.cpu(), out),
        "out must have shape": (y, m, out[:1]),
        "out must be float32": (y, m, out.double()),
        "out must be contiguous": (y, m, out.transpose(1, 2)),
    }
    for pattern, (yy, mm, oo) in bad_calls.items():
        with pytest.raises(RuntimeError, match=pattern):
            ext.fused_tail(yy, mm, -1.0, 1.0, 1e-5, oo)
    with pytest.raises(RuntimeError, match="eps must be > 0"):
        ext.fused_tail(y, m, -1.0, 1.0, 0.0, out)


def test_no_extra_allocation_of_conv_output_size():
    _, fused = _pair(A.get_init_inputs(), variant="v1")
    x = torch.rand(A.batch_size, A.in_channels, A.depth, A.height, A.width, device="cuda")
    fused(x)  # warm: extension loaded, cuDNN workspace sized
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fused(x)
    torch.cuda.synchronize()
    peak_extra = torch.cuda.max_memory_allocated() - before
    conv_out = A.batch_size * A.out_channels * 14 * 30 * 30 * 4
    output = A.batch_size * 14 * 30 * 30 * 4
    # the conv output, the output, the (N*C) statistics, and cuDNN's workspace (if any) -- but
    # never a second tensor of the conv output's size
    assert peak_extra < 2 * conv_out - output, (peak_extra, conv_out)
    assert peak_extra >= conv_out


def test_repeatable():
    """Same inputs, same bits: no race between blocks (v1; v3 has its own test)."""
    _, fused = _pair([3, 16, 3, (16, 1, 1, 1), -1.0, 1.0], variant="v1")
    x = torch.rand(4, 3, 16, 32, 32, device="cuda")
    first = fused(x)
    for _ in range(5):
        assert torch.equal(fused(x), first)


def test_many_channels_use_large_shared_memory():
    """4000 channels: 64 KB of per-channel coefficients, past the 48 KB default (opt-in path)."""
    init = [2, 4000, 1, (4000, 1, 1, 1), -0.7, 0.6]
    model, fused = _pair(init)
    helpers.parity_sweep(model, {"v1 (C_out 4000)": fused}, lambda seed: [torch.rand(2, 2, 3, 4, 5, device="cuda")],
                         seeds=(11,), shifts=(0.0,))


def test_runs_on_the_current_stream(on_busy_side_stream):
    """v1's two launches and cuDNN's conv (v3 has its own test)."""
    model, fused = _pair([3, 8, 3, (8, 1, 1, 1), -1.0, 1.0], variant="v1")
    x_stale, x_new = torch.rand(3, 3, 10, 12, 14, device="cuda"), torch.rand(3, 3, 10, 12, 14, device="cuda")
    with torch.no_grad():
        expected = fused(x_new)
        assert torch.equal(on_busy_side_stream(fused, x_stale, x_new), expected)
        # the check can fail: the same forward launched on the default stream reads the stale input
        wrong = on_busy_side_stream(on_busy_side_stream.on_default_stream(fused), x_stale, x_new)
        assert not torch.equal(wrong, expected)


@pytest.mark.parametrize("variant, allow_tf32", [("v1", False), ("v3", False), ("v3", True)])
@pytest.mark.parametrize("shift", [0.0, 100.0])
def test_gradients_match_pytorch(variant, allow_tf32, shift):
    """ModelNew trains: its backward recomputes the unfused model (helpers.recomputed_backward). Every gradient
    (input, conv weight and bias, multiplier) is judged as PARITY.md judges outputs, against PyTorch's float32
    gradients with TF32 as the mode says; a zero and a negative multiplier, odd sizes. Under autograd the forward
    is still the fused kernel's."""
    init = [3, 6, 3, (6, 1, 1, 1), -0.8, 0.9]
    model = A.Model(*init).cuda()
    helpers.randomize_parameters(model, 4)
    fused = A.ModelNew(*init, variant=variant, allow_tf32=allow_tf32).cuda()
    x = torch.rand(3, 3, 6, 7, 9, device="cuda") + shift
    if torch.cuda.get_device_capability() >= (9, 0):
        assert fused.path(x) == variant
    report = helpers.gradient_parity(model, fused, [x], torch.randn(3, 4, 5, 7, device="cuda"),
                                     allow_tf32=allow_tf32)
    assert (report.drop("conv.bias").truth_norm > 0).all()  # the bias cancels in InstanceNorm: its gradient is ~0
    helpers.check_forward_under_autograd(fused, x, bitwise=variant == "v3")


def test_backward_differentiates_the_forward_that_ran():
    """Clamp bounds changed between a forward and its backward do not change the gradients: the backward recomputes
    with the bounds that forward ran with (and the new bounds do change a fresh forward's gradients)."""
    init = [3, 6, 3, (6, 1, 1, 1), -0.8, 0.9]
    fused = A.ModelNew(*init).cuda()
    helpers.randomize_parameters(fused, 6)
    x, grad_out = torch.rand(2, 3, 6, 7, 9, device="cuda"), torch.randn(2, 4, 5, 7, device="cuda")

    def narrow_the_clamp():
        fused.clamp_min, fused.clamp_max = -0.05, 0.05
    helpers.check_backward_uses_its_forward(fused, x, grad_out, narrow_the_clamp)


def test_auto_measures_small_problems_once_and_runs_what_it_chose(monkeypatch, measured_auto_choice):
    init = [3, 8, 3, (8, 1, 1, 1), -0.6, 0.9]
    for allow_tf32 in (False, True):
        model, fused = _pair(init, allow_tf32=allow_tf32)
        helpers.randomize_parameters(model, seed=11)
        fused.load_state_dict(model.state_dict())
        x = torch.rand(2, 3, 7, 9, 11, device="cuda")
        assert fused.tf32_products() == allow_tf32  # this window and these multipliers keep TF32 products
        twin = A.ModelNew(*init, allow_tf32=allow_tf32).cuda()  # the same parameters: the same TF32 choice
        twin.load_state_dict(model.state_dict())
        name = measured_auto_choice(fused, x, ("model A", tuple(x.shape), 8, 3, allow_tf32, x.device.index),
                                    lambda: twin)
        assert name in ("v1", "v3")
        # The forward runs the chosen path, and only that one.
        ran = []
        for variant in ("v1", "v3"):
            method = getattr(fused, f"_forward_{variant}")
            monkeypatch.setattr(fused, f"_forward_{variant}",
                                lambda *a, method=method, variant=variant: ran.append(variant) or method(*a))
        with torch.no_grad():
            fused(x)
        assert ran == [name]
        helpers.parity_sweep(model, {"auto tf32" if allow_tf32 else "auto": fused},
                             lambda seed: [torch.rand(x.shape, device="cuda")], seeds=(21,),
                             tf32={"auto tf32"})


def test_auto_runs_v3_unmeasured_above_the_cap_and_v1_outside_the_envelope(monkeypatch):
    monkeypatch.setattr(helpers, "benchmark", lambda *a, **k: pytest.fail("measured"))
    fused = A.ModelNew(*A.get_init_inputs()).cuda()
    x = torch.empty(128, 3, 16, 32, 32, device="cuda")  # conv output 128 x 16 x 14 x 30 x 30 floats: 98.4 MiB
    assert fused.path(x).startswith("v3 (auto: v1's conv output would take 98.4 MiB"), fused.path(x)
    wide = A.ModelNew(3, 40, 3, (40, 1, 1, 1), -1.0, 1.0).cuda()  # C_out 40: outside v3's envelope
    assert wide.path(torch.empty(1, 3, 6, 6, 6, device="cuda")).startswith("v1 (v3 unsupported")
    assert fused.path(torch.empty(0, 3, 6, 6, 6, device="cuda")) == "v3 (auto: nothing to measure)"
