"""The three clocks and the break-even search, against the paper's formula written out here."""

import math
from dataclasses import replace

import numpy as np
import pytest

from deepdensity.scaling import policies
from deepdensity.study.core import clocks
from deepdensity.study.core.protocol_text import PAPER_TABLE1


@pytest.mark.parametrize("s, rho", [(0.0, 0.01), (0.2, 0.0), (0.1, 0.05), (0.35, 0.2)])
def test_the_fit_recovers_a_table_made_by_the_model(s, rho):
    table = {n: 100.0 / (n * (s + (1 - s) / n + rho * math.log2(n))) for n in (1, 2, 4, 8, 16, 32)}
    got = clocks.fit_table1(table)
    assert got == (pytest.approx(s, abs=1e-9), pytest.approx(rho, abs=1e-9))


def test_the_papers_table_gives_a_small_communication_term():
    """Least squares by brute force over a fine grid (the reference) against the fit; Table I's
    super-linear N = 2 pulls the serial share to 0, and communication is ~0.8 % of a step."""
    ns = np.array([2, 4, 8, 16, 32], float)
    y = np.array([100.0 / (n * PAPER_TABLE1[int(n)]) for n in ns])
    grid_s, grid_rho = np.linspace(0, 0.2, 401), np.linspace(0, 0.05, 2001)
    err = (
        (grid_s[:, None, None] + (1 - grid_s[:, None, None]) / ns + grid_rho[None, :, None] * np.log2(ns) - y) ** 2
    ).sum(-1)
    i, j = np.unravel_index(err.argmin(), err.shape)
    s, rho = clocks.fit_table1(PAPER_TABLE1)
    assert s == pytest.approx(grid_s[i], abs=5e-4) and rho == pytest.approx(grid_rho[j], abs=5e-5)
    assert 0.005 < rho < 0.012


def host():
    return clocks.Clock("host", 0.0068, 0.000506, 0.00469, 0.000244, 32)


