"""deepdensity/study/core/cells.py, with expected values by hand: the median time over a cell's
seeds (a time only where every seed reached); a cell's time to target, in the one place it is
computed (passes x the seconds of a pass, inf to the rank tests and None in a Cell where the run
missed); a run's outcome under the sensitivity definition of failure, its statuses written as
the records hold them (result.json, the ledger), strings."""

import math

import pytest
from scipy.stats import beta as sp_beta

from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import cells
from deepdensity.study.core.cells import (
    Cell,
    TimeBase,
    epoch_under,
    median_time,
    median_time_at,
    seconds,
    time_to_target,
    timed_under,
)


@pytest.mark.parametrize(
    "times, want",
    [
        ([30.0, 10.0, 20.0], 20.0),  # odd count: the middle one
        ([10.0, 20.0, 40.0, 30.0], 25.0),  # even count: the mean of the middle two
        ([7.0], 7.0),
        ([10.0, None, 20.0], None),  # a miss as a Cell keeps it
        ([10.0, math.inf, 20.0], None),  # a miss as cells.seconds gives it
        ([10.0, math.nan], None),  # an unpriced time is no time
        ([], None),  # no seed run
    ],
)
def test_the_median_time_is_over_every_seed_or_none(times, want):
    assert median_time(times) == want


def test_the_median_time_at_a_cell_reads_its_seeds_times_alone():
    def cell(mode, n, seed, t):
        return Cell(
            mode,
            n,
            seed,
            "reached_target" if t else "max_epochs",
            5,
            3 if t else None,
            2.0,
            "modelled",
            t,
            f"{mode}-n{n}-s{seed}",
        )

    cells = [
        cell("weak", 2, 0, 12.0),
        cell("weak", 2, 1, 16.0),
        cell("weak", 4, 0, 90.0),
        cell("strong", 2, 0, 1.0),
        cell("weak", 8, 0, 5.0),
        cell("weak", 8, 1, None),
    ]
    assert median_time_at(cells, "weak", 2) == 14.0
    assert median_time_at(cells, "weak", 8) is None
    assert median_time_at(cells, "weak", 16) is None


def cell(status="reached_target", n=4, epochs_to_target=3, passes=6.0, seed=0) -> Cell:
    return Cell(
        "weak", n, seed, status, 5, epochs_to_target, 99.0, "modelled", None, f"run-{seed}", passes_to_target=passes
    )


class EightSecondEpochs:
    """A clock whose every epoch takes 8 s."""

    def epoch_seconds(self, mode, n, n_train, n_val, definition):
        return 8.0


BASE = TimeBase(1844, 256, "per_worker")  # an epoch at N = 4 is 4 passes


@pytest.mark.parametrize(
    "c, epoch_s, per_epoch, want",
    [
        (cell(passes=6.0), 10.0, 2, 30.0),  # 6 passes x 10 s / 2 passes an epoch
        (cell(passes=None, epochs_to_target=3), 10.0, 2, 30.0),  # no passes recorded: 3 epochs = 6 passes
        (cell(status="max_epochs", epochs_to_target=None, passes=None), 10.0, 2, None),  # missed
        (cell(status="diverged", epochs_to_target=None, passes=None), 10.0, 2, None),
        (cell(passes=6.0), math.inf, 2, None),  # an unpriced epoch is no time
        (cell(passes=6.0), math.nan, 2, None),
    ],
)
def test_a_cells_time_to_target_is_passes_times_a_pass_and_none_where_missed(c, epoch_s, per_epoch, want):
    assert time_to_target(c, epoch_s, per_epoch) == want


def test_under_a_clock_an_epoch_is_the_clocks_seconds_and_n_passes():
    assert epoch_under(cell(n=4), EightSecondEpochs(), BASE) == (8.0, 4)
    assert epoch_under(cell(n=4), EightSecondEpochs(), TimeBase(1844, 256, "global")) == (8.0, 1)


def test_a_miss_is_inf_to_the_rank_tests_and_none_in_a_timed_cell():
    reached, missed = cell(passes=2.0, seed=0), cell(status="max_epochs", epochs_to_target=None, passes=None, seed=1)
    assert seconds(reached, EightSecondEpochs(), BASE) == 4.0  # 2 passes x 8 s / 4 passes
    assert seconds(missed, EightSecondEpochs(), BASE) == math.inf
    timed = timed_under([missed, reached], EightSecondEpochs(), BASE)
    assert [c.time_to_target_s for c in timed] == [None, 4.0]  # the cells' order kept
    assert [c.epoch_seconds for c in timed] == [99.0, 99.0]  # and their own epochs
    assert reached.time_to_target_s is None  # a copy, the cell untouched


