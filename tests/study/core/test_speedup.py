"""The speedup model of section IV and the efficiency of section VII, against the paper's
formula written out here and least squares worked by hand."""

import math

import pytest

from deepdensity.scaling import policies
from deepdensity.study.core import speedup


def test_efficiency_matches_paper_definition():
    # T1 / (n Tn) * 100: a perfect halving at n=2 is 100 %, no gain at n=2 is 50 %.
    assert speedup.efficiency(100.0, 2, 50.0) == pytest.approx(100.0)
    assert speedup.efficiency(100.0, 2, 100.0) == pytest.approx(50.0)
    # the paper's Table I, 2 GPUs: 105.17 % means T2 = T1 / (2 * 1.0517)
    assert speedup.efficiency(1000.0, 2, 1000.0 / (2 * 1.0517)) == pytest.approx(105.17)
    assert math.isnan(speedup.efficiency(100.0, 4, None))
    assert math.isnan(speedup.efficiency(None, 4, 10.0))
    assert math.isnan(speedup.efficiency(100.0, 4, float("nan")))


def paper_model(n, ts, tp, c):
    """Section IV's denominator, written out: T_S + T_P / n + c log n (log base 2 here)."""
    return ts + tp / n + c * math.log2(n)


def test_epoch_seconds_model_is_the_papers_model_for_strong():
    kw = dict(
        n_train=1824,
        n_val=0,
        step_fixed_s=0.01,
        per_sample_s=0.005,
        allreduce_per_doubling_s=0.02,
        eval_per_sample_s=0.0,
    )
    steps = 1824 // 32
    for n in (1, 2, 4, 8, 16, 32):
        assert speedup.epoch_seconds_model(policies.plan("strong", n, 32), **kw, definition="global") == pytest.approx(
            paper_model(n, steps * 0.01, steps * 32 * 0.005, steps * 0.02)
        )
        # per_worker: an epoch is N passes
        assert speedup.epoch_seconds_model(policies.plan("strong", n, 32), **kw) == pytest.approx(
            n * paper_model(n, steps * 0.01, steps * 32 * 0.005, steps * 0.02)
        )
    # weak: fewer, larger global steps; every worker still does 32 samples a step
    w8 = speedup.epoch_seconds_model(policies.plan("weak", 8, 32), **kw, definition="global")
    assert w8 == pytest.approx((1824 // 256) * (0.01 + 32 * 0.005 + 3 * 0.02))
    assert speedup.epoch_seconds_model(policies.plan("weak", 8, 32), **kw) == pytest.approx(
        57 * (0.01 + 32 * 0.005 + 3 * 0.02)
    )


def test_fit_line():
    a, b = speedup.fit_line([1, 2, 4, 8], [1.5, 2.0, 3.0, 5.0])
    assert (a, b) == (pytest.approx(1.0), pytest.approx(0.5))


def test_fit_through_origin_is_the_least_squares_c_of_c_log2_n():
    # allreduces of 9.2 ms at N = 2 and 12.7 ms at N = 4 (a measured clock): minimising
    # (9.2 - c)^2 + (12.7 - 2c)^2 gives c = (9.2 + 2 * 12.7) / (1 + 4), worked by hand; the slope
    # of the free line through (0, 0), (1, 9.2), (2, 12.7) would be 6.35 instead.
    assert speedup.fit_through_origin([0, 1, 2], [0.0, 9.2, 12.7]) == pytest.approx(34.6 / 5, rel=1e-12)
    assert speedup.fit_line([0, 1, 2], [0.0, 9.2, 12.7])[1] == pytest.approx(6.35, rel=1e-12)
    assert speedup.fit_through_origin([1, 2], [-1.0, -3.0]) == 0.0  # a time is never negative
    assert speedup.fit_through_origin([0, 0], [1.0, 2.0]) == 0.0  # nothing to fit


def test_latency_and_per_doubling_pass_through_two_measured_allreduces():
    # this host's in-step allreduces in the study of 2ab441d, 10.53 ms at N = 2 and 15.62 at N = 4:
    # a + c = 10.53 and a + 2c = 15.62 give c = 5.09 and a = 5.44, worked by hand; the paper's
    # c log2 n alone gives c = 8.35 and prices N = 2 at 8.35 ms
    a, c = speedup.fit_latency_and_per_doubling({1: 0.0, 2: 10.53, 4: 15.62})
    assert (a, c) == (pytest.approx(5.44, rel=1e-9), pytest.approx(5.09, rel=1e-9))
    # as dear at 4 as at 2 (a timing-only run of c0f0: 4.651 and 4.637 ms): no negative slope,
    # the latency is then their mean
    assert speedup.fit_latency_and_per_doubling({2: 4.651, 4: 4.637}) == (pytest.approx(4.644), 0.0)
    # one N: the paper's form through the origin; none: no communication
    assert speedup.fit_latency_and_per_doubling({1: 0.0, 4: 6.0}) == (0.0, pytest.approx(3.0))
    assert speedup.fit_latency_and_per_doubling({1: 0.0}) == (0.0, 0.0)


def test_an_allreduce_costs_its_latency_and_its_share_per_doubling_but_nothing_on_one_worker():
    assert speedup.allreduce_seconds_at(1, 0.005, 0.004) == 0.0
    assert speedup.allreduce_seconds_at(2, 0.005, 0.004) == pytest.approx(0.009)
    assert speedup.allreduce_seconds_at(8, 0.005, 0.004) == pytest.approx(0.004 + 3 * 0.005)
    # local SGD's 3 x the floats: the per-doubling (bandwidth) part triples, the latency does not
    assert speedup.allreduce_seconds_at(8, 0.005, 0.004, size=3) == pytest.approx(0.004 + 9 * 0.005)
    with pytest.raises(ValueError):
        speedup.allreduce_seconds_at(0, 0.005)
    # an epoch of 57 steps on 4 workers at batch 8, 57 allreduces, evaluation of 256 shared
    want = 57 * (0.01 + 0.001 * 8) + 57 * (0.004 + 2 * 0.005) + 0.0004 * 256 / 4
    assert speedup.epoch_seconds(
        57, 8, 57, 4, 256, 0.01, 0.001, 0.005, 0.0004, allreduce_latency_s=0.004
    ) == pytest.approx(want, rel=1e-12)
    assert speedup.epoch_seconds_model(
        policies.plan("strong", 4, 32), 1844, 256, 0.01, 0.001, 0.005, 0.0004, "global", allreduce_latency_s=0.004
    ) == pytest.approx(want, rel=1e-12)
