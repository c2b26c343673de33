"""The fp32 modes' input shift (models A and B v3): the rule that picks r(n, ci) from 16 samples of a plane, and
where the samples sit, run on the host by the kernels' own code (`input_shift_rule`, `shift_samples`), so that CI
checks them without a GPU. The GPU tests check what the rule is for: the fp32 modes' accuracy at an offset, and
under a frame or planted elements that the rule before this one mistook for the plane's offset."""
import random
import statistics

import pytest
import torch

import helpers
from kernels import model_a_conv3d_instnorm_clamp_max as A
from kernels import model_b_conv2d_groupnorm_pool as B

pytestmark = pytest.mark.build

CANDIDATES = (5, 6, 9)  # the samples whose median is the candidate


@pytest.fixture(scope="module")
def ext():
    return {"A": helpers.load_kernel(A.KERNEL_V3), "B": helpers.load_kernel(B.KERNEL_V3)}


def f32(v: float) -> float:
    return torch.tensor(v, dtype=torch.float32).item()


def test_sample_offsets_are_the_ones_the_gpu_tests_plant_at(ext):
    """The GPU tests plant values at the samples through Python copies of the offsets; these must be the kernels'."""
    import test_gpu_model_a_v3 as TA
    import test_gpu_model_b_v3 as TB
    for dims in [(1, 1, 1), (5, 9, 12), (16, 32, 32), (3, 7, 8), (14, 30, 30)]:
        assert list(ext["A"].shift_samples(*dims)) == TA._shift_samples(*dims), dims
    for rows, cols in [(1, 1), (10, 16), (10, 15), (14, 20), (128, 128)]:
        assert list(ext["B"].shift_samples(rows, cols)) == [TB._shift_sample(j, rows, cols) for j in range(16)]


@pytest.mark.parametrize("model, dims", [("A", (16, 32, 32)), ("A", (9, 9, 12)), ("B", (128, 128)), ("B", (10, 16))])
def test_samples_are_interior_and_spread(ext, model, dims):
    """Where every extent is at least 9, no sample lies on the plane's border (a frame or letterbox misses them), and
    they cover 4 rows and 4 columns (a row-aligned stride cannot put them all on one edge)."""
    offsets = list(ext[model].shift_samples(*dims))
    assert len(set(offsets)) == 16
    coords = [tuple(divmod(o, dims[-1])) for o in offsets]  # (everything above the row, column)
    rows = [(c[0] % dims[-2]) for c in coords]
    cols = [c[1] for c in coords]
    assert all(0 < r < dims[-2] - 1 for r in rows) and all(0 < c < dims[-1] - 1 for c in cols), (rows, cols)
    assert len(set(rows)) == 4 and len(set(cols)) == 4
    if model == "A":
        depths = [o // (dims[1] * dims[2]) for o in offsets]
        assert all(0 < d < dims[0] - 1 for d in depths) and len(set(depths)) == 4


@pytest.mark.parametrize("model", ["A", "B"])
def test_rule(ext, model):
    rule = ext[model].input_shift_rule
    rng = random.Random(7)
    # A plane at an offset: r is the candidates' median, as a float.
    for offset in (100.0, -100.0, 1e4, 3.5):
        s = [f32(offset + rng.random()) for _ in range(16)]
        assert rule(s) == statistics.median([s[j] for j in CANDIDATES]), offset
    # Data about 0 with a spread: no shift (a few agreeing samples are not a majority).
    assert rule([f32(rng.uniform(-1, 1)) for _ in range(16)]) == 0.0
    assert rule([0.0] * 16) == 0.0
    # The majority: 12 of 16 near the candidate take r, 11 do not.
    base = [100.0] * 16
    for far, expected in ((4, 100.0), (5, 0.0)):
        s = list(base)
        for j in [0, 1, 2, 3, 4, 7, 8][:far]:  # none of the candidates
            s[j] = 0.5
        assert rule(s) == expected, far
    # Two candidates at an outlier: the candidate is the outlier, which only 4 samples agree with.
    s = [f32(0.5 + 0.01 * j) for j in range(16)]
    for j in (5, 6, 0, 15):
        s[j] = 1e6
    assert rule(s) == 0.0
    # Any NaN or infinity among the samples: no shift, so it propagates through the plain split.
    for bad in (float("nan"), float("inf"), float("-inf")):
        s = list(base)
        s[11] = bad
        assert rule(s) == 0.0, bad
    with pytest.raises(RuntimeError, match="16 values"):
        rule([1.0] * 15)


def test_both_kernels_apply_the_same_rule(ext):
    """Models A and B each carry the rule (each .cu file stands alone); they must not drift apart."""
    rng = random.Random(11)
    for _ in range(3000):
        offset = rng.choice([0.0, 1.0, 100.0, -7.0, 1e5])
        spread = rng.choice([0.01, 0.5, 1.0, 10.0, 1e3])
        s = [f32(offset + spread * rng.uniform(-1, 1)) for _ in range(16)]
        for _ in range(rng.randint(0, 6)):
            s[rng.randrange(16)] = f32(rng.choice([1e6, -1e6, 0.0, offset * 3]))
        assert ext["A"].input_shift_rule(s) == ext["B"].input_shift_rule(s), s


@pytest.mark.parametrize("case", ["a frame at 100", "first, middle and last elements at 100"])
def test_planes_that_misled_the_rule_before(ext, case):
    """Planes in [0, 1) with a frame at 100, or with their first, middle and last elements at 100 (the three elements
    the rule before looked at): r must not be 100 (it is 0, or a value of the [0, 1) data)."""
    torch.manual_seed(3)
    for model, shape in (("A", (16, 32, 32)), ("B", (128, 128))):
        for _ in range(20):
            x = torch.rand(shape)
            if case == "a frame at 100":
                x[..., 0, :] = x[..., -1, :] = x[..., :, 0] = x[..., :, -1] = 100.0
            else:
                flat = x.view(-1)
                flat[0] = flat[flat.numel() // 2] = flat[-1] = 100.0
            samples = x.view(-1)[list(ext[model].shift_samples(*shape))].tolist()
            assert 0.0 <= ext[model].input_shift_rule(samples) < 1.0, (model, samples)
