"""The statistics the study's decision rules call: exact intervals for a miss rate, how many more
seeds could still change a call, rank tests and estimates on times to target, Holm's correction,
Fisher's exact test and the Cochran-Armitage trend test. Pure functions over plain numbers
(scipy.stats and math only), so each can be checked against textbook values.

A time to target may be math.inf: the run missed its target, so it is slower than every run
that reached it, and two misses tie.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional, Sequence

from scipy import stats


def _check_counts(missed: int, runs: int) -> None:
    if not 0 <= missed <= runs:
        raise ValueError(f"need 0 <= missed <= runs, got {missed} of {runs}")


def missed_rate(missed: int, runs: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval for the miss rate missed / runs:
    scipy.stats.binomtest(missed, runs).proportion_ci(confidence, method="exact").
    With no run nothing is known: (0.0, 1.0)."""
    _check_counts(missed, runs)
    return _clopper_pearson(missed, runs, confidence)


# Memoised: a report asks for the same few (missed, runs) thousands of times (seeds_to_call's
# scans, the sensitivity columns), and SciPy's exact interval solves two roots each time.
@functools.lru_cache(maxsize=1 << 16)
def _clopper_pearson(missed: int, runs: int, confidence: float) -> tuple[float, float]:
    if runs == 0:
        return 0.0, 1.0
    ci = stats.binomtest(missed, runs).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def seeds_to_call(missed: int, runs: int, threshold: float = 0.5, confidence: float = 0.95, limit: int = 1000) -> dict:
    """How many more runs could still change a cell's call, in the most extreme case.

    "to_fail": the smallest k >= 0 such that, after k further runs that all miss, the lower
    bound of missed_rate exceeds threshold. "to_converge": the smallest k >= 0 such that, after
    k further runs that all reach, the upper bound falls below threshold. Each is None when not
    reached within `limit` further runs. Both bounds move monotonically with k, so a linear
    scan from 0 finds the smallest k."""
    _check_counts(missed, runs)
    return {
        "to_fail": _fewest_more(lambda k: missed_rate(missed + k, runs + k, confidence)[0] > threshold, limit),
        "to_converge": _fewest_more(lambda k: missed_rate(missed, runs + k, confidence)[1] < threshold, limit),
    }


def seeds_to_unsettle(
    missed: int, runs: int, threshold: float = 0.5, confidence: float = 0.95, limit: int = 1000
) -> Optional[int]:
    """How many more runs, all against a cell's call, would make it inconclusive again: the
    smallest k >= 0 such that, after k further runs that all miss (a cell that converges) or
    all reach (one that fails), the interval of missed_rate holds threshold. 0 for a cell not
    called; None when not reached within `limit` further runs. The scan of seeds_to_call."""
    _check_counts(missed, runs)
    converges = missed_rate(missed, runs, confidence)[1] < threshold
    if converges:
        return _fewest_more(lambda k: missed_rate(missed + k, runs + k, confidence)[1] >= threshold, limit)
    return _fewest_more(lambda k: missed_rate(missed, runs + k, confidence)[0] <= threshold, limit)


def _fewest_more(done: Callable[[int], bool], limit: int) -> Optional[int]:
    """The smallest k in 0..limit with done(k), else None. The bounds of missed_rate move
    monotonically with the runs added, so a linear scan from 0 finds the smallest."""
    return next((k for k in range(limit + 1) if done(k)), None)


