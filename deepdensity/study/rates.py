"""Failure as a rate: how often a cell's runs fail, with an exact interval, and the calls and
trend test the convergence claims are judged on. Pure (SciPy's statistics, no framework).

A run *fails* when its loss became non-finite or it ended at the collapse level (the loss of an
output that ignores its input, rules.diverges): it learnt nothing. A run that missed the target
and ended below the collapse level is *slow*: it counts against a time, never as a failure.

  rate   failures / runs with the Clopper-Pearson interval at CONFIDENCE (exact, two-sided;
         scipy.stats.binomtest(...).proportion_ci(method="exact")).
  call   a cell (or a side of a trend, pooled) *converges* when the interval's upper bound is
         below CONVERGES_BELOW, *fails* when its lower bound is above FAILS_ABOVE, and is
         *inconclusive* otherwise. With no failure the upper bound falls below 0.5 from 6 runs
         on (0 of 5: 0.52; 0 of 8: 0.37); with every run failing the lower bound rises above
         0.5 from 6 runs on.
  trend  "holds up to N0, fails beyond": the runs pooled on each side, Fisher's exact test
         (scipy.stats.fisher_exact), one-sided: failures more frequent above N0 than at or
         below it, at p < TREND_P.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from scipy import stats

CONFIDENCE = 0.95
CONVERGES_BELOW = 0.5        # "converges": failing is, at 95 %, less likely than not
FAILS_ABOVE = 0.5            # "fails": failing is, at 95 %, more likely than not
TREND_P = 0.05

CONVERGES, FAILS, INCONCLUSIVE, NO_RUNS = "converges", "fails", "inconclusive", "no runs"
REACHED, SLOW, FAILED = "reached", "slow", "failed"

RULES = [
    ("failure", "a run fails when its loss became non-finite or it ended at the collapse level (the loss of "
                "an output that ignores its input); one that missed the target and ended below that level "
                "is slow: it counts against a time, never as a failure"),
    ("rate", f"a cell's failure rate is failures / runs with its exact (Clopper-Pearson) "
             f"{CONFIDENCE:.0%} interval; the cell converges when the upper bound is below "
             f"{CONVERGES_BELOW:g}, fails when the lower bound is above {FAILS_ABOVE:g}, and is "
             f"inconclusive otherwise (0 failures in 5 runs: below 0.52 only; in 8: below 0.37)"),
    ("trend", f"a claim that a mode holds up to N0 and fails beyond pools the runs on each side and asks "
              f"Fisher's exact test (one-sided) whether failures are more frequent above N0, at "
              f"p < {TREND_P:g}"),
]


@dataclass(frozen=True)
class Rate:
    runs: int
    failures: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.failures / self.runs if self.runs else math.nan

    def __str__(self) -> str:
        if not self.runs:
            return "no runs"
        return f"{self.failures} of {self.runs} failed ({self.value:.0%}, {CONFIDENCE:.0%} CI {self.low:.2f}-{self.high:.2f})"


def outcome(status: str, final_val_loss: Optional[float], collapse_loss: Optional[float]) -> str:
    """reached, slow or failed, from a run's status and last validation loss."""
    if status == "reached_target":
        return REACHED
    if status in ("diverged", "collapsed") or final_val_loss is None or not math.isfinite(final_val_loss):
        return FAILED
    if collapse_loss is not None and final_val_loss >= collapse_loss:
        return FAILED
    return SLOW


def failure_rate(failures: int, runs: int) -> Rate:
    """failures of runs with the exact two-sided interval at CONFIDENCE."""
    if runs < 0 or not 0 <= failures <= runs:
        raise ValueError(f"need 0 <= failures <= runs, got {failures} of {runs}")
    if runs == 0:
        return Rate(0, 0, 0.0, 1.0)
    ci = stats.binomtest(failures, runs).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    return Rate(runs, failures, float(ci.low), float(ci.high))


def call(rate: Rate) -> str:
    """converges, fails or inconclusive (no runs: NO_RUNS)."""
    if not rate.runs:
        return NO_RUNS
    if rate.high < CONVERGES_BELOW:
        return CONVERGES
    if rate.low > FAILS_ABOVE:
        return FAILS
    return INCONCLUSIVE


def runs_to_call() -> int:
    """The fewest runs, all agreeing, from which a cell can be called at all (0 failures of n:
    the interval's upper bound below CONVERGES_BELOW; by symmetry, n failures: above FAILS_ABOVE)."""
    n = 1
    while call(failure_rate(0, n)) != CONVERGES:
        n += 1
    return n


def of(outcomes: Sequence[str]) -> Rate:
    """The failure rate of a list of run outcomes (reached, slow, failed)."""
    return failure_rate(sum(o == FAILED for o in outcomes), len(outcomes))


def trend_p(below: Rate, above: Rate) -> float:
    """One-sided p of Fisher's exact test that failures are more frequent above than below."""
    if not (below.runs and above.runs):
        return math.nan
    table = [[above.failures, above.runs - above.failures], [below.failures, below.runs - below.failures]]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def pooled_difference_p(a: Rate, b: Rate) -> float:
    """Two-sided p of Fisher's exact test that two pooled groups fail at different rates."""
    if not (a.runs and b.runs):
        return math.nan
    table = [[a.failures, a.runs - a.failures], [b.failures, b.runs - b.failures]]
    return float(stats.fisher_exact(table, alternative="two-sided").pvalue)