def test_a_clock_prices_an_epoch_as_the_papers_model():
    c = host()
    steps = 57  # 1844 cubes: 57 batches of 32 a pass
    for n in (1, 2, 4, 8):
        # strong, per_worker epochs: N passes of steps of B/N each, one allreduce a step, eval shared
        want = (
            n * steps * (c.step_fixed_s + c.per_sample_s * 32 / n + c.allreduce_per_doubling_s * math.log2(n))
            + c.eval_per_sample_s * 256 / n
        )
        assert c.epoch_seconds("strong", n, 1844, 256, "per_worker") == pytest.approx(want, rel=1e-12)
    assert c.rho == pytest.approx(0.00469 / (0.0068 + 0.000506 * 32))
    assert c.with_rho(0.0).epoch_seconds("weak", 8, 1844, 256, "global") == pytest.approx(
        (1844 // 256) * (c.step_fixed_s + c.per_sample_s * 32) + c.eval_per_sample_s * 32
    )


def test_an_epoch_as_a_run_did_it_prices_its_own_steps_batch_and_allreduces():
    c = clocks.Clock(
        "t",
        step_fixed_s=0.01,
        per_sample_s=0.001,
        allreduce_per_doubling_s=0.005,
        eval_per_sample_s=0.0004,
        allreduce_latency_s=0.002,
        epoch_overhead_s=0.1,
    )
    # 10 steps of 128 / 4 = 32 a worker: 10 x (0.01 + 0.032) = 0.42; 10 allreduces at N = 4 of
    # 0.002 + 0.005 x 2 = 0.012 each: 0.12; evaluation 0.0004 x 100 / 4 = 0.01; epoch end 0.1
    assert c.epoch_seconds_as_run("weak", 4, 100, 10, 128, 10) == pytest.approx(0.65, rel=1e-12)
    # local SGD: 2 allreduces of 3 gradients' floats, 0.002 + 3 x 0.005 x 2 = 0.032 each: 0.064
    assert c.epoch_seconds_as_run("local", 4, 100, 10, 128, 2) == pytest.approx(0.594, rel=1e-12)


def test_a_host_clock_with_a_latency_pays_it_on_every_allreduce_and_break_evens_drop_it():
    # the host's allreduce is latency + per doubling; the paper's form, on which rho and its
    # break-even are stated, has none, and free communication has neither
    timing = {
        "compute_scale": 1.0,
        "step_fixed_s": 0.0068,
        "per_sample_s": 0.000506,
        "epoch_overhead_s": 0.0,
        "allreduce_per_doubling_s": 0.00469,
        "eval_per_sample_s": 0.000244,
        "allreduce_latency_s": 0.005,
    }
    h = clocks.host_clock(timing, 32)
    assert h.allreduce_latency_s == 0.005
    for n in (1, 2, 8):
        allreduce = 0.0 if n == 1 else 0.005 + 0.00469 * math.log2(n)
        want = n * 57 * (h.step_fixed_s + h.per_sample_s * 32 / n + allreduce) + h.eval_per_sample_s * 256 / n
        assert h.epoch_seconds("strong", n, 1844, 256, "per_worker") == pytest.approx(want, rel=1e-12)
    assert h.with_rho(0.1).allreduce_latency_s == 0.0
    assert h.with_rho(0.1).epoch_seconds("strong", 8, 1844, 256, "per_worker") == pytest.approx(
        8 * 57 * (h.step_fixed_s + h.per_sample_s * 4 + 0.1 * h.step_s * 3) + h.eval_per_sample_s * 32, rel=1e-12
    )
    d = clocks.device_clock(h)
    assert d.allreduce_latency_s == 0.0 and d.allreduce_per_doubling_s == 0.0
    assert clocks.paper_clock(h, PAPER_TABLE1).allreduce_latency_s == 0.0
    # the per-epoch work is the host's at every N and under every clock
    with_overhead = clocks.host_clock({**timing, "epoch_overhead_s": 0.15}, 32)
    for c in (
        with_overhead,
        with_overhead.with_rho(0.1),
        clocks.device_clock(with_overhead),
        clocks.paper_clock(with_overhead, PAPER_TABLE1),
    ):
        assert c.epoch_overhead_s == 0.15
        assert c.epoch_seconds("weak", 4, 1844, 256, "global") == pytest.approx(
            replace(c, epoch_overhead_s=0.0).epoch_seconds("weak", 4, 1844, 256, "global") + 0.15, rel=1e-12
        )


def test_the_paper_clock_keeps_the_hosts_step_and_takes_the_papers_ratios():
    h = host()
    p = clocks.paper_clock(h, PAPER_TABLE1)
    s, rho = clocks.fit_table1(PAPER_TABLE1)
    assert p.step_s == pytest.approx(h.step_s) and p.rho == pytest.approx(rho)
    assert p.step_fixed_s == pytest.approx(s * h.step_s)
    assert clocks.device_clock(h).allreduce_per_doubling_s == 0.0


def test_break_even_finds_where_a_verdict_changes():
    assert clocks.break_even(lambda rho: "a") == []
    flips = clocks.break_even(lambda rho: "fast" if rho < 0.0312 else "slow")
    assert [(b, a) for _, b, a in flips] == [("fast", "slow")] and flips[0][0] == pytest.approx(0.0312, rel=2e-3)
    assert clocks.describe_break_even(flips) == "fast below rho = 0.0312, slow above"
    two = clocks.break_even(lambda rho: "x" if rho < 0.01 else "y" if rho < 1 else "x")
    assert [round(r, 3) for r, _, _ in two] == [0.01, 1.0]


def test_the_sequential_policy_prices_the_sequential_run():
    c = host()
    assert c.epoch_seconds(policies.SEQUENTIAL, 1, 1844, 256, "per_worker") == pytest.approx(
        57 * c.step_s + c.eval_per_sample_s * 256
    )


def test_the_registry_makes_every_clock_from_the_hosts_the_verdicts_first():
    got = clocks.judged_clocks(host())
    assert list(got) == [clocks.PAPER, clocks.HOST, clocks.DEVICE] == ["paper", "host", "device"]
    assert all(c.name == name for name, c in got.items())  # a clock's name is its key
    assert got["host"] == host()
    assert got["device"].rho == 0.0 and got["device"].step_s == host().step_s
    assert got["paper"] == clocks.paper_clock(host(), PAPER_TABLE1)


def test_a_clock_is_named_by_its_registered_label_else_by_its_name():
    assert [clocks.label(n) for n in ("paper", "host", "device")] == [
        "the paper's clock",
        "this host's clock",
        "one device per worker",
    ]
    assert clocks.label("wall") == "the wall clock"
