"""Model B (KernelBench L2-85) v1 and v2 on the GPU: parity as PARITY.md defines it, generality, bad inputs."""
import random

import pytest
import torch

import helpers
from kernels import model_b_conv2d_groupnorm_pool as B

pytestmark = pytest.mark.gpu


def _models(init, **kwargs):
    torch.manual_seed(0)
    model = B.Model(*init).cuda()
    fused = {v: B.ModelNew(*init, variant=v, **kwargs).cuda() for v in ("v1", "v2")}
    return model, fused


def test_kernelbench_size_parity():
    model, fused = _models(B.get_init_inputs())
    report = helpers.parity_sweep(model, fused, lambda seed: [torch.rand(B.batch_size, B.in_channels, B.height,
                                                                         B.width, device="cuda")], seeds=(0, 1))
    assert report[report.contender.isin(["v1", "v2"])].passed.all()


def test_first_release_size_parity():
    init = [3, 16, 3, 8, (16, 1, 1), 2, -1.0, 1.0]
    model, fused = _models(init)
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(128, 3, 32, 32, device="cuda")], seeds=(2,))


def test_tf32_mode_parity():
    model, fused = _models(B.get_init_inputs(), allow_tf32=True)
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(16, 8, 128, 128, device="cuda")], seeds=(3,),
                         tf32={"v1", "v2"})


def _random_config(rng: random.Random):
    groups = rng.randint(1, 8)
    c_out = groups * rng.randint(1, 6)
    k = rng.choice([1, 3, 5])
    pool = rng.randint(1, 8)
    lo = rng.uniform(-2.0, 1.0)
    hi = lo + rng.uniform(0.0, 2.5)
    init = [rng.randint(1, 12), c_out, k, groups, (c_out, 1, 1), pool, lo, hi]
    shape = (rng.choice([1, 1, 2, 3, 5]), init[0], k - 1 + pool + rng.randint(0, 40),
             k - 1 + pool + rng.randint(0, 40))
    return init, shape


@pytest.mark.parametrize("index", range(50))
def test_random_configurations_parity(index):
    init, shape = _random_config(random.Random(2000 + index))
    model, fused = _models(init)
    helpers.parity_sweep(model, fused, lambda seed: [torch.rand(shape, device="cuda")], seeds=(index,))


def test_window_larger_than_input_raises_like_pytorch():
    model, fused = _models([3, 4, 3, 2, (4, 1, 1), 8, 0.0, 1.0])
    x = torch.rand(1, 3, 8, 8, device="cuda")  # conv output 6 x 6 < pool 8
    with pytest.raises(RuntimeError):
        model(x)
    with pytest.raises(ValueError, match="larger than the conv output"):
        fused["v2"](x)


def test_non_contiguous_channels_last_and_empty_batch():
    model, fused = _models([3, 8, 3, 4, (8, 1, 1), 3, -0.5, 0.5])
    helpers.randomize_parameters(model, 4)
    for f in fused.values():
        f.load_state_dict(model.state_dict())
    x = torch.rand(2, 3, 20, 23, device="cuda")
    expected = model.double()(x.double())
    for name, xi in {"channels_last": x.to(memory_format=torch.channels_last),
                     "transposed view": x.transpose(2, 3).contiguous().transpose(2, 3)}.items():
        for v, f in fused.items():
            torch.testing.assert_close(f(xi).double(), expected, atol=1e-5, rtol=1e-5, msg=f"{name} {v}")
    assert fused["v2"](torch.rand(0, 3, 20, 23, device="cuda")).shape == (0, 8, 6, 7)


@pytest.mark.parametrize("make, message", [
    (lambda: torch.rand(2, 8, 16, 16), "CUDA"),
    (lambda: torch.rand(2, 8, 16, 16, device="cuda", dtype=torch.float64), "float32"),
    (lambda: torch.rand(2, 8, 16, 16, device="cuda", dtype=torch.float16), "float32"),
    (lambda: torch.rand(8, 16, 16, device="cuda"), "unbatched"),
    (lambda: torch.rand(2, 7, 16, 16, device="cuda"), "in_channels=8"),
])
def test_bad_inputs_raise_clearly(make, message):
    _, fused = _models([8, 16, 3, 4, (16, 1, 1), 2, 0.0, 1.0])
    with pytest.raises((ValueError, TypeError), match=message):
        fused["v2"](make())


def test_extension_checks_name_the_argument():
    ext = B._load_extension()
    y = torch.rand(2, 4, 9, 9, device="cuda")
    p = torch.rand(4, device="cuda")
    out = torch.empty(2, 4, 4, 4, device="cuda")
    ok = (y, p, p, p, p, 2, 2, 0.0, 1.0, 1e-5, True, out)
    cases = {
        "groups .* must divide": {5: 3},
        "pool must be in": {6: 0},
        "is larger than the conv output": {6: 10},
        "gamma must hold one value per channel": {2: p[:3]},
        "scale must be on": {4: p.cpu()},
        "out must have shape": {11: out[:1]},
        "y must be 4-D": {0: y[0]},
        "eps must be > 0": {9: 0.0},
    }
    for pattern, change in cases.items():
        args = list(ok)
        for i, v in change.items():
            args[i] = v
        with pytest.raises(RuntimeError, match=pattern):
            ext.fused_tail(*args)


