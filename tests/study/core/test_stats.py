"""deepdensity.study.core.stats against independent references: published values (source named at
each), or values worked out here by another route than the code under test (enumeration,
closed forms, a different algebraic form of the same statistic). No expected value below is
produced by the module itself."""

import itertools
import math

import pytest
from scipy import stats as sp

from deepdensity.study.core import stats

INF = math.inf


# --- missed_rate ----------------------------------------------------------------------------


def _binom_tail_at_least(x, n, p):
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(x, n + 1))


def _binom_tail_at_most(x, n, p):
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(0, x + 1))


@pytest.mark.parametrize("n", [1, 5, 6, 8, 20])
def test_missed_rate_at_none_and_all_is_the_closed_form(n):
    # Clopper and Pearson (1934): 0 of n has upper bound 1 - (alpha/2)^(1/n), n of n has lower
    # bound (alpha/2)^(1/n). rel 1e-9: both sides are a root found to machine precision.
    assert stats.missed_rate(0, n) == (0.0, pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9))
    assert stats.missed_rate(n, n) == (pytest.approx(0.025 ** (1 / n), rel=1e-9), 1.0)


@pytest.mark.parametrize("x, n", [(1, 5), (2, 8), (3, 10), (7, 30), (4, 7)])
def test_missed_rate_solves_the_defining_tail_equations(x, n):
    # The exact interval is defined by P(X >= x | low) = alpha/2 and P(X <= x | high) = alpha/2
    # (Clopper and Pearson 1934); the tails are summed here with math.comb, not SciPy. abs 1e-9:
    # the bounds are roots to ~1e-12, and the tails' slope in p is O(n), far below 1e-9.
    low, high = stats.missed_rate(x, n)
    assert _binom_tail_at_least(x, n, low) == pytest.approx(0.025, abs=1e-9)
    assert _binom_tail_at_most(x, n, high) == pytest.approx(0.025, abs=1e-9)
    # the beta-quantile form of the same bounds (e.g. Brown, Cai and DasGupta 2001, eq. 4)
    assert low == pytest.approx(sp.beta.ppf(0.025, x, n - x + 1), rel=1e-9)
    assert high == pytest.approx(sp.beta.ppf(0.975, x + 1, n - x), rel=1e-9)


