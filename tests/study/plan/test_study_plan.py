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
    assert s.runs_like(by_cell, "weak", 4) == ["w2a", "w2b"]  # N = 4 not run: N = 2's
    assert s.runs_like(by_cell, "weak", 16) == ["w8"]
    assert s.runs_like(by_cell, "linear", 2) == []  # nothing at or below N = 2
    assert s.runs_like(by_cell, "strong", 2) == []


def test_the_passes_to_expect_are_the_median_epochs_times_the_passes_an_epoch():
    assert s.passes_to_expect([3, 9, 5], 4) == 20  # median 5 epochs, 4 passes each
    assert s.passes_to_expect([3, 64, 5, 64], 2) == 10  # even count: the lower middle, 5
    assert s.passes_to_expect([7], 1, max_epochs=64) == 7
    assert s.passes_to_expect([], 8, max_epochs=64) == 512  # no like run: the cap
    assert s.passes_to_expect([], None) is None  # neither: not estimated


def test_the_hours_here_are_the_passes_at_their_seconds_over_the_runs_side_by_side():
    from deepdensity.study.plan.study_plan import hours_here

    assert hours_here([(3600, 2.0), (1800, 4.0)], 2) == 2.0  # 7200 s + 7200 s, two at a time
    assert hours_here([(3600, 2.0)], 1) == 2.0
    assert hours_here([(3600, 2.0)], 0) == 2.0, "no parallel count is one at a time"
    assert hours_here([], 2) == 0.0


# The second look (docs/decision-rules.md, "Second look"): which cells, which seeds.
@pytest.mark.parametrize("missed", range(9))
def test_a_cell_gets_the_second_look_exactly_when_its_first_look_was_inconclusive(missed):
    """8 seeds, k missed: 0 of 8 converges and 8 of 8 fails at 95 % (upper bound of 0/8 is
    1 - 0.025^(1/8) = 0.37, lower of 8/8 is 0.025^(1/8) = 0.63); 1 to 7 are inconclusive."""
    from deepdensity.study.plan.study_plan import second_look

    reached = [False] * missed + [True] * (8 - missed)
    got = second_look([reached], list(range(8)), 24)
    assert got == ([] if missed in (0, 8) else list(range(8, 24)))


def test_the_second_looks_seeds_follow_each_units_first_seeds_and_a_unit_goes_on_for_any_open_cell():
    from deepdensity.study.plan.study_plan import second_look

    called, open_ = [True] * 8, [True] * 7 + [False]
    assert second_look([called], list(range(3, 11)), 24) == []
    assert second_look([open_], list(range(3, 11)), 24) == list(range(11, 27)), "2 x eta: after its seeds 3-10"
    assert second_look([called, open_, called], list(range(3, 11)), 24) == list(range(11, 27))
    assert second_look([open_], list(range(8)), 0) == [], "no second look in the preset"
    assert second_look([open_[:6]], list(range(8)), 24) == [], "a first look not whole calls nothing"
    assert second_look([], list(range(8)), 24) == []


def test_the_plan_lists_the_second_looks_runs_of_the_committed_study_and_no_other():
    """The default preset against its committed record and ledger as the first look left it (its
    entries finished by the first look's record, 2026-11-28 13:06 UTC): the six cells
    inconclusive at their first look, 16 seeds each, and nothing of the first look."""
    import json

    from deepdensity.study.core import ledger
    from deepdensity.study.core.preset import load_study
    from deepdensity.study.plan.missing import missing_runs
    from tests.support import ROOT

    _, study = load_study("default")
    record = json.loads((ROOT / "reports" / "study.json").read_text())
    first_look = [
        e for e in ledger.read_entries(ROOT / "reports" / "ledger.jsonl") if e["finished"] <= "2026-11-28 13:06 UTC"
    ]
    missing = missing_runs(study, first_look, record)
    by_group = {}
    for (group, seed), passes, _, _ in missing:
        by_group.setdefault(group, []).append(seed)
        assert passes is not None and passes > 0
    assert by_group == {
        **{
            f"second look {cell}": list(range(8, 24))
            for cell in ("weak N = 4", "linear N = 2", "linear N = 4", "warmup N = 4", "warmup N = 8")
        },
        "second look 2 x eta": list(range(11, 27)),
    }
