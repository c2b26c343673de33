"""Model B on the CPU: the pool-before-affine identity (v2) in plain PyTorch, and the interface."""
import pytest
import torch
import torch.nn.functional as F

import helpers
from kernels import model_b_conv2d_groupnorm_pool as B


@pytest.mark.parametrize("seed", range(8))
def test_pool_first_identity_matches_reference(seed):
    """Negative and zero gamma and scale, pools that do and do not divide, clamp of either sign."""
    g = torch.Generator().manual_seed(seed)
    groups = int(torch.randint(1, 4, (1,), generator=g))
    c_out = groups * int(torch.randint(1, 4, (1,), generator=g))
    pool = int(torch.randint(1, 6, (1,), generator=g))
    lo, hi = sorted(torch.empty(2).uniform_(-1.5, 1.5, generator=g).tolist())
    model = B.Model(3, c_out, 3, groups, (c_out, 1, 1), pool, lo, hi).double()
    helpers.randomize_parameters(model, seed)  # zero and negative entries in gamma, beta and scale
    h, w = 2 + pool + int(torch.randint(0, 9, (1,), generator=g)), 2 + pool + int(torch.randint(0, 9, (1,), generator=g))
    x = torch.rand(2, 3, h, w, generator=g, dtype=torch.float64) + (100.0 if seed % 2 else 0.0)
    y = model.conv(x)
    got = B.pool_first_reference(y, model.group_norm.weight, model.group_norm.bias, model.scale, groups, pool,
                                 lo, hi)
    torch.testing.assert_close(got, model(x), atol=1e-9, rtol=1e-9)


def test_statistics_include_rows_outside_every_window():
    """126 rows pooled by 4: rows 124-125 are in no window but in the GroupNorm statistics."""
    model = B.Model(1, 2, 1, 1, (2, 1, 1), 4, -10.0, 10.0).double()
    x = torch.rand(1, 1, 6, 6, dtype=torch.float64)
    x[..., 4:, :] += 50.0  # only the unpooled rows move the mean
    y = model.conv(x)
    got = B.pool_first_reference(y, model.group_norm.weight, model.group_norm.bias, model.scale, 1, 4, -10, 10)
    torch.testing.assert_close(got, model(x))
    x2 = x.clone()
    x2[..., 4:, :] -= 50.0
    assert not torch.allclose(model(x2), model(x))


def test_kernelbench_interface():
    init = B.get_init_inputs()
    assert init == [8, 64, 3, 16, (64, 1, 1), 4, 0.0, 1.0]
    (x,) = B.get_inputs()
    assert x.shape == (128, 8, 128, 128)
    model, fused = B.Model(*init), B.ModelNew(*init)
    fused.load_state_dict(model.state_dict())
    assert model(x[:1]).shape == (1, 64, 31, 31)


def test_model_new_refuses_bad_configuration_and_cpu_input():
    init = B.get_init_inputs()
    with pytest.raises(ValueError, match="CUDA"):
        B.ModelNew(*init)(torch.rand(1, 8, 16, 16))
    with pytest.raises(ValueError, match="scale_shape"):
        B.ModelNew(8, 64, 3, 16, (64,), 4, 0.0, 1.0)
    with pytest.raises(ValueError, match="variant"):
        B.ModelNew(*init, variant="v9")
    fused = B.ModelNew(*init)
    assert fused.variant == "auto"  # the default: the faster of v3 and v2, measured on a GPU
    assert fused.path(torch.rand(1, 8, 16, 16)) == "v2 (v3 unsupported: x is not a CUDA tensor)"
    assert B.ModelNew(*init, variant="v1").path(torch.rand(1, 8, 16, 16)) == "v1"
    with pytest.raises(ValueError, match="maxpool_kernel_size"):
        B.ModelNew(8, 64, 3, 16, (64, 1, 1), 17, 0.0, 1.0)
    with pytest.raises(ValueError):
        B.ModelNew(8, 64, 3, 12, (64, 1, 1), 4, 0.0, 1.0)  # 12 groups do not divide 64


