"""CPU tests: model A's algebra in plain PyTorch, the KernelBench interface, and helpers.py."""
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import helpers
from kernels import model_a_conv3d_instnorm_clamp_max as A


# ---- model A: the algebra the fused tail relies on ------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_model_a_tail_algebra_matches_reference(seed):
    """Stats of m*y from those of y; bias cancels; zero/negative multipliers; clamp of either sign."""
    g = torch.Generator().manual_seed(seed)
    n, c = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g))
    init = [2, c, 3, (c, 1, 1, 1), *sorted(torch.empty(2).uniform_(-1.5, 1.5, generator=g).tolist())]
    model = A.Model(*init).double()
    helpers.randomize_parameters(model, seed)  # puts a 0 and a negative into the multiplier
    x = torch.rand(n, 2, 5, 6, 7, generator=g, dtype=torch.float64) + (100.0 if seed % 2 else 0.0)
    y_no_bias = torch.nn.functional.conv3d(x, model.conv.weight)
    got = A.tail_math_reference(y_no_bias, model.multiplier, model.clamp_min, model.clamp_max)
    torch.testing.assert_close(got, model(x), atol=1e-9, rtol=1e-9)


def test_shifted_float64_sums_survive_a_large_offset():
    """What pass 1 does: sums of d = y - K in float64 give the variance where float32 E[y^2]-E[y]^2 fails."""
    y = (torch.randn(12600, dtype=torch.float64) * 1e-2 + 1e3).float()
    exact = y.double().var(unbiased=False).item()
    naive32 = (y * y).mean() - y.mean() ** 2  # the collapse the kernel avoids
    d = (y - y[0]).double()
    shifted = ((d * d).mean() - d.mean() ** 2).item()
    assert abs(shifted - exact) / exact < 1e-9
    assert abs(naive32.item() - exact) / exact > 1e-2


def _one_channel_tf32_error(lo: float, hi: float) -> float:
    """tf32_error_estimate's model for one channel with m = 1, in closed form: TF32_Z_ERROR * sqrt(P(lo < z < hi) /
    E[clamp(z, lo, hi)^2]), z standard normal (E[z^2; a < z < b] = [cdf(z) - z pdf(z)] from a to b)."""
    cdf = lambda z: 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))  # noqa: E731
    pdf = lambda z: math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)  # noqa: E731
    mean_square = (lo * lo * cdf(lo) + hi * hi * (1.0 - cdf(hi)) + (cdf(hi) - hi * pdf(hi)) - (cdf(lo) - lo * pdf(lo)))
    return A.TF32_Z_ERROR * math.sqrt((cdf(hi) - cdf(lo)) / mean_square)


def test_tf32_error_estimate_matches_its_model():
    """The Monte Carlo estimate against the closed form for one channel, and against a direct simulation of its model
    (z_c + an error of TF32_Z_ERROR, clamp, x m, max over channels) for several channels."""
    for lo, hi in ((-1.0, 1.0), (0.0, 1.0), (-0.0105, 0.0586), (-0.3, 0.3), (0.86, 3.06), (-2.0, -0.1)):
        assert A.tf32_error_estimate(torch.ones(1), lo, hi) == pytest.approx(_one_channel_tf32_error(lo, hi), rel=0.03)
    generator = torch.Generator().manual_seed(1)
    for m, lo, hi in (([0.0, -0.7, 1.3], -0.006, 0.83), ([0.0, -1.1, 0.4, 0.9, 2.0], -0.0105, 0.0586),
                      (torch.randn(16, generator=generator).tolist(), -1.0, 1.0), ([0.0, -0.5], -0.3, 0.5)):
        m = torch.tensor(m, dtype=torch.float64)
        z = torch.randn(400_000, len(m), generator=generator, dtype=torch.float64)
        noise = A.TF32_Z_ERROR * torch.randn(z.shape, generator=generator, dtype=torch.float64)
        clean = (m * z.clamp(lo, hi)).max(dim=1).values
        noisy = (m * (z + noise).clamp(lo, hi)).max(dim=1).values
        simulated = ((noisy - clean).norm() / clean.norm()).item()
        assert A.tf32_error_estimate(m, lo, hi) == pytest.approx(simulated, rel=0.1), (m, lo, hi)
    assert A.tf32_error_estimate(torch.ones(3), 0.5, -0.5) == 0.0  # lo > hi: a constant output
    assert A.tf32_error_estimate(torch.tensor([0.0, -1.0]), 0.0, 1.0) == 0.0  # max(0, -clamp(z, 0, 1)) = 0


