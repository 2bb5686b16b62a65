"""The study's decision rules (deepdensity/study/decide.py), checked exhaustively on small
outcome sets and against independent computations (brute-force permutations)."""
import itertools
import math

import pytest

from deepdensity.study import decide as d


@pytest.mark.parametrize("n", range(0, 7))
def test_call_every_outcome_set(n):
    for reached in itertools.product([True, False], repeat=n):
        got = d.call(reached)
        k = sum(reached)
        if 0 < k < n:
            assert got == d.MIXED                 # both outcomes seen: mixed at any number of seeds
        elif n < 3:
            assert got == d.TOO_FEW
        else:
            assert got == (d.CONVERGES if k == n else d.FAILS)


def _brute_force_separation(n_a, n_b):
    """Share of the splits of n_a + n_b distinct ranks where A takes the n_a lowest."""
    splits = list(itertools.combinations(range(n_a + n_b), n_a))
    return sum(set(s) == set(range(n_a)) for s in splits) / len(splits)


def test_three_against_three_is_the_five_per_cent_level():
    # the reason MIN_SEEDS is 3: the smallest equal design in which "every seed beats every
    # seed" happens by chance at most 5 % of the time (counted over every split of the ranks)
    assert _brute_force_separation(d.MIN_SEEDS, d.MIN_SEEDS) == pytest.approx(0.05)
    assert _brute_force_separation(d.MIN_SEEDS - 1, d.MIN_SEEDS - 1) > 0.05


def test_compare_disjoint_overlapping_and_missed():
    assert d.compare([10, 11, 12], [13, 14, 15]) == d.SHORTER
    assert d.compare([13, 14, 15], [10, 11, 12]) == d.LONGER
    assert d.compare([10, 11, 13], [13, 14, 15]) == d.NO_DIFFERENCE      # a tie joins the ranges
    assert d.compare([10, 11, 12], [13, 14, None]) == d.SHORTER          # a miss is the slowest
    assert d.compare([10, 11, None], [13, 14, 15]) == d.NO_DIFFERENCE
    assert d.compare([None, None, None], [None, None, None]) == d.NEITHER
    assert d.compare([10, 11, 12], [None, None, None]) == d.SHORTER
    assert d.compare([10, 11], [13, 14, 15]) == d.TOO_FEW
    assert d.compare([10, 11, 12], [math.nan, 20, 21]) == d.SHORTER      # NaN time: not reached


def test_compare_is_antisymmetric_and_monotone_in_seeds():
    """Over every arrangement of small integer times: swapping the sides swaps the verdict,
    and a difference found with more seeds was already there on the first three."""
    values = [1, 2, 3, None]
    for a in itertools.product(values, repeat=4):
        for b in itertools.product(values, repeat=3):
            got = d.compare(a, b)
            mirrored = {d.SHORTER: d.LONGER, d.LONGER: d.SHORTER}.get(got, got)
            assert d.compare(b, a) == mirrored
            if got in (d.SHORTER, d.LONGER):
                assert d.compare(a[:3], b) == got


def test_unsettled_and_order():
    assert d.unsettled([True, True], 8) == "only 2 seed(s)"
    # every run narrows a missed rate's interval: unanimous and mixed cells alike go on to the cap,
    # and no seed is spent because a cell is one side of a difference
    assert "narrows its missed rate's interval" in d.unsettled([True] * 3, 8)
    assert "narrows its missed rate's interval" in d.unsettled([True, False, True], 8)
    assert d.unsettled([True] * 8, 8) is None                             # at the cap
    order = d.next_in_line([(("weak", 8), 3, 90.0), (("weak", 2), 3, 20.0), (("seq", 1), 4, 5.0)])
    assert [k for k, *_ in order] == [("weak", 2), ("weak", 8), ("seq", 1)]
