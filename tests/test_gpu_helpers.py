"""GPU tests of helpers.py's timing: what a notebook's sweep relies on."""
import time

import pytest
import torch

import helpers

pytestmark = pytest.mark.gpu


def test_batch_sweep_times_each_size_and_refuses_a_wrong_contender():
    linear = torch.nn.Linear(64, 32).cuda()
    contenders = {"eager": linear, "same maths": lambda x: x @ linear.weight.T + linear.bias}
    sweep = helpers.batch_sweep(contenders, lambda b: torch.rand(b, 64, device="cuda"), [1, 8], runs=100)
    assert list(sweep["batch"]) == [1, 1, 8, 8]
    assert list(sweep["contender"]) == ["eager", "same maths"] * 2
    assert (sweep["median_ms"] > 0).all()
    assert sweep["us_per_sample"].tolist() == pytest.approx((sweep["median_ms"] * 1e3 / sweep["batch"]).tolist())
    assert sweep.loc[sweep.contender == "eager", "speedup_vs_first"].tolist() == [1.0, 1.0]

    off = {"eager": linear, "off by 0.1": lambda x: linear(x) + 0.1}
    with pytest.raises(helpers.ParityError, match="off by 0.1"):
        helpers.batch_sweep(off, lambda b: torch.rand(b, 64, device="cuda"), [4], runs=100)
    nan_at_one = {"eager": linear, "NaN": lambda x: linear(x).index_fill(0, torch.tensor([0], device="cuda"),
                                                                        float("nan"))}
    with pytest.raises(helpers.ParityError, match="NaN"):
        helpers.batch_sweep(nan_at_one, lambda b: torch.rand(b, 64, device="cuda"), [3], runs=100)


def test_queue_ahead_hides_host_overhead():
    """A contender whose host side takes 2 ms before a tiny launch: timed plainly, the GPU waits for
    the host and the time is >= 2 ms; queued behind 5 ms of GPU sleep, it is the kernel's alone."""
    x = torch.rand(1024, device="cuda")
    def slow_host():
        time.sleep(0.002)
        return x * 2
    plain = helpers.benchmark({"slow host": slow_host}, runs=100, warmup=2)
    ahead = helpers.benchmark({"slow host": slow_host}, runs=100, warmup=2, queue_ahead_us=5000)
    assert plain.loc["slow host", "median_ms"] >= 1.9
    assert ahead.loc["slow host", "median_ms"] < 0.2