def test_tf32_products_switch_on_the_multipliers_and_bounds():
    """allow_tf32 keeps TF32 products at the KernelBench window with 16 channels; a narrow window near 0, or a bound
    near 0 with three channels, one multiplier 0 and the others negative (the outputs then sit near that bound), runs
    the fp32-accurate ones.
    The answer follows in-place changes to the multipliers and the bounds."""
    torch.manual_seed(0)
    init = list(A.get_init_inputs())
    fused = A.ModelNew(*init, allow_tf32=True)
    assert fused.tf32_products() and not A.ModelNew(*init, allow_tf32=False).tf32_products()
    fused.clamp_min, fused.clamp_max = -0.0105, 0.0586
    assert not fused.tf32_products()
    fused.clamp_min, fused.clamp_max = -1.0, 1.0
    assert fused.tf32_products()
    three = A.ModelNew(4, 3, 5, (3, 1, 1, 1), -0.006, 0.83, allow_tf32=True)
    with torch.no_grad():
        three.multiplier.copy_(torch.tensor([1.0, 1.2, 0.8]).reshape(3, 1, 1, 1))
    assert three.tf32_products()
    with torch.no_grad():
        three.multiplier.copy_(torch.tensor([0.0, -0.7, -1.3]).reshape(3, 1, 1, 1))
    assert not three.tf32_products()


def test_kernelbench_interface():
    init = A.get_init_inputs()
    assert init == [3, 16, 3, (16, 1, 1, 1), -1.0, 1.0]
    (x,) = A.get_inputs()
    assert x.shape == (128, 3, 16, 32, 32) and x.dtype == torch.float32 and 0 <= x.min() and x.max() < 1
    model, fused = A.Model(*init), A.ModelNew(*init)
    fused.load_state_dict(model.state_dict())  # same parameter names and shapes
    assert A.Model(*init)(x[:2]).shape == (2, 14, 30, 30)


def test_model_new_refuses_cpu_input_and_bad_multiplier_shape():
    fused = A.ModelNew(*A.get_init_inputs())
    with pytest.raises(ValueError, match="CUDA"):
        fused(torch.rand(1, 3, 8, 8, 8))
    with pytest.raises(ValueError, match="multiplier_shape"):
        A.ModelNew(3, 16, 3, (16,), -1.0, 1.0)
    with pytest.raises(ValueError, match="out_channels"):
        A.ModelNew(3, 0, 3, (0, 1, 1, 1), -1.0, 1.0)
    with pytest.raises(ValueError, match="out_channels"):
        A.ModelNew(3, 8193, 3, (8193, 1, 1, 1), -1.0, 1.0)


def test_model_new_variants_and_path_without_a_gpu():
    """"auto" is the default; path() answers for a CPU tensor without measuring (forward refuses it, above)."""
    assert A.ModelNew(*A.get_init_inputs()).variant == "auto"
    for variant in ("auto", "v3"):
        path = A.ModelNew(*A.get_init_inputs(), variant=variant).path(torch.rand(1, 3, 8, 8, 8))
        assert path == "v1 (v3 unsupported: x is not a CUDA tensor)"
    assert A.ModelNew(*A.get_init_inputs(), variant="v1").path(torch.rand(1, 3, 8, 8, 8)) == "v1"
    with pytest.raises(ValueError, match="variant must be one of"):
        A.ModelNew(*A.get_init_inputs(), variant="v2")


# ---- helpers: parity --------------------------------------------------------------------------

class _Offset(A.Model):
    """A 'fused' stand-in with the model's parameters: its output plus a constant, written into
    out= when given one (unless told to ignore it)."""

    def __init__(self, offset, write_out=True):
        super().__init__(2, 4, 3, (4, 1, 1, 1), -0.5, 0.5)
        self.offset, self.write_out = offset, write_out

    def forward(self, x, out=None):
        result = super().forward(x) + self.offset
        if out is not None and self.write_out:
            out.copy_(result)
            return out
        return result


def _tiny_model():
    return A.Model(2, 4, 3, (4, 1, 1, 1), -0.5, 0.5)


def _inputs(seed):
    return [torch.rand(2, 2, 5, 6, 7, generator=torch.Generator().manual_seed(seed))]