def test_missed_rate_without_runs_knows_nothing_and_refuses_bad_counts():
    assert stats.missed_rate(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        stats.missed_rate(3, 2)


def test_missed_rate_at_90_percent_is_narrower():
    # the beta-quantile form at alpha = 0.10; rel 1e-9 as above
    low, high = stats.missed_rate(2, 8, confidence=0.90)
    assert (low, high) == (
        pytest.approx(sp.beta.ppf(0.05, 2, 7), rel=1e-9),
        pytest.approx(sp.beta.ppf(0.95, 3, 6), rel=1e-9),
    )


# --- seeds_to_call --------------------------------------------------------------------------


def test_seeds_to_call_known_cases():
    # From the closed form above: 0 of n has upper bound < 0.5 iff 0.025^(1/n) > 0.5, i.e.
    # n > ln 0.025 / ln 0.5 = 5.32, so from 6 runs on (0 of 5: 0.522, 0 of 6: 0.459); by
    # symmetry n of n has lower bound > 0.5 from 6 runs on.
    assert stats.seeds_to_call(0, 8)["to_converge"] == 0
    assert stats.seeds_to_call(0, 5)["to_converge"] == 1
    assert stats.seeds_to_call(0, 0) == {"to_fail": 6, "to_converge": 6}
    assert stats.seeds_to_call(3, 3)["to_fail"] == 3
    assert stats.seeds_to_call(8, 8)["to_fail"] == 0
    # calls that cannot be reached within the limit
    assert stats.seeds_to_call(5, 5, limit=3)["to_converge"] is None
    assert stats.seeds_to_call(0, 5, limit=0)["to_converge"] is None


def _upper(x, n):
    return 1.0 if n == 0 else (1.0 if x == n else sp.beta.ppf(0.975, x + 1, n - x))


def _lower(x, n):
    return 0.0 if x == 0 else sp.beta.ppf(0.025, x, n - x + 1)


@pytest.mark.parametrize("missed, runs", [(0, 3), (1, 4), (1, 8), (2, 5), (3, 7), (4, 8), (6, 10), (2, 20)])
def test_seeds_to_call_is_the_first_k_by_beta_quantiles(missed, runs):
    # Scan k with the beta-quantile bounds directly: the answer is the first k that crosses
    # 0.5 and the one before it must not have crossed. Exact integer comparison: no case here
    # has a bound within 1e-6 of 0.5.
    to = stats.seeds_to_call(missed, runs)
    k = to["to_converge"]
    assert _upper(missed, runs + k) < 0.5
    assert k == 0 or _upper(missed, runs + k - 1) >= 0.5
    k = to["to_fail"]
    assert _lower(missed + k, runs + k) > 0.5
    assert k == 0 or _lower(missed + k - 1, runs + k - 1) <= 0.5


def test_seeds_to_unsettle_known_cases():
    # 0 of 8 converges (upper 1 - 0.025^(1/8) = 0.369); one miss more, 1 of 9, still does
    # (upper 0.482), two, 2 of 10, no longer (0.556). By symmetry 8 of 8 fails until 8 of 10.
    assert stats.seeds_to_unsettle(0, 8) == 2
    assert stats.seeds_to_unsettle(8, 8) == 2
    # 0 of 6 converges (0.459); 1 of 7 does not (0.579)
    assert stats.seeds_to_unsettle(0, 6) == 1
    assert stats.seeds_to_unsettle(6, 6) == 1
    # a cell not called is unsettled already
    assert stats.seeds_to_unsettle(4, 8) == 0
    assert stats.seeds_to_unsettle(0, 0) == 0
    # not within the limit
    assert stats.seeds_to_unsettle(0, 40, limit=2) is None


# --- mann_whitney_less ----------------------------------------------------------------------


def _u_by_pairs(a, b):
    # U of a: pairs with a_i > b_j, plus half the ties (Mann and Whitney 1947), counted directly
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def _exact_less_by_enumeration(a, b):
    # Under H0 every choice of len(a) of the pooled values for side a is equally likely;
    # p = share of choices whose U of a is <= the observed one.
    pooled = list(a) + list(b)
    observed = _u_by_pairs(a, b)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        side_a = [pooled[i] for i in chosen]
        side_b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += _u_by_pairs(side_a, side_b) <= observed
    return hits / total


@pytest.mark.parametrize(
    "a, b",
    [
        ([1.2, 3.4, 2.2], [4.1, 5.0, 3.9, 6.3]),
        ([5.0, 1.0, 7.5, 2.5], [3.0, 8.0, 9.0, 6.0, 4.0]),
        ([10.0, 11.0, 12.0], [1.0, 2.0, 3.0]),  # a larger: p near 1
        ([1.0, 2.0, 3.0], [4.0, 5.0, INF]),  # one miss in b, no ties
        ([2.0, 4.0, 6.0, 8.0, 10.0], [1.0, 3.0, 5.0, 7.0, 9.0, INF]),
    ],
)
def test_mann_whitney_exact_matches_enumeration(a, b):
    # rel 1e-12: both are ratios of integer counts; SciPy's recursion is exact up to rounding
    result = stats.mann_whitney_less(a, b)
    assert result["method"] == "exact"
    assert result["p"] == pytest.approx(_exact_less_by_enumeration(a, b), rel=1e-12)
    assert result["u"] == _u_by_pairs(a, b)
    assert (result["n_a"], result["n_b"]) == (len(a), len(b))


def test_mann_whitney_exact_textbook_extreme():
    # All of a below all of b: only 1 of C(6, 3) = 20 arrangements is as extreme, p = 0.05.
    result = stats.mann_whitney_less([1.0, 2.0, 3.0], [4.0, 5.0, INF])
    assert result["p"] == pytest.approx(1 / 20, rel=1e-12)
    assert result["u"] == 0.0 and result["prob_less"] == 1.0


def _normal_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2))


