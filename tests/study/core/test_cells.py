"""deepdensity/study/core/cells.py, with expected values by hand: the median time over a cell's
seeds (a time only where every seed reached); a cell's time to target, in the one place it is
computed (passes x the seconds of a pass, inf to the rank tests and None in a Cell where the run
missed); a run's outcome under the sensitivity definition of failure, its statuses written as
the records hold them (result.json, the ledger), strings."""
import math

import pytest

from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import cells
from deepdensity.study.core.cells import (Cell, epoch_under, median_time, median_time_at, seconds, time_to_target,
                                          TimeBase, timed_under)


@pytest.mark.parametrize("times, want", [
    ([30.0, 10.0, 20.0], 20.0),          # odd count: the middle one
    ([10.0, 20.0, 40.0, 30.0], 25.0),    # even count: the mean of the middle two
    ([7.0], 7.0),
    ([10.0, None, 20.0], None),          # a miss as a Cell keeps it
    ([10.0, math.inf, 20.0], None),      # a miss as cells.seconds gives it
    ([10.0, math.nan], None),            # an unpriced time is no time
    ([], None),                          # no seed run
])
def test_the_median_time_is_over_every_seed_or_none(times, want):
    assert median_time(times) == want


def test_the_median_time_at_a_cell_reads_its_seeds_times_alone():
    def cell(mode, n, seed, t):
        return Cell(mode, n, seed, "reached_target" if t else "max_epochs", 5, 3 if t else None, 2.0, "modelled",
                    t, f"{mode}-n{n}-s{seed}")
    cells = [cell("weak", 2, 0, 12.0), cell("weak", 2, 1, 16.0), cell("weak", 4, 0, 90.0),
             cell("strong", 2, 0, 1.0), cell("weak", 8, 0, 5.0), cell("weak", 8, 1, None)]
    assert median_time_at(cells, "weak", 2) == 14.0
    assert median_time_at(cells, "weak", 8) is None
    assert median_time_at(cells, "weak", 16) is None


def cell(status="reached_target", n=4, epochs_to_target=3, passes=6.0, seed=0) -> Cell:
    return Cell("weak", n, seed, status, 5, epochs_to_target, 99.0, "modelled", None, f"run-{seed}",
                passes_to_target=passes)


class EightSecondEpochs:
    """A clock whose every epoch takes 8 s."""
    def epoch_seconds(self, mode, n, n_train, n_val, definition):
        return 8.0


BASE = TimeBase(1844, 256, "per_worker")       # an epoch at N = 4 is 4 passes


@pytest.mark.parametrize("c, epoch_s, per_epoch, want", [
    (cell(passes=6.0), 10.0, 2, 30.0),                       # 6 passes x 10 s / 2 passes an epoch
    (cell(passes=None, epochs_to_target=3), 10.0, 2, 30.0),  # no passes recorded: 3 epochs = 6 passes
    (cell(status="max_epochs", epochs_to_target=None, passes=None), 10.0, 2, None),   # missed
    (cell(status="diverged", epochs_to_target=None, passes=None), 10.0, 2, None),
    (cell(passes=6.0), math.inf, 2, None),                   # an unpriced epoch is no time
    (cell(passes=6.0), math.nan, 2, None),
])
def test_a_cells_time_to_target_is_passes_times_a_pass_and_none_where_missed(c, epoch_s, per_epoch, want):
    assert time_to_target(c, epoch_s, per_epoch) == want


def test_under_a_clock_an_epoch_is_the_clocks_seconds_and_n_passes():
    assert epoch_under(cell(n=4), EightSecondEpochs(), BASE) == (8.0, 4)
    assert epoch_under(cell(n=4), EightSecondEpochs(), TimeBase(1844, 256, "global")) == (8.0, 1)


def test_a_miss_is_inf_to_the_rank_tests_and_none_in_a_timed_cell():
    reached, missed = cell(passes=2.0, seed=0), cell(status="max_epochs", epochs_to_target=None, passes=None, seed=1)
    assert seconds(reached, EightSecondEpochs(), BASE) == 4.0        # 2 passes x 8 s / 4 passes
    assert seconds(missed, EightSecondEpochs(), BASE) == math.inf
    timed = timed_under([missed, reached], EightSecondEpochs(), BASE)
    assert [c.time_to_target_s for c in timed] == [None, 4.0]           # the cells' order kept
    assert [c.epoch_seconds for c in timed] == [99.0, 99.0]             # and their own epochs
    assert reached.time_to_target_s is None                             # a copy, the cell untouched


@pytest.mark.parametrize("status, final, want", [
    ("reached_target", 0.001, cells.Outcome.REACHED), ("diverged", None, cells.Outcome.FAILED),
    ("stalled", 0.0049, cells.Outcome.FAILED),                  # ended at the collapse level: learnt nothing
    ("stalled", 0.0026, cells.Outcome.SLOW),                    # warmup N = 8 seed 4 of the AVX-512 study
    ("max_epochs", 0.003, cells.Outcome.SLOW), ("max_epochs", float("nan"), cells.Outcome.FAILED),
    ("collapsed", 0.0049, cells.Outcome.FAILED),
])
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
    row = {"mode": "weak", "n": 4, "seed": 2, "status": "reached_target", "epochs": 9, "epochs_to_target": 9,
           "epoch_seconds": 3.0, "time_source": "measured", "time_to_target_s": 27.0, "run": "weak-n4-s2",
           "data": "network", "lr_rule": "eta"}          # an experiment's row: its other keys ignored
    cell = Cell.of(row, time_source="modelled", epoch_seconds=1.5)
    assert (cell.mode, cell.n, cell.seed, cell.run, cell.time_to_target_s) == ("weak", 4, 2, "weak-n4-s2", 27.0)
    assert (cell.time_source, cell.epoch_seconds) == ("modelled", 1.5), "given fields win over the row's"
    assert (cell.final_val_loss, cell.passes_to_target) == (None, None), "absent where the row has none"
    with pytest.raises(TypeError):
        Cell.of({k: v for k, v in row.items() if k != "status"})
