"""The bench's arithmetic (its timings are figures, printed by `make bench`, not tested)."""
import pytest

from deepdensity.perf.bench import share_quartiles


def test_the_share_is_taken_round_by_round():
    # rounds: (10 - 9) / 10, (20 - 15) / 20, (10 - 8) / 10 = 0.1, 0.25, 0.2; quartiles by
    # linear interpolation between the sorted shares 0.1, 0.2, 0.25: 0.15 and 0.225. The
    # ratio of the medians, (10 - 9) / 10 = 0.1, would mix calls of different rounds.
    assert share_quartiles([10, 20, 10], [9, 15, 8]) == pytest.approx((0.2, 0.15, 0.225))