def test_mann_whitney_with_ties_is_the_tie_corrected_normal_approximation():
    # Normal approximation with tie-corrected variance (e.g. Lehmann, Nonparametrics, 1975,
    # eq. 1.61): var U = n m / 12 * (N + 1 - sum(t^3 - t) / (N (N - 1))), and a continuity
    # correction of 0.5 towards the mean. Two misses (inf) in a tie; 2.0 tied too.
    a, b = [1.0, 2.0, 3.5, INF], [2.0, 4.0, 5.0, 6.0, INF]
    n, m, total = len(a), len(b), len(a) + len(b)
    ties = [2, 2]  # {2.0, 2.0} and {inf, inf}
    var = n * m / 12 * (total + 1 - sum(t**3 - t for t in ties) / (total * (total - 1)))
    u = _u_by_pairs(a, b)
    expected = _normal_cdf((u - n * m / 2 + 0.5) / math.sqrt(var))
    result = stats.mann_whitney_less(a, b)
    assert result["method"] == "asymptotic"
    # rel 1e-9: same formula evaluated by another route (erfc vs SciPy's norm), rounding only
    assert result["p"] == pytest.approx(expected, rel=1e-9)
    assert result["u"] == u


def test_a_miss_ranks_above_every_reach_and_two_misses_tie():
    # a single miss in a is greater than both of b's times, however large: U of a = 2
    result = stats.mann_whitney_less([INF], [1e300, 5.0])
    assert result["u"] == 2.0 and result["prob_less"] == 0.0
    # pairs (1, 2): less, (1, inf): less, (inf, 2): greater, (inf, inf): tie
    # P(a < b) + 0.5 P(tie) = (1 + 1 + 0 + 0.5) / 4
    result = stats.mann_whitney_less([1.0, INF], [2.0, INF])
    assert result["prob_less"] == 2.5 / 4 and result["method"] == "asymptotic"


def test_prob_less_is_the_share_of_pairs_where_a_is_smaller():
    a, b = [3.0, 1.0, 4.0, 1.5, 9.0], [2.0, 6.0, 5.0, 3.5]
    less = sum(x < y for x in a for y in b)
    assert stats.mann_whitney_less(a, b)["prob_less"] == pytest.approx(less / 20, abs=1e-15)


def test_mann_whitney_refuses_an_empty_side():
    with pytest.raises(ValueError):
        stats.mann_whitney_less([], [1.0])
    with pytest.raises(ValueError):
        stats.mann_whitney_less([1.0], [])


# --- hodges_lehmann_ratio -------------------------------------------------------------------


def test_hodges_lehmann_odd_pair_count_is_the_median_ratio():
    # With an odd number of pairs the median of log-differences is the log of the median
    # ratio (log is monotone), so the estimate is the plain median of a_i / b_j. rel 1e-12:
    # one log and one exp of rounding.
    a, b = [2.0, 9.0, 4.0], [1.0, 3.0, 8.0]
    ratios = sorted(x / y for x in a for y in b)
    assert stats.hodges_lehmann_ratio(a, b) == pytest.approx(ratios[4], rel=1e-12)


def test_hodges_lehmann_even_pair_count_by_hand():
    # pairs 2/1 and 4/1: median log-difference (log 2 + log 4) / 2 = log sqrt(8)
    assert stats.hodges_lehmann_ratio([2.0, 4.0], [1.0]) == pytest.approx(math.sqrt(8), rel=1e-12)
    # a shift by a constant factor is recovered exactly: a = 3 b
    assert stats.hodges_lehmann_ratio([3.0, 6.0, 30.0], [1.0, 2.0, 10.0]) == pytest.approx(3.0)


def test_hodges_lehmann_with_misses():
    assert stats.hodges_lehmann_ratio([INF, INF], [1.0, 2.0]) == INF  # a always missed
    assert stats.hodges_lehmann_ratio([1.0, 2.0], [INF]) == 0.0  # b always missed
    assert stats.hodges_lehmann_ratio([INF], [INF, INF]) == 1.0  # all pairs tie
    # differences 0, log 2, +inf: the median is log 2
    assert stats.hodges_lehmann_ratio([1.0, 2.0, INF], [1.0]) == pytest.approx(2.0)
    # differences 0, +inf, +inf: the median is +inf
    assert stats.hodges_lehmann_ratio([1.0, INF, INF], [1.0]) == INF
    # a = [1, inf], b = [inf, inf, 1]: (1, inf) -inf twice, (1, 1) 0, (inf, inf) 0 twice,
    # (inf, 1) +inf; sorted -inf, -inf, 0, 0, 0, +inf: the middle pair is 0, 0
    assert stats.hodges_lehmann_ratio([1.0, INF], [INF, INF, 1.0]) == 1.0


def test_hodges_lehmann_empty_and_bad_values():
    assert stats.hodges_lehmann_ratio([], [1.0]) is None
    assert stats.hodges_lehmann_ratio([1.0], []) is None
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError):
            stats.hodges_lehmann_ratio([1.0, bad], [1.0])