@pytest.mark.parametrize("seed", range(4))
def test_tiled_statistics_merge_to_the_group_statistics(seed):
    """v3's statistics: per-(tile, channel) moments, merged per group with Chan's update, equal the
    group's mean and variance, partial tiles and inputs far from zero included."""
    g = torch.Generator().manual_seed(seed)
    groups = int(torch.randint(1, 4, (1,), generator=g))
    c = groups * int(torch.randint(1, 4, (1,), generator=g))
    h, w = (int(v) for v in torch.randint(5, 30, (2,), generator=g))
    y = torch.randn(2, c, h, w, generator=g, dtype=torch.float64) * 0.3 + (100.0 if seed % 2 else 0.0)
    tile_rows, tile_cols = int(torch.randint(1, 8, (1,), generator=g)), int(torch.randint(3, 40, (1,), generator=g))
    mean, var = B.tiled_statistics_reference(y, tile_rows, tile_cols, groups)
    grouped = y.reshape(2, groups, -1)
    torch.testing.assert_close(mean, grouped.mean(dim=2), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(var, grouped.var(dim=2, unbiased=False), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_flat_rows_conv_matches_conv2d(seed):
    """v3's decomposition: one GEMM over flat input positions, wrapped rows dropped, equals conv2d."""
    g = torch.Generator().manual_seed(seed)
    kh, kw = (int(v) for v in torch.randint(1, 6, (2,), generator=g))
    h, w = kh + int(torch.randint(0, 12, (1,), generator=g)), kw + int(torch.randint(0, 12, (1,), generator=g))
    x = torch.rand(2, int(torch.randint(1, 5, (1,), generator=g)), h, w, generator=g, dtype=torch.float64)
    weight = torch.randn(3, x.shape[1], kh, kw, generator=g, dtype=torch.float64)
    torch.testing.assert_close(B.flat_rows_conv_reference(x, weight), F.conv2d(x, weight), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_model_new_backward_recomputes_the_reference(seed):
    """What ModelNew's backward differentiates (unfused_reference) is Model itself: values and gradients in float64, with zero and
    negative gamma and scale, a pool that does not divide, clamp bounds of either sign."""
    g = torch.Generator().manual_seed(seed)
    lo = float(torch.empty(1).uniform_(-1.5, 0.5, generator=g))
    init = [3, 8, 3, 4, (8, 1, 1), 3, lo, lo + 1.0]
    model = B.Model(*init).double()
    helpers.randomize_parameters(model, seed)
    x = torch.rand(2, 3, 13, 12, generator=g, dtype=torch.float64)
    gn = model.group_norm
    params = (model.conv.weight, model.conv.bias, gn.weight, gn.bias, model.scale)
    want = model(x)
    got = B.unfused_reference(x, *params, gn.num_groups, init[5], model.clamp_min, model.clamp_max, gn.eps)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    grad_out = torch.randn(want.shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(torch.autograd.grad(got, params, grad_out, retain_graph=True),
                               torch.autograd.grad(want, params, grad_out), atol=1e-10, rtol=1e-10)


def _simulated_tf32_error(gamma, beta, scale, values_per_window: int, lo: float, hi: float, draws: int = 200_000):
    """tf32_error_estimate's model simulated directly: per channel, windows of iid standard normal z plus an error of
    TF32_Z_ERROR, v = scale (gamma z + beta), max-pooled, clamped; the output's relative L2 error."""
    generator = torch.Generator().manual_seed(3)
    z = torch.randn(draws, len(gamma), values_per_window, generator=generator, dtype=torch.float64)
    noise = B.TF32_Z_ERROR * torch.randn(z.shape, generator=generator, dtype=torch.float64)
    g, b, s = (torch.tensor(t, dtype=torch.float64)[:, None] for t in (gamma, beta, scale))
    clean = (s * (g * z + b)).amax(dim=2).clamp(lo, hi)
    noisy = (s * (g * (z + noise) + b)).amax(dim=2).clamp(lo, hi)
    return ((noisy - clean).norm() / clean.norm()).item()


def test_tf32_error_estimate_matches_its_model():
    """The Monte Carlo estimate against a direct simulation of its model: pool 1 (one value per window), and pools 2
    and 4, where the estimate is the largest over windows of 1, 2, 4, ... and pool^2 values. Negative and zero gamma and
    scale, clamp bounds near 0 and of either sign."""
    cases = [([1.0], [0.0], [1.0], 1, -1.0, 1.0), ([1.0, -0.5, 2.0], [0.3, 0.0, -1.0], [1.0, 1.0, -0.7], 1, -0.3, 0.5),
             ([1.0, 0.0, -1.2], [0.0, 0.5, 0.2], [0.8, 1.0, 1.1], 2, -0.35, 0.006),
             ([0.7, 1.5], [-0.2, 0.4], [1.0, -1.0], 4, -1.33, 0.087), ([1.0] * 4, [0.0] * 4, [1.0] * 4, 4, 0.0, 1.0)]
    for gamma, beta, scale, pool, lo, hi in cases:
        windows = {pool * pool} | {2 ** e for e in range(16) if 2 ** e < pool * pool}
        simulated = max(_simulated_tf32_error(gamma, beta, scale, n, lo, hi) for n in windows)
        estimate = B.tf32_error_estimate(*(torch.tensor(t) for t in (gamma, beta, scale)), pool, lo, hi)
        assert estimate == pytest.approx(simulated, rel=0.1), (gamma, beta, scale, pool, lo, hi)
    ones = torch.ones(3)
    assert B.tf32_error_estimate(ones, ones, ones, 2, 0.5, -0.5) == 0.0  # lo > hi: a constant output
    assert B.tf32_error_estimate(torch.zeros(3), ones, ones, 2, -1.0, 1.0) == 0.0  # gamma 0: v = beta, no error


def test_tf32_products_switch_on_the_parameters_and_bounds():
    """allow_tf32 keeps TF32 products at the KernelBench configuration (default and random parameters); a bound
    near 0 where most pooled values sit at it (the fuzz's seed 34001668: one channel, pool 4, [-0.35, 0.006]) runs
    the fp32-accurate ones. The answer follows the bounds and in-place changes to the parameters."""
    init = list(B.get_init_inputs())
    fused = B.ModelNew(*init, allow_tf32=True)
    assert fused.tf32_products() and not B.ModelNew(*init, allow_tf32=False).tf32_products()
    helpers.randomize_parameters(fused, 0)
    assert fused.tf32_products()
    one = B.ModelNew(8, 1, 1, 1, (1, 1, 1), 4, -0.35, 0.006, allow_tf32=True)
    assert not one.tf32_products()  # gamma 1, beta 0, scale 1: the max of 16 values sits at 0.006
    with torch.no_grad():
        one.group_norm.bias.fill_(-3.0)  # now the pooled values sit mostly inside the window
    assert one.tf32_products()
    one.clamp_min, one.clamp_max = -0.01, 0.01  # a narrow window near 0: mostly at -0.01 again
    assert not one.tf32_products()


def test_tf32_products_allowed_remembers_per_parameter_version():
    """helpers.tf32_products_allowed: one estimate per parameter version and settings, a new one after an in-place
    change or new settings; the memo keeps one entry."""
    calls, weight, memo = [], torch.ones(3), {}
    estimate = lambda: calls.append(1) or 1e-3  # noqa: E731
    assert helpers.tf32_products_allowed(memo, (weight,), (0.0, 1.0), estimate, 2e-3)
    assert helpers.tf32_products_allowed(memo, (weight,), (0.0, 1.0), estimate, 2e-3) and len(calls) == 1
    weight.mul_(2.0)
    assert helpers.tf32_products_allowed(memo, (weight,), (0.0, 1.0), estimate, 2e-3) and len(calls) == 2
    assert not helpers.tf32_products_allowed(memo, (weight,), (0.0, 0.5), estimate, 5e-4) and len(calls) == 3
    assert len(memo) == 1