def mann_whitney_less(a: Sequence[float], b: Sequence[float]) -> dict:
    """One-sided Mann-Whitney U test that values in `a` tend to be smaller than those in `b`:
    scipy.stats.mannwhitneyu(a, b, alternative="less"). The null distribution is exact
    (method="exact") when no two values of the pooled sample are equal; with ties the exact
    distribution SciPy offers does not hold, so it is the normal approximation with the tie
    correction of the variance and a continuity correction (method="asymptotic").

    math.inf (a missed target) ranks above every finite value, and two infinities tie.
    "u" is SciPy's U of `a`: the number of pairs with a_i > b_j, plus half the ties, so a small
    U favours "a is smaller". "prob_less" is the common-language effect size
    P(a < b) + 0.5 P(a == b) over all pairs, = 1 - U / (n_a n_b)."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError("mann_whitney_less needs at least one value on each side")
    if any(math.isnan(x) for x in a + b):
        raise ValueError("mann_whitney_less: NaN is not a time")
    ranks = _average_ranks(a + b)
    ranks_a, ranks_b = tuple(sorted(ranks[: len(a)])), tuple(sorted(ranks[len(a) :]))
    method, u, p = _mann_whitney_less(ranks_a, ranks_b)
    n_a, n_b = len(a), len(b)
    return {"u": u, "p": p, "n_a": n_a, "n_b": n_b, "method": method, "prob_less": 1.0 - u / (n_a * n_b)}


def _average_ranks(values: list) -> list:
    """Ranks 1..n of `values`, ties given their average rank (scipy.stats.rankdata's default)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


# Memoised on the ranks, which are all the test reads of the times (its U, its exact null, its
# tie correction): the clocks' break-even scan judges the same cells at every rho it tries, with
# other times but mostly the same order (thousands of calls to SciPy a report, about a
# millisecond each). SciPy gets the ranks as the data: the same U and p as from the times.
@functools.lru_cache(maxsize=1 << 16)
def _mann_whitney_less(a: tuple, b: tuple) -> tuple:
    pooled = a + b
    method = "exact" if len(set(pooled)) == len(pooled) else "asymptotic"
    result = stats.mannwhitneyu(a, b, alternative="less", method=method)
    return method, float(result.statistic), float(result.pvalue)


def _log_difference(x: float, y: float) -> float:
    # inf - inf is nan in IEEE arithmetic; two misses tie, so the pair's difference is 0
    if math.isinf(x) and math.isinf(y):
        return 0.0
    return math.log(x) - math.log(y)


def hodges_lehmann_ratio(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    """The Hodges-Lehmann estimate of the ratio a / b (Hodges and Lehmann 1963, the shift
    estimate taken on the log scale): exp of the median over all pairs
    (i, j) of log(a_i) - log(b_j). Values must be > 0 and may be math.inf: inf against a finite
    value gives +inf, a finite value against inf gives -inf, inf against inf is a tie (0).
    With an even number of pairs the median is the mean of the middle two (so the estimate is
    their geometric mean). An infinite median gives math.inf or 0.0; an empty side gives None."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        return None
    if not all(x > 0 for x in a + b):  # also refuses NaN
        raise ValueError("hodges_lehmann_ratio needs values > 0")
    d = sorted(_log_difference(x, y) for x in a for y in b)
    mid = len(d) // 2
    if len(d) % 2:
        median = d[mid]
    elif d[mid - 1] == -math.inf and d[mid] == math.inf:
        # cannot happen (a -inf pair and a +inf pair imply tied pairs between them), but
        # -inf + inf is nan: call it even rather than fail
        median = 0.0
    else:
        median = (d[mid - 1] + d[mid]) / 2
    if median == math.inf:
        return math.inf
    if median == -math.inf:
        return 0.0
    return math.exp(median)


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[dict]:
    """Holm-Bonferroni step-down correction (Holm 1979). With the m p-values sorted,
    p_(1) <= ... <= p_(m), the adjusted p_(i) is max over j <= i of min(1, (m - j + 1) p_(j)),
    which is monotone and what statsmodels' multipletests(method="holm") and R's
    p.adjust(method="holm") give; a hypothesis is rejected when its adjusted p <= alpha, which
    is the same as the sequential rule. Results come back in input order. Written out rather
    than imported from statsmodels, which would bring pandas and patsy into every install for
    these lines; tests/study/core/test_stats.py holds it to Wikipedia's example and R's values."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return [{"p": float(p), "p_adjusted": q, "reject": q <= alpha} for p, q in zip(pvalues, adjusted)]


def fisher_greater(missed_a: int, runs_a: int, missed_b: int, runs_b: int) -> dict:
    """One-sided Fisher exact test that side a misses more often than side b:
    scipy.stats.fisher_exact([[missed_a, runs_a - missed_a], [missed_b, runs_b - missed_b]],
    alternative="greater"). "odds_ratio" is SciPy's sample odds ratio
    (missed_a (runs_b - missed_b)) / ((runs_a - missed_a) missed_b), which may be inf or nan."""
    _check_counts(missed_a, runs_a)
    _check_counts(missed_b, runs_b)
    table = [[missed_a, runs_a - missed_a], [missed_b, runs_b - missed_b]]
    result = stats.fisher_exact(table, alternative="greater")
    return {"p": float(result.pvalue), "odds_ratio": float(result.statistic)}


def fisher_two_sided(missed_a: int, runs_a: int, missed_b: int, runs_b: int) -> float:
    """Two-sided Fisher exact test that sides a and b miss at the same rate: the p of
    scipy.stats.fisher_exact([[missed_a, runs_a - missed_a], [missed_b, runs_b - missed_b]])."""
    _check_counts(missed_a, runs_a)
    _check_counts(missed_b, runs_b)
    table = [[missed_a, runs_a - missed_a], [missed_b, runs_b - missed_b]]
    return float(stats.fisher_exact(table, alternative="two-sided").pvalue)


def runs_to_leave_band(missed: int, runs: int, confidence: float, threshold: float = 0.5, limit: int = 100000):
    """The fewest runs at which a cell missing at the rate missed / runs, as near as whole runs
    allow, would have its exact interval at `confidence` clear of `threshold`: None where the
    rate is the threshold itself (no study leaves the band) or `limit` runs do not."""
    rate = missed / runs
    if rate == threshold:
        return None
    # from below the normal approximation's count (the exact interval is wider), then run by run
    z = float(stats.norm.ppf(1 - (1 - confidence) / 2))
    n = max(runs, int(0.8 * z * z * rate * (1 - rate) / (rate - threshold) ** 2))
    while n <= limit:
        low, high = missed_rate(round(rate * n), n, confidence)
        if high < threshold or low > threshold:
            return n
        n += 1
    return None


def cochran_armitage(missed: Sequence[int], runs: Sequence[int], scores: Sequence[float]) -> dict:
    """The Cochran-Armitage test for a linear trend in the miss proportion across groups with
    the given scores (Armitage 1955; Agresti, Categorical Data Analysis, 2nd ed., section 5.3.5).
    With N = sum runs, p = sum missed / N and s_bar = sum runs_i s_i / N:
        T = sum missed_i (s_i - s_bar),  Var = p (1 - p) sum runs_i (s_i - s_bar)^2,
        z = T / sqrt(Var),  slope b = T / sum runs_i (s_i - s_bar)^2
    (b is the least-squares slope of the proportion on the score, weighted by runs). z^2 is
    N r^2, r the correlation of score and outcome over the N runs. "p_increasing" is the upper
    normal tail (the proportion grows with the score), "p_two_sided" twice the tail of |z|.

    When nobody or everybody missed, or every run has the same score, no trend can be shown:
    z = 0, slope = 0, p_increasing = 0.5, p_two_sided = 1.0 and "degenerate" is True."""
    if not len(missed) == len(runs) == len(scores):
        raise ValueError("cochran_armitage: missed, runs and scores differ in length")
    for x, n in zip(missed, runs):
        _check_counts(x, n)
    total = sum(runs)
    p = sum(missed) / total if total else 0.0
    s_bar = sum(n * s for n, s in zip(runs, scores)) / total if total else 0.0
    spread = sum(n * (s - s_bar) ** 2 for n, s in zip(runs, scores))
    if p in (0.0, 1.0) or spread <= 0:
        return {"z": 0.0, "p_increasing": 0.5, "p_two_sided": 1.0, "slope": 0.0, "degenerate": True}
    t = sum(x * (s - s_bar) for x, s in zip(missed, scores))
    z = t / math.sqrt(p * (1 - p) * spread)
    return {
        "z": z,
        "p_increasing": float(stats.norm.sf(z)),
        "p_two_sided": float(2 * stats.norm.sf(abs(z))),
        "slope": t / spread,
        "degenerate": False,
    }