def test_no_allocation_beyond_conv_output_and_pooled_output():
    init = B.get_init_inputs()
    _, fused = _models(init)
    x = torch.rand(B.batch_size, B.in_channels, B.height, B.width, device="cuda")
    fused["v2"](x)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fused["v2"](x)
    torch.cuda.synchronize()
    conv_out = B.batch_size * B.out_channels * 126 * 126 * 4
    assert torch.cuda.max_memory_allocated() - before < 1.2 * conv_out


@pytest.mark.parametrize("variant, allow_tf32", [("v2", False), ("v3", False), ("v3", True)])
@pytest.mark.parametrize("init, shape", [
    ([3, 8, 3, 4, (8, 1, 1), 3, -0.3, 0.8], (2, 3, 13, 12)),      # C_out 8: v3 on mma.sync; a pool that leaves rows
    ([4, 32, 3, 8, (32, 1, 1), 2, -1.0, 1.0], (1, 4, 17, 24)),    # C_out 32: v3 on wgmma on an H100; batch 1
])
def test_gradients_match_pytorch(variant, allow_tf32, init, shape):
    """ModelNew trains: its backward recomputes the unfused model (helpers.recomputed_backward). Every gradient
    (input, conv weight and bias, GroupNorm weight and bias, scale) is judged as PARITY.md judges outputs, against
    PyTorch's float32 gradients with TF32 as the mode says; zero and negative gamma and scale, inputs as drawn and
    +100. Under autograd the forward is still the fused kernel's."""
    model = B.Model(*init).cuda()
    helpers.randomize_parameters(model, 5)
    fused = B.ModelNew(*init, variant=variant, allow_tf32=allow_tf32).cuda()
    for shift in (0.0, 100.0):
        x = torch.rand(shape, device="cuda") + shift
        assert fused.path(x) == variant
        grad_out = torch.randn(model(x).shape, device="cuda")
        report = helpers.gradient_parity(model, fused, [x], grad_out, allow_tf32=allow_tf32)
        assert (report.truth_norm > 0).all()
        helpers.check_forward_under_autograd(fused, x, bitwise=variant == "v3")


def test_backward_differentiates_the_forward_that_ran():
    """Clamp bounds changed between a forward and its backward do not change the gradients: the backward recomputes
    with the bounds that forward ran with (and the new bounds do change a fresh forward's gradients)."""
    init = [3, 8, 3, 4, (8, 1, 1), 3, -0.3, 0.8]
    fused = B.ModelNew(*init).cuda()
    helpers.randomize_parameters(fused, 6)
    x, grad_out = torch.rand(2, 3, 13, 12, device="cuda"), torch.randn(2, 8, 3, 3, device="cuda")

    def narrow_the_clamp():
        fused.clamp_min, fused.clamp_max = -0.05, 0.05
    helpers.check_backward_uses_its_forward(fused, x, grad_out, narrow_the_clamp)


def test_auto_measures_small_problems_once_and_runs_what_it_chose(monkeypatch, measured_auto_choice):
    init = [3, 8, 3, 4, (8, 1, 1), 2, -0.3, 0.8]
    for allow_tf32 in (False, True):
        model = B.Model(*init).cuda()
        helpers.randomize_parameters(model, seed=12)
        fused = B.ModelNew(*init, allow_tf32=allow_tf32).cuda()
        fused.load_state_dict(model.state_dict())
        x = torch.rand(2, 3, 15, 17, device="cuda")
        assert fused.tf32_products() == allow_tf32  # this window and these parameters keep TF32 products
        key = ("model B", tuple(x.shape), 8, (3, 3), 4, 2, allow_tf32, True, True, x.device.index)
        twin = B.ModelNew(*init, allow_tf32=allow_tf32).cuda()  # the same parameters: the same TF32 choice
        twin.load_state_dict(model.state_dict())
        name = measured_auto_choice(fused, x, key, lambda: twin)
        assert name in ("v2", "v3")
        ran = []  # the forward runs the chosen variant, and only that one
        for method_name, variant in (("_forward_v3", "v3"), ("_forward_v1_v2", "v2")):
            method = getattr(fused, method_name)
            monkeypatch.setattr(fused, method_name,
                                lambda *a, method=method, variant=variant: ran.append(variant) or method(*a))
        with torch.no_grad():
            fused(x)
        assert ran == [name]
        helpers.parity_sweep(model, {"auto tf32" if allow_tf32 else "auto": fused},
                             lambda seed: [torch.rand(x.shape, device="cuda")], seeds=(22,), tf32={"auto tf32"})


def test_auto_runs_v3_unmeasured_above_the_cap(monkeypatch):
    monkeypatch.setattr(helpers, "benchmark", lambda *a, **k: pytest.fail("measured"))
    fused = B.ModelNew(*B.get_init_inputs()).cuda()
    x = torch.empty(128, 8, 128, 128, device="cuda")  # conv output 128 x 64 x 126 x 126 floats: 496.1 MiB
    assert fused.path(x).startswith("v3 (auto: v2's conv output would take 496.1 MiB"), fused.path(x)
    assert fused.path(torch.empty(0, 8, 16, 16, device="cuda")) == "v3 (auto: nothing to measure)"