# --- holm -----------------------------------------------------------------------------------


def test_holm_wikipedia_example():
    # Wikipedia, "Holm-Bonferroni method", example: p = 0.01, 0.04, 0.03, 0.005 at alpha 0.05
    # rejects H1 and H4 only. Adjusted by hand: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06,
    # max(0.04*1, 0.06) = 0.06. rel 1e-12: a product of decimals, rounding only.
    result = stats.holm([0.01, 0.04, 0.03, 0.005])
    assert [r["reject"] for r in result] == [True, False, False, True]
    assert [r["p_adjusted"] for r in result] == pytest.approx([0.03, 0.06, 0.06, 0.02], rel=1e-12)
    assert [r["p"] for r in result] == [0.01, 0.04, 0.03, 0.005]


def test_holm_matches_r_multtest():
    # R multtest::mt.rawp2adjp "Holm" column, as stored in statsmodels'
    # statsmodels/stats/tests/test_multi.py (pval0 / res_multtest1); alpha 0.1 there.
    # rel 1e-12: the reference is printed to 17 significant digits.
    raw = [
        0.838541367553,
        0.642193923795,
        0.680845947633,
        0.967833824309,
        0.71626938238,
        0.177096952723,
        5.23656777208e-05,
        0.0202732688798,
        0.00028140506198,
        0.0149877310796,
    ]
    r_holm = {
        5.23656777208e-05: 5.2365677720800005e-04,
        0.00028140506198: 2.5326455578199999e-03,
        0.0149877310796: 1.1990184863680001e-01,
        0.0202732688798: 1.4191288215860001e-01,
    }
    result = stats.holm(raw, alpha=0.1)
    for p, r in zip(raw, result):
        assert r["p_adjusted"] == pytest.approx(r_holm.get(p, 1.0), rel=1e-12)
        assert r["reject"] == (p in (5.23656777208e-05, 0.00028140506198))


def _holm_sequential_rejects(pvalues, alpha):
    # Holm (1979) as a procedure: walk up the sorted p-values, reject while p_(i) <= alpha/(m-i)
    # (i from 0), and stop at the first that is not.
    m = len(pvalues)
    rejected = set()
    for i, j in enumerate(sorted(range(m), key=lambda k: pvalues[k])):
        if pvalues[j] > alpha / (m - i):
            break
        rejected.add(j)
    return rejected


def test_holm_adjusted_p_is_the_smallest_alpha_that_rejects():
    # Equivalent definition: H_j's adjusted p-value is the least alpha at which the sequential
    # procedure rejects it; check the "reject" flag against the procedure over a grid of alphas.
    pvalues = [0.02, 0.001, 0.04, 0.013, 0.3, 0.0125, 0.7, 0.011]
    for alpha in [0.001, 0.005, 0.01, 0.02, 0.05, 0.08, 0.1, 0.2, 0.5, 1.0]:
        flags = {j for j, r in enumerate(stats.holm(pvalues, alpha)) if r["reject"]}
        assert flags == _holm_sequential_rejects(pvalues, alpha), alpha


def test_holm_is_monotone_capped_and_handles_nothing():
    result = stats.holm([0.9, 0.5, 0.6])
    assert [r["p_adjusted"] for r in result] == [1.0, 1.0, 1.0]  # 0.5*3, then capped
    assert stats.holm([]) == []


# --- fisher_greater -------------------------------------------------------------------------


def test_fisher_tea_tasting():
    # Fisher, The Design of Experiments (1935), the lady tasting tea; Agresti, CDA 2nd ed.,
    # section 3.5.2, Table 3.8: table [[3, 1], [1, 3]], one-sided P = 17/70 = 0.243, sample odds
    # ratio 3*3 / (1*1) = 9. rel 1e-12: a ratio of integers.
    result = stats.fisher_greater(3, 4, 1, 4)
    assert result["p"] == pytest.approx(17 / 70, rel=1e-12)
    assert result["odds_ratio"] == 9.0


