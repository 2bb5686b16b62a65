"""The median time over a cell's seeds, in the one place it is computed (cells.median_time):
a time only where every seed reached. Expected values by hand."""
import math

import pytest

from deepdensity.study.core.cells import Cell, median_time, median_time_at


@pytest.mark.parametrize("times, want", [
    ([30.0, 10.0, 20.0], 20.0),          # odd count: the middle one
    ([10.0, 20.0, 40.0, 30.0], 25.0),    # even count: the mean of the middle two
    ([7.0], 7.0),
    ([10.0, None, 20.0], None),          # a miss as a Cell keeps it
    ([10.0, math.inf, 20.0], None),      # a miss as evidence.seconds gives it
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
