"""Model C on the CPU: the monotone pool-first identity (v2) in plain PyTorch, and the interface."""
import pytest
import torch

import helpers
from kernels import model_c_convtranspose3d_leaky_pool as C


@pytest.mark.parametrize("seed", range(6))
def test_pool_first_identity_matches_reference(seed):
    """Negative and zero multipliers, stride 1-3, odd sizes, inputs shifted by +100."""
    g = torch.Generator().manual_seed(seed)
    k, s = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(1, 4, (1,), generator=g))
    p = int(torch.randint(0, k, (1,), generator=g))
    op = int(torch.randint(0, s, (1,), generator=g))
    c_out = int(torch.randint(1, 7, (1,), generator=g))
    model = C.Model(3, c_out, k, s, p, op, (c_out, 1, 1, 1)).double()
    helpers.randomize_parameters(model, seed)  # a zero and a negative multiplier
    x = torch.rand(2, 3, 4, 5, 6, generator=g, dtype=torch.float64) + (100.0 if seed % 2 else 0.0)
    got = C.pool_first_reference(model.conv_transpose(x), model.multiplier, 0.2, 2)
    torch.testing.assert_close(got, model(x), atol=1e-9, rtol=1e-9)


def test_identity_needs_a_monotone_leaky():
    """With a negative slope leaky is not monotone and the rewrite is wrong: ModelNew falls back to v1."""
    y = torch.tensor([-3.0, 1.0]).reshape(1, 1, 1, 1, 2).expand(1, 1, 2, 2, 2).contiguous()
    m = torch.tensor([1.0])
    direct = torch.nn.functional.max_pool3d(torch.nn.functional.leaky_relu(
        m * torch.nn.functional.leaky_relu(y, -0.5), -0.5), 2)
    assert not torch.equal(C.pool_first_reference(y, m, -0.5, 2), direct)


def test_kernelbench_interface():
    init = C.get_init_inputs()
    assert init == [16, 32, 3, 2, 1, 1, (32, 1, 1, 1)]
    (x,) = C.get_inputs()
    assert x.shape == (16, 16, 16, 32, 32)
    model, fused = C.Model(*init), C.ModelNew(*init)
    fused.load_state_dict(model.state_dict())
    assert model(x[:1, :, :4, :4, :4]).shape == (1, 32, 4, 4, 4)


def test_model_new_refuses_bad_configuration_and_cpu_input():
    init = C.get_init_inputs()
    with pytest.raises(ValueError, match="CUDA"):
        C.ModelNew(*init)(torch.rand(1, 16, 4, 4, 4))
    with pytest.raises(ValueError, match="multiplier_shape"):
        C.ModelNew(16, 32, 3, 2, 1, 1, (32,))
    with pytest.raises(ValueError, match="variant"):
        C.ModelNew(*init, variant="v4")
    with pytest.raises(ValueError, match="pool"):
        C.ModelNew(*init, pool=9)


def test_path_of_a_cpu_tensor_is_the_fallback():
    """path() answers without a GPU (forward itself refuses CPU input, see above)."""
    fused = C.ModelNew(*C.get_init_inputs())
    assert fused.variant == "auto"  # the default: the faster of v3 and v2, measured on a GPU
    assert fused.path(torch.rand(1, 16, 2, 2, 2)) == "v2 (v3 unsupported: x is not a CUDA tensor)"
    assert C.ModelNew(*C.get_init_inputs(), variant="v1").path(torch.rand(1, 16, 2, 2, 2)) == "v1"


@pytest.mark.parametrize("seed", range(8))
def test_stride_phase_decomposition_matches_conv_transpose_then_pool(seed):
    """v3's algebra: one ordinary conv per window offset (stride phase), max over offsets, in float64."""
    g = torch.Generator().manual_seed(100 + seed)
    pick = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))
    pool = pick(1, 4)
    stride = [s for s in (1, 2, 3, 4) if pool % s == 0]
    stride = [stride[pick(0, len(stride) - 1)] for _ in range(3)]
    kernel = [pick(1, 5) for _ in range(3)]
    padding = [pick(0, k - 1) for k in kernel]
    output_padding = [pick(0, s - 1) for s in stride]
    in_size = []
    for s, p, k, op in zip(stride, padding, kernel, output_padding):
        sizes = [i for i in range(1, 8) if (i - 1) * s - 2 * p + k + op >= pool]
        in_size.append(sizes[pick(0, len(sizes) - 1)])
    x = torch.randn(2, 3, *in_size, generator=g, dtype=torch.float64)
    w = torch.randn(3, 4, *kernel, generator=g, dtype=torch.float64)
    expected = torch.nn.functional.max_pool3d(torch.nn.functional.conv_transpose3d(
        x, w, stride=stride, padding=padding, output_padding=output_padding), pool)
    got = C.stride_phase_reference(x, w, stride, padding, output_padding, pool)
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-10)


def test_tf32_products_only_on_outputs_of_enough_values():
    """allow_tf32=True multiplies in TF32 only where the output (N x C_out x pooled positions) holds at least
    TF32_MIN_OUTPUT_VALUES values; the forward's configuration (kernel, path key, backward) carries that answer."""
    init = [4, 8, 3, 2, 1, 1, (8, 1, 1, 1)]  # stride 2, output padding 1: a pooled side per input side
    fused, strict = C.ModelNew(*init, allow_tf32=True), C.ModelNew(*init)
    assert C.TF32_MIN_OUTPUT_VALUES == 4096
    for shape, values in [((1, 4, 8, 8, 8), 4096), ((1, 4, 8, 8, 7), 3584), ((2, 4, 4, 8, 8), 4096),
                          ((3, 4, 1, 1, 1), 24), ((0, 4, 8, 8, 8), 0)]:
        x = torch.rand(shape)
        expected = values >= C.TF32_MIN_OUTPUT_VALUES
        assert fused.tf32_products(x) is expected and fused._config(x)["allow_tf32"] is expected, shape
        assert strict.tf32_products(x) is False and strict._config(x)["allow_tf32"] is False

