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


def test_fastest_picks_the_faster_remembers_it_and_keeps_the_default_on_a_tie():
    x = torch.rand(1024, device="cuda")
    calls = {"slow": 0, "fast": 0, "same": 0}
    def slow():  # ~50 us of GPU sleep (cycles at <= 2 GHz)
        calls["slow"] += 1
        torch.cuda._sleep(100_000)
    def fast():
        calls["fast"] += 1
        return x * 2
    def same():
        calls["same"] += 1
        torch.cuda._sleep(100_000)
    key = ("test_fastest", time.time_ns())
    helpers._FLUSH_BUFFER.pop(torch.cuda.current_device(), None)
    name, ms = helpers.fastest(key, {"slow": slow, "fast": fast})
    assert torch.cuda.current_device() not in helpers._FLUSH_BUFFER  # the 256 MiB buffer handed back
    assert name == "fast" and ms["slow"] > 10 * ms["fast"] and ms["slow"] >= 0.04, ms
    assert calls["slow"] == calls["fast"] == 103  # 3 warm-ups and 100 runs
    assert helpers.fastest(key, {"slow": slow, "fast": fast}) == (name, ms)
    assert calls["slow"] == calls["fast"] == 103  # remembered, not measured again
    # The default (first) stays where the other is not faster by more than FASTEST_MARGIN.
    name, ms = helpers.fastest((*key, "tie"), {"slow": slow, "same": same})
    assert name == "slow", ms
    assert abs(ms["same"] / ms["slow"] - 1) < helpers.FASTEST_MARGIN, ms
    name, _ = helpers.fastest((*key, "default fast"), {"fast": fast, "slow": slow})
    assert name == "fast"


def test_fastest_measures_nothing_during_graph_capture():
    x = torch.rand(1024, device="cuda")
    ran = []
    key = ("test_fastest capture", time.time_ns())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
        choice = helpers.fastest(key, {"a": lambda: ran.append("a"), "b": lambda: ran.append("b")})
    assert choice == ("a", {}) and ran == [] and key not in helpers._FASTEST
    graph.replay()
    torch.testing.assert_close(y, x * 2)
