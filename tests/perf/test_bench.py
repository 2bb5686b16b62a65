"""The bench's and the probes' arithmetic (their timings are figures, printed by `make bench`, not
tested), and the probes' entry point under horovodrun."""

import sys

import pytest

from deepdensity.perf.steps import share_quartiles


def test_the_share_is_taken_round_by_round():
    # rounds: (10 - 9) / 10, (20 - 15) / 20, (10 - 8) / 10 = 0.1, 0.25, 0.2; quartiles by
    # linear interpolation between the sorted shares 0.1, 0.2, 0.25: 0.15 and 0.225. The
    # ratio of the medians, (10 - 9) / 10 = 0.1, would mix calls of different rounds.
    assert share_quartiles([10, 20, 10], [9, 15, 8]) == pytest.approx((0.2, 0.15, 0.225))


def test_a_probe_on_data_steps_through_its_cubes_batch_after_batch():
    # the study's clock probes on the cubes it prices (a step cost 10-25 % more on them than on
    # random cubes on a 2-core AMD EPYC): each step must take the next batch, rank r from the
    # r-th batch on, wrapping round at the end of the data
    import numpy as np

    from deepdensity.perf.steps import probe_batches

    cubes = np.arange(10, dtype="f4").reshape(10, 1, 1, 1, 1) * np.ones((1, 16, 16, 16, 1), "f4")
    firsts = [float(x[0, 0, 0, 0, 0]) for x, _ in probe_batches(3, 1, cubes).take(4)]
    # cubes 3-5, 6-8, 9-0-1 (round the end); cube 2 makes no whole batch, and the data starts over
    assert firsts == [3.0, 6.0, 9.0, 3.0]
    x, y = next(iter(probe_batches(3, 1, cubes)))
    assert x.shape == (3, 16, 16, 16, 1) and np.array_equal(x.numpy(), y.numpy())  # an autoencoder's target
    assert np.array_equal(x.numpy()[:, 0, 0, 0, 0], [3, 4, 5])
    # a data set smaller than a batch still gives whole batches (its cubes again)
    small = next(iter(probe_batches(4, 0, cubes[:3])))[0].numpy()[:, 0, 0, 0, 0]
    assert np.array_equal(small, [0, 1, 2, 0])


@pytest.mark.slow
@pytest.mark.skipif(
    __import__("tests.support", fromlist=["horovodrun"]).horovodrun() is None, reason="horovodrun not installed"
)
def test_the_rank_waits_probe_gathers_both_ranks_steps_on_one_clock_and_its_report_arrives_whole():
    # two real ranks under horovodrun's default controller (MPI where built): rank 0 reports
    # every rank's (called, returned) pairs, in rank order, on one clock. 40 steps make its line
    # about 3,500 characters, over the ~2,000 at which mpirun's forwarding cut it (issue 55): the
    # report reaches the parent whole through its file (probes.run_child)
    import json

    from deepdensity.perf.probes import rank_probe, run_child
    from deepdensity.perf.rank_waits import split_steps
    from tests.support import SMOKE, horovodrun

    proc = run_child(
        [horovodrun(), "-np", "2", *rank_probe("rank-waits", "--config", SMOKE, "--batch", 4, "--steps", 40)],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "RANK_WAITS" in line]
    assert len(lines) == 1 and lines[0].startswith("RANK_WAITS ") and len(lines[0]) > 2500, lines
    calls = json.loads(lines[0].split("RANK_WAITS", 1)[1])
    assert len(calls) == 2 and all(len(rank) == 40 for rank in calls)
    steps = split_steps(calls)
    # no rank has an allreduce's result before every rank gave its part: on one clock, every
    # return of a step comes after every call of it (clocks apart by an offset would break this)
    for k in range(40):
        assert min(calls[0][k][1], calls[1][k][1]) >= max(calls[0][k][0], calls[1][k][0])
    assert all(wait >= 0 and after > 0 for wait, after in steps)


@pytest.mark.medium
def test_the_memory_probes_child_starts_training_as_train_py_does():
    """bench's peak-memory child (TRAIN_WITH_MAXRSS) reaches the training CLI: asked for --help
    it prints the training flags and exits 0 (it called `train.main`, which the thin train.py
    no longer has, and every memory figure of `make bench` failed)."""
    import subprocess

    from deepdensity.perf.horovod_figures import TRAIN_WITH_MAXRSS
    from tests.support import ROOT

    proc = subprocess.run(
        [sys.executable, "-c", TRAIN_WITH_MAXRSS, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--mode" in proc.stdout and "--emulate-workers" in proc.stdout