def test_recomputed_backward_gives_the_unfused_gradients():
    """The forward value is the fused callable's, the gradients are the unfused one's (a None tensor and an
    unused one included), and without a tensor that needs a gradient no autograd node is made."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    unused = torch.randn(2, dtype=torch.float64, requires_grad=True)

    def unfused(x, w, bias, unused):
        return torch.tanh(x * w).sum(dim=1)

    def fused(x, w, bias, unused):  # the same value by another route, and visibly not unfused's
        with torch.no_grad():
            return torch.tanh(x * w).sum(dim=1) + 0.5

    grad_out = torch.randn(3, dtype=torch.float64)
    out = helpers.recomputed_backward(fused, unfused, (x, w, None, unused), allow_tf32=False)
    torch.testing.assert_close(out, unfused(x, w, None, unused) + 0.5)
    got = torch.autograd.grad(out, (x, w, unused), grad_out)
    want = torch.autograd.grad(unfused(x, w, None, unused), (x, w), grad_out)
    torch.testing.assert_close(got[:2], want, atol=0, rtol=0)
    assert torch.equal(got[2], torch.zeros_like(unused))
    with torch.no_grad():
        assert helpers.recomputed_backward(fused, unfused, (x, w, None, unused), allow_tf32=False).grad_fn is None
    frozen = [t.detach() for t in (x, w, unused)]
    assert helpers.recomputed_backward(fused, unfused, (frozen[0], frozen[1], None, frozen[2]),
                                       allow_tf32=False).grad_fn is None


def test_gradient_parity_passes_pytorch_and_catches_a_wrong_gradient():
    """A copy of the model passes; one whose multiplier gradient is lost or off by 1e-3 fails."""
    init = [2, 4, 3, (4, 1, 1, 1), -0.8, 0.9]
    model = A.Model(*init)
    helpers.randomize_parameters(model, 1)
    x, grad_out = torch.rand(2, 2, 5, 6, 7), torch.randn(2, 3, 4, 5)
    report = helpers.gradient_parity(model, A.Model(*init), [x], grad_out)
    assert list(report.index) == ["x0", "multiplier", "conv.weight", "conv.bias"] and report.passed.all()
    assert (report.drop("conv.bias").truth_norm > 0).all()  # InstanceNorm cancels the bias: its gradient is ~0

    class Detached(A.Model):
        def forward(self, x):
            m = self.multiplier.detach()
            y = self.instance_norm(self.conv(x) * m)
            return (torch.clamp(y, self.clamp_min, self.clamp_max) * m).max(dim=1)[0]

    class Scaled(A.Model):
        def forward(self, x):
            y = super().forward(x)
            return y + 1e-3 * (y - y.detach())  # the same value; every gradient 1.001 x

    for broken in (Detached(*init), Scaled(*init)):
        with pytest.raises(helpers.ParityError, match="multiplier"):
            helpers.gradient_parity(model, broken, [x], grad_out)


def test_check_forward_under_autograd():
    """Passes a module whose forward goes through recomputed_backward; fails one that bypasses it, and one whose
    output under autograd is not the one under no_grad."""
    class Toy(torch.nn.Module):
        def __init__(self, route):
            super().__init__()
            self.w, self.route = torch.nn.Parameter(torch.randn(4)), route

        def forward(self, x):
            def unfused(x, w):
                return torch.tanh(x * w)
            if self.route == "bypass":
                return unfused(x, self.w)
            offset = 1e-3 if self.route == "differs" and torch.is_grad_enabled() else 0.0
            return helpers.recomputed_backward(lambda x, w: unfused(x, w).detach() + offset, unfused, (x, self.w),
                                               allow_tf32=False)

    x = torch.randn(3, 4)
    helpers.check_forward_under_autograd(Toy("fused"), x, bitwise=True)
    for route in ("bypass", "differs"):
        with pytest.raises(helpers.ParityError):
            helpers.check_forward_under_autograd(Toy(route), x, bitwise=False)


def test_check_backward_uses_its_forward():
    """Passes a module whose backward recomputes with the scale its forward ran with; fails one that reads the
    scale at backward time, and a change that moves no gradient (the case could not tell)."""
    class Toy(torch.nn.Module):
        def __init__(self, late):
            super().__init__()
            self.w, self.scale, self.late = torch.nn.Parameter(torch.randn(4)), 1.0, late

        def forward(self, x):
            scale = self.scale

            def unfused(x, w):
                return torch.tanh(x * w * (self.scale if self.late else scale))
            return helpers.recomputed_backward(lambda x, w: unfused(x, w).detach(), unfused, (x, self.w),
                                               allow_tf32=False)

    x, grad_out = torch.randn(3, 4), torch.randn(3, 4)
    good = Toy(late=False)
    helpers.check_backward_uses_its_forward(good, x, grad_out, lambda: setattr(good, "scale", 3.0))
    late = Toy(late=True)
    with pytest.raises(helpers.ParityError, match="used the changed"):
        helpers.check_backward_uses_its_forward(late, x, grad_out, lambda: setattr(late, "scale", 3.0))
    inert = Toy(late=False)
    with pytest.raises(helpers.ParityError, match="cannot tell"):
        helpers.check_backward_uses_its_forward(inert, x, grad_out, lambda: None)


@pytest.mark.parametrize("seed", range(3))
def test_model_new_backward_recomputes_the_reference(seed):
    """What ModelNew's backward differentiates (unfused_reference) is Model itself: values and gradients in float64, zero and
    negative multipliers, clamp bounds of either sign, inputs shifted by +100 on odd seeds."""
    g = torch.Generator().manual_seed(seed)
    lo = float(torch.empty(1).uniform_(-1.5, 0.5, generator=g))
    init = [2, 5, 3, (5, 1, 1, 1), lo, lo + 1.0]
    model = A.Model(*init).double()
    helpers.randomize_parameters(model, seed)
    x = torch.rand(2, 2, 5, 6, 7, generator=g, dtype=torch.float64) + (100.0 if seed % 2 else 0.0)
    params = (model.conv.weight, model.conv.bias, model.multiplier)
    want = model(x)
    got = A.unfused_reference(x, *params, model.clamp_min, model.clamp_max, model.instance_norm.eps)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    grad_out = torch.randn(want.shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(torch.autograd.grad(got, params, grad_out, retain_graph=True),
                               torch.autograd.grad(want, params, grad_out), atol=1e-10, rtol=1e-10)


def test_parity_passes_an_exact_contender():
    model = _tiny_model()
    report = helpers.parity_sweep(model, {"same": _Offset(0.0)}, _inputs, seeds=(0, 1))
    judged = report[report.contender == "same"]
    assert len(judged) == 4 and judged.passed.all()
    assert set(report.contender) == {"eager (default flags)", "yardstick (fp32, TF32 off)", "same"}
    summary = helpers.parity_summary(report)
    assert bool(summary.loc["same", "all_passed"])


def test_parity_fails_a_contender_off_by_1e_4():
    model = _tiny_model()
    with pytest.raises(helpers.ParityError, match="off"):
        helpers.parity_sweep(model, {"off": _Offset(1e-4)}, _inputs, seeds=(0,))


def test_parity_catches_an_unwritten_output():
    model = _tiny_model()
    with pytest.raises(helpers.ParityError):
        helpers.parity_sweep(model, {"lazy": _Offset(0.0, write_out=False)}, _inputs, seeds=(0,))


def test_parity_tf32_mode_limit():
    model = _tiny_model()
    report = helpers.parity_sweep(model, {"t": _Offset(1e-5)}, _inputs, seeds=(0,), tf32={"t"})
    assert report[report.contender == "t"].iloc[0]["mode"] == "tf32"
    with pytest.raises(helpers.ParityError):
        helpers.parity_sweep(model, {"t": _Offset(0.05)}, _inputs, seeds=(0,), tf32={"t"})


def test_errors_vs():
    truth = torch.tensor([1.0, -2.0, 2.0])
    err = helpers.errors_vs(truth, torch.tensor([1.0, -2.0, float("nan")]))
    assert err["nan_where_truth_finite"]
    err = helpers.errors_vs(truth, torch.tensor([1.0, -2.0, 2.3]))
    assert math.isclose(err["max_abs"], 0.3, rel_tol=1e-6)
    assert math.isclose(err["rel_l2"], 0.3 / 3.0, rel_tol=1e-6)


def test_randomize_parameters_covers_zero_and_negative():
    model = _tiny_model()
    helpers.randomize_parameters(model, 5)
    m = model.multiplier.view(-1)
    assert m[0] == 0 and m[1] < 0
    w1 = model.conv.weight.clone()
    helpers.randomize_parameters(model, 6)
    assert not torch.equal(w1, model.conv.weight)


# ---- helpers: timing, results, plots, environment, build errors -------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_benchmark_without_gpu_says_so(capsys):
    assert helpers.benchmark({"x": lambda: None}) is None
    assert "No CUDA GPU" in capsys.readouterr().out
    assert helpers.measure_ceilings() is None


def test_results_round_trip_and_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(helpers, "RESULTS_DIR", tmp_path)
    summary = pd.DataFrame({"median_ms": [1.0, 0.5], "p10_ms": [0.9, 0.45], "p90_ms": [1.1, 0.55]},
                           index=pd.Index(["eager", "fused"], name="contender"))
    env = helpers.environment_report()
    helpers.save_results("demo", env, timing=summary, ceilings={"copy_TBps": 3.0})
    back = helpers.load_results("demo")
    assert back["env"]["torch"] == torch.__version__ and back["ceilings"]["copy_TBps"] == 3.0
    pd.testing.assert_frame_equal(back["timing"], summary)
    pd.testing.assert_frame_equal(helpers.load_results("demo", root=tmp_path)["timing"], summary)  # explicit folder
    helpers.plot_timings(summary, env, "demo", save_stem="demo")
    helpers.plot_roofline(summary, {"bytes floor": 0.1}, env, "demo", save_stem="demo")
    for name in ("timing.png", "timing.svg", "roofline.png", "roofline.svg", "timing.csv", "env.json"):
        assert (tmp_path / "demo" / name).stat().st_size > 0, name


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_fastest_without_gpu_returns_the_default_unmeasured():
    ran = []
    assert helpers.fastest(("cpu test",), {"a": lambda: ran.append("a"), "b": lambda: ran.append("b")}) == ("a", {})
    assert ran == [] and ("cpu test",) not in helpers._FASTEST
    assert helpers.time_auto_choice(None, None, None, ("v3", "v1")) is None


def test_auto_path_untimed_cases_keep_the_default_and_run_nothing():
    ran = []
    def candidates():
        return {"v3": lambda: ran.append("v3"), "v1": lambda: ran.append("v1")}
    over = helpers.auto_path(("cpu auto_path", 1), candidates, conv_bytes=3 * 2**20 + 1, cap_bytes=3 * 2**20)
    assert over == "v3 (auto: v1's conv output would take 3.0 MiB, over 3 MiB: not measured)"
    none = helpers.auto_path(("cpu auto_path", 2), candidates, conv_bytes=0, cap_bytes=3 * 2**20, measurable=False)
    assert none == "v3 (auto: nothing to measure)"
    assert ran == [] and not any(key[0] == "cpu auto_path" for key in helpers._FASTEST if isinstance(key, tuple))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_auto_path_without_gpu_says_it_did_not_measure():
    ran = []
    built = []
    def candidates():
        built.append(True)
        return {"v3": lambda: ran.append("v3"), "v2": lambda: ran.append("v2")}
    for _ in range(2):  # not remembered: a later forward with a GPU would measure
        path = helpers.auto_path(("cpu auto_path", 3), candidates, conv_bytes=1024, cap_bytes=2**20)
        assert path.startswith("v3 (auto: not measured: no GPU") and ran == []
    assert len(built) == 2


def test_auto_path_remembers_its_answer_and_builds_the_candidates_once(monkeypatch):
    built, key = [], ("cpu auto_path", 4)
    def candidates():
        built.append(True)
        return {"v3": lambda: None, "v1": lambda: None}
    def measured(k, mapping):  # stands in for fastest(): remembers a measurement as it does
        assert list(mapping) == ["v3", "v1"]
        helpers._FASTEST[k] = ("v1", {"v3": 0.02, "v1": 0.01})
        return helpers._FASTEST[k]
    monkeypatch.setattr(helpers, "fastest", measured)
    try:
        first = helpers.auto_path(key, candidates, conv_bytes=1024, cap_bytes=2**20)
        assert first == "v1 (auto: measured v3 20.0 us, v1 10.0 us)" and len(built) == 1
        assert helpers.auto_path(key, candidates, conv_bytes=1024, cap_bytes=2**20) == first and len(built) == 1
        over = helpers.auto_path(key, candidates, conv_bytes=2**21, cap_bytes=2**20)  # another question
        assert over.startswith("v3 (auto: v1's conv output would take 2.0 MiB") and len(built) == 2
        assert helpers.auto_path(key, candidates, conv_bytes=2**21, cap_bytes=2**20) == over and len(built) == 2
        helpers._FASTEST.pop(key)  # a forgotten measurement is taken again
        assert helpers.auto_path(key, candidates, conv_bytes=1024, cap_bytes=2**20) == first and len(built) == 3
    finally:
        helpers._FASTEST.pop(key, None)


def test_check_kernelbench_allclose_names_every_wrong_output():
    reference = torch.linspace(-1, 1, 12).reshape(3, 4)
    helpers.check_kernelbench_allclose({"same": reference.clone(), "close": reference + 0.009}, reference, "here")
    nan = reference.clone()
    nan[1, 2] = float("nan")
    outputs = {"ok": reference + 0.005, "off": reference + 0.03, "shape": reference.reshape(4, 3), "nan": nan}
    with pytest.raises(helpers.ParityError, match=r"^batch 4: \['off', 'shape', 'nan'\] differ from eager beyond"):
        helpers.check_kernelbench_allclose(outputs, reference, "batch 4", "eager")


def test_auto_choice_summary_counts_and_sums():
    table = pd.DataFrame({"mode": ["fp32", "TF32", "fp32", "TF32"], "auto chose": ["v1", "v3", "v3", "v3"],
                          "v3 us": [30.0, 20.0, 10.0, 8.0], "v1 us": [15.0, 25.0, 12.0, 7.0]})
    table["chosen us"] = [15.0, 20.0, 10.0, 8.0]
    table["chosen / faster"] = table["chosen us"] / table[["v3 us", "v1 us"]].min(axis=1)
    summary = helpers.auto_choice_summary(table, ("v3", "v1"))
    assert list(summary.columns) == ["fp32", "TF32"]
    fp32, tf32 = summary["fp32"], summary["TF32"]
    assert fp32["configurations"] == 2 and fp32["auto chose v1"] == 1 and fp32["v1 the faster"] == 1
    assert fp32["sum, v3 always (ms)"] == pytest.approx(0.040) and fp32["sum, auto (ms)"] == pytest.approx(0.025)
    assert fp32["sum, the faster each time (ms)"] == pytest.approx(0.025) and fp32["auto / the faster, worst"] == 1
    assert tf32["auto chose v1"] == 0 and tf32["v1 the faster"] == 1
    assert tf32["auto / the faster, worst"] == pytest.approx(8 / 7) and tf32["auto within 1.07 of the faster"] == 1
    assert "with TF32 products" not in summary.index  # the column is counted only where the table has it
    table["TF32 products"] = [False, True, False, False]  # the second TF32 configuration switched to fp32 products
    summary = helpers.auto_choice_summary(table, ("v3", "v1"))
    assert summary["fp32"]["with TF32 products"] == 0 and summary["TF32"]["with TF32 products"] == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_batch_sweep_without_gpu_says_so(capsys):
    assert helpers.batch_sweep({"x": lambda x: x}, torch.rand, [1, 2]) is None
    assert "No CUDA GPU" in capsys.readouterr().out


def test_batch_sweep_logic_with_a_stand_in_timer(monkeypatch):
    """batch_sweep's own logic on the CPU: ``benchmark`` replaced by a stand-in that calls each
    contender once and reports fixed times (the real timer is covered by tests/test_gpu_helpers.py)."""
    def stand_in(contenders, runs, queue_ahead_us):
        assert queue_ahead_us == 500.0
        for fn in contenders.values():
            fn()
        samples = pd.DataFrame([{"contender": n, "run": i, "ms": 1.0 + k} for k, n in enumerate(contenders)
                                for i in range(runs)])
        summary = samples.groupby("contender", sort=False)["ms"].agg(
            median_ms="median", p10_ms=lambda s: s.quantile(0.1), p90_ms=lambda s: s.quantile(0.9))
        summary["speedup_vs_first"] = summary["median_ms"].iloc[0] / summary["median_ms"]
        summary.attrs["samples"] = samples
        return summary
    monkeypatch.setattr(helpers, "gpu_available", lambda: True)
    monkeypatch.setattr(helpers, "benchmark", stand_in)
    linear = torch.nn.Linear(8, 4)
    good = {"eager": linear, "same maths": lambda x: x @ linear.weight.T + linear.bias}
    sweep = helpers.batch_sweep(good, lambda b: torch.rand(b, 8), [1, 4], runs=100)
    assert list(zip(sweep.batch, sweep.contender)) == [(1, "eager"), (1, "same maths"), (4, "eager"), (4, "same maths")]
    assert sweep.us_per_sample.tolist() == pytest.approx([1000.0, 2000.0, 250.0, 500.0])
    assert len(sweep.attrs["samples"]) == 4 * 100 and set(sweep.attrs["samples"].batch) == {1, 4}
    for wrong in (lambda x: linear(x) + 0.1, lambda x: linear(x).index_fill(0, torch.tensor([0]), float("nan")),
                  lambda x: linear(x)[:, :3]):
        with pytest.raises(helpers.ParityError, match="batch 3: \\['wrong'\\]"):
            helpers.batch_sweep({"eager": linear, "wrong": wrong}, lambda b: torch.rand(b, 8), [3], runs=100)


def test_batch_sweep_plot_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(helpers, "RESULTS_DIR", tmp_path)
    sweep = pd.DataFrame([(b, name, ms * b, 0.9 * ms * b, 1.1 * ms * b, 1e3 * ms, 1.0)
                          for b in (1, 4, 16) for name, ms in (("eager", 0.02), ("fused", 0.005))],
                         columns=["batch", "contender", "median_ms", "p10_ms", "p90_ms", "us_per_sample",
                                  "speedup_vs_first"])
    env = helpers.environment_report()
    helpers.save_results("demo", env, batch_sweep=sweep)
    back = helpers.load_results("demo")["batch_sweep"]
    pd.testing.assert_frame_equal(back.reset_index(drop=True), sweep)
    fig = helpers.plot_batch_sweep(back, 1e9, {"tf32_TFLOPs": 400.0, "fp32_TFLOPs": 50.0}, env, "demo",
                                   save_stem="demo")
    time_ax, rate_ax = fig.axes
    assert [line.get_label() for line in rate_ax.get_lines()[:2]] == ["eager", "fused"]
    # 1 GFLOP per sample in 5 us per sample: 200 TFLOP/s at every batch size
    assert rate_ax.get_lines()[1].get_ydata() == pytest.approx([200.0] * 3)
    assert sorted(line.get_ydata()[0] for line in rate_ax.get_lines()[2:]) == [50.0, 400.0]  # the ceilings
    for name in ("batch_sweep.png", "batch_sweep.svg", "batch_sweep.csv"):
        assert (tmp_path / "demo" / name).stat().st_size > 0, name


def test_environment_report_fields():
    env = helpers.environment_report()
    for key in ("gpu", "driver", "torch", "torch_cuda", "nvcc", "cudnn_allow_tf32", "matmul_allow_tf32",
                "git_commit", "date"):
        assert key in env
    assert env["torch"] in helpers.stamp(env)


def test_toolchain_errors_are_clear(monkeypatch):
    monkeypatch.setattr(helpers, "_cuda_home", lambda: None)
    with pytest.raises(helpers.KernelBuildError, match="nvcc was not found"):
        helpers.check_toolchain()
    monkeypatch.undo()
    if torch.version.cuda is None:
        pytest.skip("CPU-only torch")
    monkeypatch.setattr(helpers, "_nvcc_version_string", lambda: "11.8")
    with pytest.raises(helpers.KernelBuildError, match="major versions must match"):
        helpers.check_toolchain()


def test_build_error_lines_come_first():
    log = ("Error building extension 'k': [1/3] nvcc -c cuda.cu\nFAILED: cuda.cuda.o\n"
           "/x/cuda.cu(12): error: identifier \"foo\" is undefined\nninja: build stopped")
    text = helpers._readable_build_error(log)
    assert text.splitlines()[0].startswith("/x/cuda.cu(12): error")
    assert "full build log" in text


def test_check_input_names_the_problem():
    with pytest.raises(TypeError, match="torch.Tensor"):
        helpers.check_input([1.0], spatial_dims=3, in_channels=3, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="CUDA"):
        helpers.check_input(torch.rand(1, 3, 4, 4, 4), spatial_dims=3, in_channels=3, device=torch.device("cpu"))


def test_cudnn_tf32_sets_and_restores_the_flag():
    before = torch.backends.cudnn.allow_tf32
    with helpers.cudnn_tf32(not before):
        assert torch.backends.cudnn.allow_tf32 == (not before)
    assert torch.backends.cudnn.allow_tf32 == before


@pytest.mark.parametrize("seed", range(6))
def test_model_a_flat_rows_conv_matches_conv3d(seed):
    """v3's flat-row decomposition (one GEMM over Do*H*W rows, a constant offset per tap, wrapped rows
    dropped) equals conv3d, in float64, over random kernels 1-5, channels and odd sizes."""
    g = torch.Generator().manual_seed(seed)
    k = int(torch.randint(1, 6, (1,), generator=g))
    c_in, c_out = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 7, (1,), generator=g))
    size = [k + int(torch.randint(0, 6, (1,), generator=g)) for _ in range(3)]
    x = torch.randn(2, c_in, *size, dtype=torch.float64, generator=g)
    w = torch.randn(c_out, c_in, k, k, k, dtype=torch.float64, generator=g)
    torch.testing.assert_close(A.flat_rows_conv_reference(x, w), F.conv3d(x, w), rtol=1e-12, atol=1e-12)


def test_one_special_value_per_sample_writes_each_pattern_once():
    """helpers.one_special_value_per_sample (the GPU NaN tests' input): sample n holds the n-th NaN or infinity
    bit pattern at one element, the later samples and the input itself are untouched."""
    x = torch.rand(8, 2, 5, 6)
    y = helpers.one_special_value_per_sample(x)
    special = len(helpers.NAN_AND_INF_BITS)
    assert torch.isfinite(x).all() and torch.isfinite(y[special:]).all()
    for n, bits in enumerate(helpers.NAN_AND_INF_BITS):
        changed = (y[n].view(torch.int32) != x[n].view(torch.int32)).nonzero().tolist()
        assert changed == [[0, 3, 3]]
        assert y[n, 0, 3, 3].view(torch.int32).item() == bits
    assert torch.isnan(y[:4]).sum() == 4 and torch.isinf(y[4:special]).sum() == 2
    with pytest.raises(ValueError, match="N > 6"):
        helpers.one_special_value_per_sample(torch.rand(6, 2, 5, 6))


def test_scale_case_changes_what_it_names():
    """helpers.scale_case (the GPU tests of the FP16 scaling): each case zeroes the conv bias and changes the weights
    or a copy of the input as named, leaving the caller's input untouched; an unknown case is refused."""
    x = torch.rand(2, 3, 6, 7)
    for case in helpers.FP16_SCALE_CASES:
        torch.manual_seed(0)
        model = torch.nn.Sequential()
        model.conv = torch.nn.Conv2d(3, 4, 3)
        weight = model.conv.weight.detach().clone()
        y = helpers.scale_case(model, x, case, (1, 2, 3, 4))
        assert (model.conv.bias == 0).all()
        factor = {"weights x 2^-30": 2.0 ** -30, "weights x 2^30": 2.0 ** 30}.get(case, 1.0)
        assert torch.equal(model.conv.weight, weight * factor)
        expected = {"inputs x 2^-40": x * 2.0 ** -40, "inputs x 2^40": x * 2.0 ** 40, "inputs +1e4": x + 1e4}.get(case, x)
        if case == "one input 1e6":
            expected = x.clone()
            expected[1, 2, 3, 4] = 1e6
        assert torch.equal(y, expected), case
    assert torch.isfinite(x).all() and x.max() < 1
    with pytest.raises(ValueError, match="case must be one of"):
        helpers.scale_case(model, x, "inputs x 2", (0, 0, 0, 0))


def test_check_special_values_fails_when_a_special_value_is_lost():
    """helpers.check_special_values passes a module that spreads NaN through the sample as the reference does, and
    fails one that drops it."""
    class Normalise(torch.nn.Module):  # like InstanceNorm: a NaN or inf makes the whole sample NaN
        def forward(self, x):
            return (x - x.mean(dim=(1, 2, 3), keepdim=True)) / x.std(dim=(1, 2, 3), keepdim=True)

    class DropsNaN(Normalise):
        def forward(self, x):
            return super().forward(torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0))

    x = helpers.one_special_value_per_sample(torch.rand(8, 2, 5, 6))
    helpers.check_special_values(Normalise(), Normalise(), x, tf32=False)
    with pytest.raises(helpers.ParityError, match="not entirely NaN"):
        helpers.check_special_values(Normalise(), DropsNaN(), x, tf32=False)


