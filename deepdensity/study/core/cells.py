"""A study's cells, one per mode, N and seed, and what is computed from them alone: median
times, efficiencies (Tables I-II), the runs that missed, failures grouped by batch and lr, and
where the data filter is tried. Pure: no TensorFlow, no files; the tests check it on hand-made
cells. The claims judged on the cells: claims.py; their times: evidence.seconds."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import speedup


@dataclass
class Cell:
    mode: str
    n: int
    seed: int
    status: str                       # reached_target | max_epochs | diverged | stalled
    epochs: Optional[int]             # epochs run
    epochs_to_target: Optional[int]
    epoch_seconds: float              # one epoch at this (mode, N)
    time_source: str                  # measured | modelled
    time_to_target_s: Optional[float]
    run: str                          # folder of the run that gave the convergence
    final_val_loss: Optional[float] = None   # the last validation loss (what a failure ended at)
    passes_to_target: Optional[float] = None  # passes over the training set (None: not reached, or not recorded)

    @property
    def reached(self) -> bool:
        return self.status == RunStatus.REACHED


@dataclass(frozen=True)
class TimeBase:
    """What turns epochs to target into seconds under a clock: the data and the epoch."""
    n_train: int
    n_val: int
    definition: str = "per_worker"


def median_time(times: list) -> Optional[float]:
    """The median of one cell's times to target over its seeds (seconds, or passes); None
    unless every seed reached, a miss being None (as a Cell keeps it) or inf (evidence.seconds):
    a median of the seeds that reached alone would understate a cell whose other seeds never did."""
    if not times or any(t is None or not math.isfinite(t) for t in times):
        return None
    return statistics.median(times)


def median_time_at(cells: list, mode: str, n: int) -> Optional[float]:
    """median_time of the cells' times to target at (mode, N)."""
    return median_time([c.time_to_target_s for c in cells if c.mode == mode and c.n == n])


def efficiency_table(cells: list, modes, workers) -> dict:
    """{mode: {n: efficiency %}}, T1 / (n Tn) on median times to target; NaN if not reached."""
    out = {}
    for mode in modes:
        t1 = median_time_at(cells, policies.STRONG, 1) or median_time_at(cells, mode, 1)
        out[mode] = {n: speedup.efficiency(t1, n, median_time_at(cells, mode, n)) for n in workers}
    return out


def failures(cells: list) -> list:
    """Every run that did not reach the target, as the paper's NaN cells: (mode, N, seed,
    status, epochs run, last validation loss)."""
    return [(c.mode, c.n, c.seed, c.status, c.epochs, c.final_val_loss)
            for c in sorted(cells, key=lambda c: (c.mode, c.n, c.seed)) if not c.reached]


def failure_groups(cells: list, seq_2eta: list, base_batch: int) -> list:
    """[(global batch, peak lr / eta, schedule, modes, runs, runs that missed the target)]
    over every distinct run of the study: strong scaling once per seed (its N > 1 are the
    sequential run), the other modes at N > 1, and the sequential runs at 2 x eta."""
    groups = {}
    for c in cells:
        policy = policies.get(c.mode)
        if (c.n > 1) == policy.follows_sequential_path:   # N = 1 of every mode and strong's N > 1: the sequential run
            continue
        p = policy.plan(c.n, base_batch, base_lr=1.0)
        key = (p.global_batch, p.peak_lr, policy.schedule)
        groups.setdefault(key, []).append((c.mode, c.reached))
    for r in seq_2eta:
        groups.setdefault((base_batch, 2.0, "constant"), []).append(("2 x eta", r["status"] == RunStatus.REACHED))
    return [(b, lr, sched, sorted({m for m, _ in runs}), len(runs), sum(not ok for _, ok in runs))
            for (b, lr, sched), runs in sorted(groups.items())]


def failure_margins(groups: list, index: int) -> list:
    """[(value, runs, missed)] of failure_groups summed over everything but column `index`
    (0: global batch, 1: lr multiple)."""
    out = {}
    for g in groups:
        runs, missed = out.get(g[index], (0, 0))
        out[g[index]] = (runs + g[4], missed + g[5])
    return [(v, r, m) for v, (r, m) in sorted(out.items())]


def filter_n(cells: list, mode: str) -> Optional[int]:
    """The N > 1 at which to test data filtering for `mode` (Gahlot et al.'s remedy for large
    batches): the smallest N where a seed failed to reach the target; if none failed, the N
    with the longest median time to target; None if the mode was not run at N > 1."""
    ns = sorted({c.n for c in cells if c.mode == mode and c.n > 1})
    failed = [n for n in ns if any(not c.reached for c in cells if c.mode == mode and c.n == n)]
    if failed:
        return failed[0]
    if not ns:
        return None
    return max(ns, key=lambda n: (median_time_at(cells, mode, n) or 0.0, n))
