"""The -np N step's allreduce split into the wait for the last rank and the allreduce after
every rank called, against timestamps worked by hand. Sums and differences of a few floats
in seconds: compared to 1e-12 s, far below the microseconds the bench reads."""

import pytest

from deepdensity.perf.rank_waits import split_steps, summary_ms


def test_each_step_splits_at_the_last_rank_to_call():
    # step 1: rank 0 calls at 1.000, rank 1 at 1.004; both return at 1.010
    # step 2: rank 1 first (2.000), rank 0 at 2.001; returns 2.003 and 2.0035
    calls = [[(1.000, 1.010), (2.001, 2.003)], [(1.004, 1.010), (2.000, 2.0035)]]
    assert split_steps(calls) == [pytest.approx((0.004, 0.006), abs=1e-12), pytest.approx((0.001, 0.0025), abs=1e-12)]


def test_summary_is_medians_and_means_in_ms():
    calls = [[(0.0, 0.010), (1.0, 1.003), (2.0, 2.004)], [(0.002, 0.010), (1.0, 1.003), (2.009, 2.012)]]
    # waits 2, 0, 9 ms; after every rank called 8, 3, 3 ms
    found = summary_ms(calls)
    assert found["steps"] == 3
    assert found["wait_for_last_rank_ms_median"] == pytest.approx(2.0, abs=1e-9)
    assert found["wait_for_last_rank_ms_mean"] == pytest.approx(11 / 3, abs=1e-9)
    assert found["after_all_called_ms_median"] == pytest.approx(3.0, abs=1e-9)
    assert found["after_all_called_ms_mean"] == pytest.approx(14 / 3, abs=1e-9)


def test_one_rank_has_no_wait():
    assert split_steps([[(0.0, 0.001), (1.0, 1.002)]]) == [(0.0, pytest.approx(0.001)), (0.0, pytest.approx(0.002))]


@pytest.mark.parametrize("calls", [[], [[(0.0, 1.0)], []], [[(0.0, 1.0)], [(0.0, 1.0), (2.0, 3.0)]]])
def test_ranks_must_record_the_same_steps(calls):
    with pytest.raises(ValueError, match="same number of steps"):
        split_steps(calls)


def test_a_return_before_its_call_means_the_clocks_differ():
    with pytest.raises(ValueError, match="not one clock"):
        split_steps([[(5.0, 4.0)], [(1.0, 6.0)]])