@pytest.mark.parametrize(
    "status, final, want",
    [
        ("reached_target", 0.001, cells.Outcome.REACHED),
        ("diverged", None, cells.Outcome.FAILED),
        ("stalled", 0.0049, cells.Outcome.FAILED),  # ended at the collapse level: learnt nothing
        ("stalled", 0.0026, cells.Outcome.SLOW),  # warmup N = 8 seed 4 of the AVX-512 study
        ("max_epochs", 0.003, cells.Outcome.SLOW),
        ("max_epochs", float("nan"), cells.Outcome.FAILED),
        ("collapsed", 0.0049, cells.Outcome.FAILED),
    ],
)
def test_a_run_fails_only_at_the_collapse_level_or_a_non_finite_loss(status, final, want):
    assert cells.outcome(status, final, collapse_loss=0.00488) == want


def test_a_status_reads_and_writes_as_the_string_the_records_hold():
    """RunStatus is the status string itself: JSON writes the string, and a record's string
    compares equal to the member (records made before the enum read the same)."""
    import json

    assert json.dumps({"status": RunStatus.REACHED}) == '{"status": "reached_target"}'
    assert [s.value for s in RunStatus] == ["reached_target", "diverged", "collapsed", "stalled", "max_epochs"]
    assert "stalled" == RunStatus.STALLED and f"{RunStatus.CAPPED}" == "max_epochs"


def test_a_cell_is_made_one_way_from_a_row_with_given_fields_over_it():
    row = {
        "mode": "weak",
        "n": 4,
        "seed": 2,
        "status": "reached_target",
        "epochs": 9,
        "epochs_to_target": 9,
        "epoch_seconds": 3.0,
        "time_source": "measured",
        "time_to_target_s": 27.0,
        "run": "weak-n4-s2",
        "data": "network",
        "lr_rule": "eta",
    }  # an experiment's row: its other keys ignored
    cell = Cell.of(row, time_source="modelled", epoch_seconds=1.5)
    assert (cell.mode, cell.n, cell.seed, cell.run, cell.time_to_target_s) == ("weak", 4, 2, "weak-n4-s2", 27.0)
    assert (cell.time_source, cell.epoch_seconds) == ("modelled", 1.5), "given fields win over the row's"
    assert (cell.final_val_loss, cell.passes_to_target) == (None, None), "absent where the row has none"
    with pytest.raises(TypeError):
        Cell.of({k: v for k, v in row.items() if k != "status"})


# The second look (docs/decision-rules.md, "Second look"): the Clopper-Pearson bounds here come
# from scipy's beta quantiles, not from stats.missed_rate.
def _upper(missed, runs, level):
    return 1.0 if missed == runs else sp_beta.ppf(1 - (1 - level) / 2, missed + 1, runs - missed)


def _lower(missed, runs, level):
    return 0.0 if missed == 0 else sp_beta.ppf((1 - level) / 2, missed, runs - missed + 1)


@pytest.mark.parametrize("first, more", [(k, m) for k in range(9) for m in range(17)])
def test_two_looks_call_each_cell_by_the_rule_fixed_before_the_second_looks_runs(first, more):
    """Every first look of 8 (k missed) and every second look of 16 more (m missed): a cell
    called at its first look keeps that call on its 8 runs at 95 %; an inconclusive one is
    called on all 24 at 97.5 %."""
    from deepdensity.study.core.cells import Call, two_looks

    missed = [True] * first + [False] * (8 - first) + [True] * more + [False] * (16 - more)
    got = two_looks(missed, 8, 0.975)
    if _upper(first, 8, 0.95) < 0.5 or _lower(first, 8, 0.95) > 0.5:
        assert (got.runs, got.missed, got.confidence) == (8, first, 0.95)
        assert got.call == (Call.CONVERGES if first == 0 else Call.FAILS)
    else:
        total = first + more
        want = (
            Call.CONVERGES
            if _upper(total, 24, 0.975) < 0.5
            else Call.FAILS
            if _lower(total, 24, 0.975) > 0.5
            else Call.INCONCLUSIVE
        )
        assert (got.runs, got.missed, got.confidence, got.call) == (24, total, 0.975, want)
        assert got.high == pytest.approx(_upper(total, 24, 0.975), abs=1e-9)
        assert str(got).startswith(f"{total} of 24 missed") and "97.5% CI" in str(got)


def test_the_second_looks_cut_offs_are_those_the_rules_state():
    """docs/decision-rules.md: at 24 runs and 97.5 %, a cell converges with at most 6 missed
    and fails with at least 18."""
    assert _upper(6, 24, 0.975) < 0.5 <= _upper(7, 24, 0.975)
    assert _lower(18, 24, 0.975) > 0.5 >= _lower(17, 24, 0.975)


def test_without_a_second_look_every_run_counts_at_95():
    from deepdensity.study.core.cells import two_looks

    got = two_looks([True] + [False] * 15, 8, 0.0)
    assert (got.runs, got.missed, got.confidence) == (16, 1, 0.95) and "95% CI" in str(got)
    assert two_looks([True] + [False] * 7, 8, 0.975).confidence == 0.95, "no run past the first look"