# ---- scripts/fuzz_parity.py: its wide generators (the GPU run itself needs a GPU) -----------

def _fuzz_script():
    import importlib.util
    from pathlib import Path
    path = Path(helpers.ROOT) / "scripts" / "fuzz_parity.py"
    spec = importlib.util.spec_from_file_location("fuzz_parity", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fuzz_wide_generators_draw_valid_configurations():
    """Wide configurations have valid sizes, and the reference models run on them (the smaller ones, on the CPU)."""
    import random
    fuzz = _fuzz_script()
    from kernels import model_b_conv2d_groupnorm_pool as B
    for seed in range(40):
        init, shape = fuzz.wide_a(random.Random(seed))
        c_in, c_out, k = init[:3]
        assert shape[1] == c_in and min(shape[2:]) >= k and max(shape[2:]) > k, (init, shape)
        if math.prod(shape) <= 300_000:  # the reference runs on it (larger ones: the sizes are checked only)
            out = A.Model(*init)(torch.rand(shape))
            assert out.shape == (shape[0], *(s - k + 1 for s in shape[2:]))
        init, shape = fuzz.wide_b(random.Random(seed))
        k, pool = init[2], init[5]
        assert shape[1] == init[0] and min(shape[2:]) >= k - 1 + pool, (init, shape)
        if math.prod(shape) <= 300_000:
            B.Model(*init)(torch.rand(shape))


def test_fuzz_channel_generators_draw_valid_configurations():
    """--channels configurations: channel counts in the stated ranges, C_out divisible by the groups (B), and the
    reference models run on them (the smaller ones, on the CPU)."""
    import random
    fuzz = _fuzz_script()
    from kernels import model_b_conv2d_groupnorm_pool as B
    from kernels import model_c_convtranspose3d_leaky_pool as C
    for seed in range(40):
        init, shape = fuzz.channels_a(random.Random(seed))
        assert 1 <= init[0] <= 64 and 1 <= init[1] <= 128 and shape[1] == init[0], (init, shape)
        if math.prod(shape) * init[1] <= 2_000_000:
            A.Model(*init)(torch.rand(shape))
        init, shape = fuzz.channels_b(random.Random(seed))
        c_in, c_out, k, groups, _, pool = init[:6]
        assert 1 <= c_in <= 32 and c_out <= 256 and c_out % groups == 0 and shape[1] == c_in, (init, shape)
        assert min(shape[2:]) >= k - 1 + pool, (init, shape)
        if math.prod(shape) * c_out <= 2_000_000:
            B.Model(*init)(torch.rand(shape))
        init, shape = fuzz.channels_c(random.Random(seed))
        assert 1 <= init[0] <= 64 and 1 <= init[1] <= 64 and shape[1] == init[0], (init, shape)
        C.Model(*init)(torch.rand(shape))  # raises if the conv output holds no 2 x 2 x 2 window


def test_problem_size_matches_the_issues_figures():
    """The floors' sizes, from shapes on the meta device, against the figures written by hand in the issues."""
    from kernels import model_b_conv2d_groupnorm_pool as B
    from kernels import model_c_convtranspose3d_leaky_pool as C
    a, b, c = (helpers.problem_size(m) for m in (A, B, C))
    assert (a["x_bytes"], a["out_bytes"]) == (128 * 3 * 16 * 32 * 32 * 4, 128 * 14 * 30 * 30 * 4)
    assert a["conv_flops"] == 2 * 128 * 16 * 14 * 30 * 30 * 3 * 27             # 4.18 GFLOP
    assert (b["x_bytes"], b["out_bytes"]) == (128 * 8 * 128 * 128 * 4, 128 * 64 * 31 * 31 * 4)
    assert b["conv_flops"] == 2 * 128 * 64 * 126 * 126 * 8 * 9                # 18.7 GFLOP
    assert (c["x_bytes"], c["out_bytes"]) == (16 * 16 * 16 * 32 * 32 * 4, 16 * 32 * 16 * 32 * 32 * 4)
    assert c["conv_flops"] == 2 * 16 * 16 * 16 * 32 * 32 * 32 * 27            # every input voxel meets every tap


def test_fuzz_script_without_a_gpu_says_so():
    if helpers.gpu_available():
        pytest.skip("a GPU is visible: the script would run the fuzz")
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "scripts/fuzz_parity.py", "--model", "A", "--count", "1"],
                            cwd=helpers.ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "No CUDA GPU visible" in result.stdout, result.stdout + result.stderr


# ---- scripts/plan_sweep_model_a.py: its configurations (the timing itself needs a GPU) ------

def test_plan_sweep_configurations_are_valid():
    """The sweep's configurations are distinct, inside v3's C_out envelope, and the reference model runs on them."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("plan_sweep_model_a",
                                                  Path(helpers.ROOT) / "scripts" / "plan_sweep_model_a.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    configs = [*sweep.FITTED, *sweep.UNSEEN]
    assert len(set(configs)) == len(configs)
    for n, c_in, c_out, size, k in configs:
        assert n >= 1 and 1 <= c_out <= 32 and min(size) >= k, (n, c_in, c_out, size, k)
        model = A.Model(c_in, c_out, k, (c_out, 1, 1, 1), -0.5, 0.7)
        out = model(torch.rand(1, c_in, *size))
        assert out.shape == (1, *(s - k + 1 for s in size))


def test_plan_sweep_without_a_gpu_says_so():
    if helpers.gpu_available():
        pytest.skip("a GPU is visible: the script would time the plans")
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "scripts/plan_sweep_model_a.py", "--only-unseen"],
                            cwd=helpers.ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "No CUDA GPU visible" in result.stdout, result.stdout + result.stderr
