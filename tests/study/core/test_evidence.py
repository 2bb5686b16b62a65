"""A cell's time to target, in the one place it is computed (evidence.py): passes x the seconds
of a pass, inf to the rank tests and None in a Cell where the run missed. Expected values by hand."""
import math

import pytest

from deepdensity.study.core.cells import Cell, TimeBase
from deepdensity.study.core.evidence import epoch_under, seconds, time_to_target, timed_under


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
