"""Test setup: the repository root on sys.path, the `gpu` marker that skips without a CUDA GPU, a
fixture that checks a forward runs on the current stream, one that checks ``variant="auto"``'s choice, and one
that lets ``allow_tf32=True`` run TF32 products whatever the error estimate says."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tf32_products_as_asked(monkeypatch):
    """``allow_tf32=True`` runs TF32 products even where a model's rule would run the fp32-accurate ones: models A and
    B with ``tf32_error_estimate`` over its budget (set to infinity), model C on outputs of fewer than
    ``TF32_MIN_OUTPUT_VALUES`` values (set to 0). For tests of the TF32 kernels themselves: without it a test's
    clamp window, random parameters or small output could switch them to the fp32-accurate products and the test
    would no longer cover TF32."""
    from kernels import model_a_conv3d_instnorm_clamp_max as A
    from kernels import model_b_conv2d_groupnorm_pool as B
    from kernels import model_c_convtranspose3d_leaky_pool as C
    monkeypatch.setattr(A, "TF32_ERROR_BUDGET", float("inf"))
    monkeypatch.setattr(B, "TF32_ERROR_BUDGET", float("inf"))
    monkeypatch.setattr(C, "TF32_MIN_OUTPUT_VALUES", 0)


@pytest.fixture
def on_busy_side_stream():
    """``run(forward, x_stale, x_new)``: call ``forward`` on a side stream that a sleep keeps busy, with
    ``x_new``'s values copied into the input *on that stream, after the sleep*. A forward that
    launches on the current stream sees ``x_new``; one that launches on any other stream runs
    before the copy and sees ``x_stale``. Returns the forward's result after the side stream finishes.
    ``run.on_default_stream(forward)`` wraps a forward to launch on the default stream (the wrong
    one), so a test can show that the check fails for it.
    """
    def run(forward, x_stale, x_new):
        x = x_stale.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU clock cycles
            x.copy_(x_new)
            result = forward(x)
        side.synchronize()
        return result

    def on_default_stream(forward):
        def wrong(x):
            with torch.cuda.stream(torch.cuda.default_stream()):
                return forward(x)
        return wrong

    run.on_default_stream = on_default_stream
    return run


@pytest.fixture
def measured_auto_choice(monkeypatch):
    """``check(fused, x, key, make_twin)``: what a ``ModelNew(variant="auto")`` chooses for ``x``, timed afresh
    (``key`` is its ``helpers.fastest`` key, forgotten first). Checks that ``fused.path(x)`` names the remembered
    choice with both measured times, that the choice follows ``helpers.fastest``'s rule (the default, v3, unless
    the other is faster by more than the margin), and that ``make_twin()``, a new module of the same
    configuration, takes the same path without timing again. Returns the chosen variant's name."""
    import helpers

    def check(fused, x, key, make_twin):
        helpers._FASTEST.pop(key, None)
        path = fused.path(x)
        name, ms = helpers._FASTEST[key]
        assert path.startswith(f"{name} (auto: measured v3 ") and len(ms) == 2 and "v3" in ms, path
        faster = min(ms, key=ms.get)
        assert name == (faster if ms[faster] < (1 - helpers.FASTEST_MARGIN) * ms["v3"] else "v3"), ms
        with monkeypatch.context() as patch:
            patch.setattr(helpers, "benchmark", lambda *a, **k: pytest.fail("measured again"))
            assert make_twin().path(x) == path
        return name
    return check