@pytest.mark.parametrize("cells", [(5, 8, 1, 8), (3, 10, 0, 12), (2, 6, 4, 6), (8, 8, 0, 8)])
def test_fisher_is_the_upper_hypergeometric_tail(cells):
    # With the margins fixed, the count of misses on side a is hypergeometric; the one-sided
    # p-value sums P(X >= observed) with math.comb. rel 1e-9: SciPy's hypergeometric tail is
    # accurate to ~1e-14, well inside this.
    missed_a, runs_a, missed_b, runs_b = cells
    misses, total = missed_a + missed_b, runs_a + runs_b
    tail = sum(
        math.comb(misses, x) * math.comb(total - misses, runs_a - x) for x in range(missed_a, min(misses, runs_a) + 1)
    ) / math.comb(total, runs_a)
    assert stats.fisher_greater(*cells)["p"] == pytest.approx(tail, rel=1e-9)


# --- cochran_armitage -----------------------------------------------------------------------

# Maternal alcohol consumption (0, <1, 1-2, 3-5, >=6 drinks a day) and congenital sex organ
# malformation: Graubard and Korn, Biometrics 43 (1987) 471-476; Agresti, CDA 2nd ed.,
# Table 3.7 (and An Introduction to CDA, 2nd ed., Table 2.7).
MALFORMED = [48, 38, 5, 1, 1]
BIRTHS = [17114, 14502, 793, 127, 38]


def test_cochran_armitage_agresti_malformation():
    # Agresti (CDA 2nd ed., section 3.4.6; ICDA 2nd ed., section 2.5.3), midpoint scores
    # 0, 0.5, 1.5, 4.0, 7.0: r = 0.0142, M^2 = (n - 1) r^2 = 6.57, P = 0.01 (two-sided);
    # z = 2.56 one-sided. z^2 = n r^2 differs from M^2 by the factor n / (n - 1) = 1.00003.
    # abs tolerances are half a unit in the last printed digit.
    result = stats.cochran_armitage(MALFORMED, BIRTHS, [0, 0.5, 1.5, 4.0, 7.0])
    assert result["z"] == pytest.approx(2.56, abs=0.005)
    assert result["z"] ** 2 == pytest.approx(6.57, abs=0.005)
    assert result["p_two_sided"] == pytest.approx(0.01, abs=0.005)
    assert result["p_increasing"] == pytest.approx(result["p_two_sided"] / 2, rel=1e-12)
    assert not result["degenerate"]


@pytest.mark.parametrize(
    "scores, one_sided, two_sided",
    [
        ([0, 0.5, 1.5, 4.0, 8.0], 0.0039, 0.0078),
        ([1, 2, 3, 4, 5], 0.0882, 0.1765),
    ],
)
def test_cochran_armitage_statxact_asymptotic(scores, one_sided, two_sided):
    # Cytel, StatXact Example 6, "Cochran-Armitage exact test of trend for imbalanced data"
    # (http://www.cytel.com/Products/StatXact/example_06.asp), the same table, asymptotic
    # p-values for average-drinks scores (0, 0.5, 1.5, 4, 8) and equally spaced scores.
    # abs 5e-5 for the one-sided value: printed to four decimals. The page's two-sided value
    # for equal spacing, .1765, is not twice its own one-sided .0882 (that needs a
    # one-sided value of at least .08825, which would print as .0883), so that check allows
    # 1.5e-4: enough for the page's own rounding, far below the other scores' .0078.
    result = stats.cochran_armitage(MALFORMED, BIRTHS, scores)
    assert result["p_increasing"] == pytest.approx(one_sided, abs=5e-5)
    assert result["p_two_sided"] == pytest.approx(two_sided, abs=1.5e-4)


def test_cochran_armitage_is_n_r_squared_over_the_individual_runs():
    # Another algebraic form (Armitage 1955; Agresti CDA 2nd ed. section 3.4.6): expand the
    # table into one (score, 0/1) pair per run; z^2 = N r^2, with r Pearson's correlation, and
    # the slope is the ordinary least-squares slope of outcome on score. Computed here with
    # plain sums over 32 574 points. rel 1e-9: sums of ~3e4 terms, rounding ~1e-12.
    scores = [0, 0.5, 1.5, 4.0, 7.0]
    xs, ys = [], []
    for x, n, s in zip(MALFORMED, BIRTHS, scores):
        xs += [s] * n
        ys += [1.0] * x + [0.0] * (n - x)
    count = len(xs)
    mx, my = sum(xs) / count, sum(ys) / count
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    r = sxy / math.sqrt(sxx * syy)
    result = stats.cochran_armitage(MALFORMED, BIRTHS, scores)
    assert result["z"] ** 2 == pytest.approx(count * r**2, rel=1e-9)
    assert result["z"] > 0
    assert result["slope"] == pytest.approx(sxy / sxx, rel=1e-9)
    assert r == pytest.approx(0.0142, abs=5e-5)  # Agresti's printed r


