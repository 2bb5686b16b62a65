"""The study's clock for N workers sharing this host (timing.shared_host_epoch), against the
arithmetic written out here, and the claim text of the real strong-scaling runs."""
import math

import pytest

from deepdensity.study.tables import real_strong_summary
from deepdensity.study.timing import shared_host_epoch

PARTS = {"compute_scale": 0.9, "step_fixed_s": 0.010, "per_sample_s": 0.0008, "eval_per_sample_s": 0.0004,
         "allreduce_per_doubling_s": 0.0047}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_a_shared_host_epoch_is_its_measured_steps_and_allreduces_plus_one_evaluation(n):
    # per_worker epochs: an epoch at N is N passes of floor(1844 / 32) = 57 global batches of
    # 32, each step a rank's contended step plus an allreduce over N processes
    timing = {**PARTS, "shared_step_seconds": {"1": 0.027, "2": 0.026, "4": 0.034}}
    steps = 57 * n
    want = steps * (0.9 * timing["shared_step_seconds"][str(n)] + 0.0047 * math.log2(n)) + 0.9 * 0.0004 * 256
    assert shared_host_epoch(timing, n, 1844, 256, 32, "per_worker") == pytest.approx(want, rel=1e-12)


def test_a_study_timed_without_contended_steps_shares_the_hosts_throughput():
    # an older timing.json: the N workers' compute (fixed + per sample at 32 / N) adds up
    n, steps = 4, 57 * 4
    want = 4 * steps * 0.9 * (0.010 + 0.0008 * 8) + 0.9 * 0.0004 * 256 + steps * 0.0047 * 2
    assert shared_host_epoch(PARTS, n, 1844, 256, 32, "per_worker") == pytest.approx(want, rel=1e-12)


def test_the_real_strong_runs_are_described_beside_the_sequential_run():
    rows = [{"n": 2, "seed": 0, "status": "target", "epochs": 9, "passes_to_target": 17, "sequential_passes": 17},
            {"n": 4, "seed": 0, "status": "stalled", "epochs": 7, "passes_to_target": None, "sequential_passes": 17}]
    assert real_strong_summary(rows) == (
        "run for real on seed 0: horovodrun -np 2 reached it after 17 passes (the sequential run: 17); "
        "horovodrun -np 4 did not reach the target (stalled, 7 epochs)")
    assert real_strong_summary([]) == "not run for real in this study"
