"""Which cell gets the next seed (deepdensity/study/plan/study_plan.py), checked on every outcome set
up to 9 seeds: the rule must not look at the outcomes, only at the count."""
import itertools

import pytest

from deepdensity.study.plan import study_plan as s


@pytest.mark.parametrize("max_seeds", [1, 3, 5, 8])
def test_every_cell_below_the_cap_gets_a_seed_whatever_its_outcomes(max_seeds):
    for n in range(0, 10):
        reasons = {s.unsettled(list(outcomes), max_seeds) for outcomes in itertools.product([True, False], repeat=n)}
        assert len(reasons) == 1, f"{n} seeds: the reason depends on the outcomes: {reasons}"
        assert (reasons.pop() is None) == (n >= max_seeds)


def test_the_reason_names_the_seed_count():
    assert s.unsettled([True, True], 8) == "only 2 seed(s)"
    # every run narrows a missed rate's interval: unanimous and mixed cells alike go on to the cap,
    # and no seed is spent because a cell is one side of a difference
    assert "narrows its missed rate's interval" in s.unsettled([True] * 3, 8)
    assert "narrows its missed rate's interval" in s.unsettled([True, False, True], 8)
    assert s.unsettled([True] * 8, 8) is None


def test_fewest_seeds_then_cheapest_then_key_in_any_input_order():
    cells = [(("weak", 8), 3, 90.0), (("weak", 2), 3, 20.0), (("seq", 1), 4, 5.0), (("linear", 2), 3, 20.0)]
    expected = [("linear", 2), ("weak", 2), ("weak", 8), ("seq", 1)]
    for order in itertools.permutations(cells):
        assert [k for k, *_ in s.next_in_line(order)] == expected


def test_a_missing_seed_is_priced_by_its_cells_runs_else_the_modes_largest_n_below():
    by_cell = {("weak", 2): ["w2a", "w2b"], ("weak", 8): ["w8"], ("linear", 4): ["l4"]}
    assert s.runs_like(by_cell, "weak", 2) == ["w2a", "w2b"]
    assert s.runs_like(by_cell, "weak", 4) == ["w2a", "w2b"]     # N = 4 not run: N = 2's
    assert s.runs_like(by_cell, "weak", 16) == ["w8"]
    assert s.runs_like(by_cell, "linear", 2) == []                # nothing at or below N = 2
    assert s.runs_like(by_cell, "strong", 2) == []


def test_the_passes_to_expect_are_the_median_epochs_times_the_passes_an_epoch():
    assert s.passes_to_expect([3, 9, 5], 4) == 20               # median 5 epochs, 4 passes each
    assert s.passes_to_expect([3, 64, 5, 64], 2) == 10          # even count: the lower middle, 5
    assert s.passes_to_expect([7], 1, cap=64) == 7
    assert s.passes_to_expect([], 8, cap=64) == 512             # no like run: the cap
    assert s.passes_to_expect([], None) is None                 # neither: not estimated


def test_the_hours_here_are_the_passes_at_their_seconds_over_the_runs_side_by_side():
    from deepdensity.study.plan.study_plan import hours_here
    assert hours_here([(3600, 2.0), (1800, 4.0)], 2) == 2.0        # 7200 s + 7200 s, two at a time
    assert hours_here([(3600, 2.0)], 1) == 2.0
    assert hours_here([(3600, 2.0)], 0) == 2.0, "no parallel count is one at a time"
    assert hours_here([], 2) == 0.0
