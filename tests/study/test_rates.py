"""Failure rates, their intervals and the trend test, against textbook values written out
here (no SciPy in the references)."""
import math

import pytest

from deepdensity.study import rates


@pytest.mark.parametrize("n", [1, 3, 5, 8, 13, 30])
def test_clopper_pearson_at_no_failure_and_every_failure_is_the_closed_form(n):
    """With 0 of n the exact upper bound solves (1 - p)^n = alpha/2; with n of n the lower one
    solves p^n = alpha/2 (Clopper and Pearson 1934). 0 of 5 gives 0.5218, the issue's 52 %."""
    none, every = rates.failure_rate(0, n), rates.failure_rate(n, n)
    assert (none.low, every.high) == (0.0, 1.0)
    assert none.high == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9)
    assert every.low == pytest.approx(0.025 ** (1 / n), rel=1e-9)
    assert rates.failure_rate(0, 5).high == pytest.approx(0.5218, abs=1e-4)


def binomial_tail(k, n, p, upper):
    """P(X >= k) (upper) or P(X <= k) for X ~ Binomial(n, p), summed term by term."""
    terms = range(k, n + 1) if upper else range(0, k + 1)
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in terms)


@pytest.mark.parametrize("k, n", [(1, 3), (3, 5), (4, 13), (9, 13), (2, 8)])
def test_the_interval_bounds_are_where_each_tail_is_two_and_a_half_per_cent(k, n):
    r = rates.failure_rate(k, n)
    assert binomial_tail(k, n, r.low, upper=True) == pytest.approx(0.025, abs=1e-6)
    assert binomial_tail(k, n, r.high, upper=False) == pytest.approx(0.025, abs=1e-6)


def test_the_calls_and_the_seeds_they_need():
    # no failure: converges from 6 runs on (0 of 5: upper bound 0.52 > 0.5)
    assert [rates.call(rates.failure_rate(0, n)) for n in (3, 5, 6, 8)] == \
        [rates.INCONCLUSIVE, rates.INCONCLUSIVE, rates.CONVERGES, rates.CONVERGES]
    assert [rates.call(rates.failure_rate(n, n)) for n in (5, 6)] == [rates.INCONCLUSIVE, rates.FAILS]
    assert rates.call(rates.failure_rate(1, 8)) == rates.INCONCLUSIVE       # 1 of 8: up to 0.53
    assert rates.call(rates.failure_rate(1, 12)) == rates.CONVERGES         # 1 of 12: up to 0.38
    assert rates.call(rates.failure_rate(0, 0)) == rates.NO_RUNS
    with pytest.raises(ValueError):
        rates.failure_rate(4, 3)


def test_fisher_exact_matches_the_hypergeometric_sum():
    """The issue's pooled count, 9 of 13 linear runs missing against 1 of 13 weak ones: two-sided
    p = 0.0036, the sum of the hypergeometric probabilities no larger than the observed one."""
    def hyper(k):      # failures among the 13 linear runs when 10 of 26 fail in all
        return math.comb(13, k) * math.comb(13, 10 - k) / math.comb(26, 10)
    observed = hyper(9)
    want = sum(hyper(k) for k in range(0, 11) if hyper(k) <= observed * (1 + 1e-7))
    got = rates.pooled_difference_p(rates.failure_rate(9, 13), rates.failure_rate(1, 13))
    assert got == pytest.approx(want, rel=1e-9) and got == pytest.approx(0.0036, abs=1e-4)
    # one-sided, as the trend rule asks: more failures above than below
    assert rates.trend_p(rates.failure_rate(1, 13), rates.failure_rate(9, 13)) == \
        pytest.approx(sum(hyper(k) for k in range(9, 11)), rel=1e-9)
    assert rates.trend_p(rates.failure_rate(9, 13), rates.failure_rate(1, 13)) > 0.99


@pytest.mark.parametrize("status, final, want", [
    ("reached_target", 0.001, rates.REACHED), ("diverged", None, rates.FAILED),
    ("stalled", 0.0049, rates.FAILED),                  # ended at the collapse level: learnt nothing
    ("stalled", 0.0026, rates.SLOW),                    # warmup N = 8 seed 4 of the AVX-512 study
    ("max_epochs", 0.003, rates.SLOW), ("max_epochs", float("nan"), rates.FAILED),
])
def test_a_run_fails_only_at_the_collapse_level_or_a_non_finite_loss(status, final, want):
    assert rates.outcome(status, final, collapse_loss=0.00488) == want


def test_the_fewest_runs_that_can_call_a_cell_is_six():
    """0 failures of n: the exact upper bound is 1 - 0.025^(1/n) (Clopper-Pearson at 95 %, the
    binomial's closed form at zero): 0.522 at n = 5, 0.459 at n = 6, so 6 runs under 0.5."""
    assert 1 - 0.025 ** (1 / 5) > rates.CONVERGES_BELOW > 1 - 0.025 ** (1 / 6)
    assert rates.runs_to_call() == 6