def test_cochran_armitage_direction_and_small_table():
    # misses 0, 1, 2, 3 of 4 runs at scores 0..3: by hand N = 16, p = 6/16, s_bar = 1.5,
    # T = 1*(-0.5) + 2*0.5 + 3*1.5 = 5, sum n (s - s_bar)^2 = 4*(2.25+0.25+0.25+2.25) = 20,
    # Var = (6/16)(10/16)*20 = 4.6875, z = 5 / sqrt(4.6875), slope = 5/20 = 0.25.
    result = stats.cochran_armitage([0, 1, 2, 3], [4, 4, 4, 4], [0, 1, 2, 3])
    assert result["z"] == pytest.approx(5 / math.sqrt(4.6875), rel=1e-12)
    assert result["slope"] == pytest.approx(0.25, rel=1e-12)
    assert result["p_increasing"] == pytest.approx(0.5 * math.erfc(result["z"] / math.sqrt(2)), rel=1e-9)
    # the reverse order is a decreasing trend: same |z|, upper tail now above one half
    reverse = stats.cochran_armitage([3, 2, 1, 0], [4, 4, 4, 4], [0, 1, 2, 3])
    assert reverse["z"] == pytest.approx(-result["z"], rel=1e-12)
    assert reverse["p_increasing"] == pytest.approx(1 - result["p_increasing"], rel=1e-9)
    assert reverse["p_two_sided"] == pytest.approx(result["p_two_sided"], rel=1e-12)


@pytest.mark.parametrize(
    "missed, runs, scores",
    [
        ([0, 0, 0], [5, 5, 5], [1, 2, 3]),  # nobody missed
        ([5, 5, 5], [5, 5, 5], [1, 2, 3]),  # everybody missed
        ([1, 3], [5, 5], [2, 2]),  # one score for every run
        ([0, 0], [0, 0], [1, 2]),  # no runs at all
    ],
)
def test_cochran_armitage_degenerate(missed, runs, scores):
    result = stats.cochran_armitage(missed, runs, scores)
    assert result == {"z": 0.0, "p_increasing": 0.5, "p_two_sided": 1.0, "slope": 0.0, "degenerate": True}


def test_cochran_armitage_refuses_bad_input():
    with pytest.raises(ValueError):
        stats.cochran_armitage([1, 2], [3, 3], [1, 2, 3])
    with pytest.raises(ValueError):
        stats.cochran_armitage([4, 2], [3, 3], [1, 2])


def test_average_ranks_are_scipys_rankdata():
    """The ranks mann_whitney_less memoises on, against SciPy's own ranking (ties averaged;
    inf above every finite value, two infinities tied)."""
    samples = [[3.0, 1.0, 2.0], [2.0, 2.0, 1.0, INF, INF], [5.0] * 4, [INF, 0.5, 0.5, 7.0, -1.0, 7.0]]
    for values in samples:
        assert stats._average_ranks(values) == list(sp.rankdata(values))


@pytest.mark.parametrize("seed", range(40))
def test_mann_whitney_on_ranks_is_scipy_on_the_times(seed):
    """The memoised test (SciPy given the pooled ranks) is SciPy given the times themselves,
    exact and tie-corrected alike: random samples of 1-8 times a side drawn from few values,
    so that ties and misses (inf) are common."""
    import random

    rng = random.Random(seed)
    values = [1.0, 1.5, 2.0, 3.25, INF] if seed % 2 else [rng.uniform(1, 9) for _ in range(20)] + [INF]
    a = [rng.choice(values) for _ in range(rng.randint(1, 8))]
    b = [rng.choice(values) for _ in range(rng.randint(1, 8))]
    got = stats.mann_whitney_less(a, b)
    method = "exact" if len(set(a + b)) == len(a + b) else "asymptotic"
    want = sp.mannwhitneyu(a, b, alternative="less", method=method)
    assert got["method"] == method and got["u"] == float(want.statistic)
    assert got["p"] == float(want.pvalue), "the same arithmetic on the same ranks: equal to the bit"
