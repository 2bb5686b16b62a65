"""A study's cells, one per mode, N and seed, and what the rules of docs/decision-rules.md
read in them (claims.py, contrasts.py). Pure: no TensorFlow, no files; the tests check it on
hand-made cells.

  cell      Cell: one run's outcome at (mode, N, seed); computed from cells alone: median times,
            efficiencies (Tables I-II), the runs that missed, failures grouped by batch and lr,
            and where the data filter is tried.
  outcome   A run *missed* when it did not reach the target within the cap, the paper's "NaN"
            (MISSED, the primary definition); the sensitivity definition counts as failed only
            a run that collapsed or became non-finite (FAILED, outcome).
  rate      missed / runs with its exact 95 % interval (stats.missed_rate): *converges* when the
            upper bound is below 0.5, *fails* when the lower bound is above 0.5, else
            *inconclusive* (Call, cell_rate); and the further seeds that could still change that
            (stats.seeds_to_call, and for a called cell stats.seeds_to_unsettle).
  time      passes to target x the clock's seconds per pass (one function: `seconds`, through
            `seconds_of_passes`; inf where missed), kept in a Cell as `time_to_target` (None where
            missed).
  claim     *reproduced*, *contradicted* or *inconclusive* (Verdict).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import Optional, Sequence

from deepdensity.scaling import policies, rules
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import curves, stats
from deepdensity.study.core.speedup import efficiency


@dataclass
class Cell:
    mode: str
    n: int
    seed: int
    status: str  # reached_target | max_epochs | diverged | stalled
    epochs: Optional[int]  # epochs run
    epochs_to_target: Optional[int]
    epoch_seconds: float  # one epoch at this (mode, N)
    time_source: str  # measured | modelled
    time_to_target_s: Optional[float]
    run: str  # folder of the run that gave the convergence
    final_val_loss: Optional[float] = None  # the last validation loss (what a failure ended at)
    passes_to_target: Optional[float] = None  # passes over the training set (None: not reached, or not recorded)

    @classmethod
    def of(cls, row: dict, **given) -> "Cell":
        """The one way a Cell is made: from a mapping that holds its fields (a record's cell, a
        run's result, an experiment's row; other keys ignored), `given` fields set over it."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in row.items() if k in names}, **given})

    @property
    def reached(self) -> bool:
        return self.status == RunStatus.REACHED


@dataclass(frozen=True)
class TimeBase:
    """What turns epochs to target into seconds under a clock: the data and the epoch."""

    n_train: int
    n_val: int
    definition: str = rules.PER_WORKER


def median_time(times: list) -> Optional[float]:
    """The median of one cell's times to target over its seeds (seconds, or passes); None
    unless every seed reached, a miss being None (as a Cell keeps it) or inf (cells.seconds):
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
        out[mode] = {n: efficiency(t1, n, median_time_at(cells, mode, n)) for n in workers}
    return out


def failures(cells: list) -> list:
    """Every run that did not reach the target, as the paper's NaN cells: (mode, N, seed,
    status, epochs run, last validation loss)."""
    return [
        (c.mode, c.n, c.seed, c.status, c.epochs, c.final_val_loss)
        for c in sorted(cells, key=lambda c: (c.mode, c.n, c.seed))
        if not c.reached
    ]


def failure_groups(cells: list, seq_2eta: list, base_batch: int) -> list:
    """[(global batch, peak lr / eta, schedule, modes, runs, runs that missed the target)]
    over every distinct run of the study: strong scaling once per seed (its N > 1 are the
    sequential run), the other modes at N > 1, and the sequential runs at 2 x eta."""
    groups = {}
    for c in cells:
        policy = policies.get(c.mode)
        if (c.n > 1) == policy.follows_sequential_path:  # N = 1 of every mode and strong's N > 1: the sequential run
            continue
        p = policy.plan(c.n, base_batch, base_lr=1.0)
        key = (p.global_batch, p.peak_lr, policy.schedule)
        groups.setdefault(key, []).append((c.mode, c.reached))
    for r in seq_2eta:
        groups.setdefault((base_batch, 2.0, "constant"), []).append(("2 x eta", r["status"] == RunStatus.REACHED))
    return [
        (b, lr, sched, sorted({m for m, _ in runs}), len(runs), sum(not ok for _, ok in runs))
        for (b, lr, sched), runs in sorted(groups.items())
    ]


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


MISSED, FAILED = "missed within the cap", "collapsed or non-finite"
FIRST_LOOK = 0.95  # the level of every cell's first look (docs/decision-rules.md)


class Call:
    """What the runs of one cell (or one pooled side) say: the cell vocabulary."""

    CONVERGES, FAILS, INCONCLUSIVE, NOT_RUN = "converges", "fails", "inconclusive", "not run"


class Verdict:
    """What the cells say of one claim: the claim vocabulary, apart from the cells'."""

    REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"


@dataclass(frozen=True)
class CellRate:
    runs: int
    missed: int
    low: float
    high: float
    call: str
    to_fail: Optional[int]
    to_converge: Optional[int]
    confidence: float = FIRST_LOOK

    @property
    def ci(self) -> str:
        """'95% CI 0.00-0.37': the interval with its level (97.5 % at a second look)."""
        return f"{self.confidence * 100:g}% CI {self.low:.2f}-{self.high:.2f}"

    def __str__(self) -> str:
        if not self.runs:
            return "not run"
        return f"{self.missed} of {self.runs} missed ({self.missed / self.runs:.0%}, {self.ci}): {self.call}"


def cell_rate(missed: int, runs: int, confidence: float = FIRST_LOOK) -> CellRate:
    if not runs:
        return CellRate(0, 0, 0.0, 1.0, Call.NOT_RUN, None, None, confidence)
    low, high = stats.missed_rate(missed, runs, confidence)
    call = Call.CONVERGES if high < 0.5 else Call.FAILS if low > 0.5 else Call.INCONCLUSIVE
    more = stats.seeds_to_call(missed, runs, confidence=confidence)
    return CellRate(runs, missed, low, high, call, more["to_fail"], more["to_converge"], confidence)


def two_looks(missed_by_seed: Sequence[bool], design: int, second_look: float) -> CellRate:
    """A cell's rate and call from its runs' misses in seed order, by the rules of
    docs/decision-rules.md: the first look is its first `design` seeds at 95 %; a cell called
    there keeps that call (on those runs), and only a cell inconclusive there is judged on all
    its runs at `second_look`'s level. Without a second look (0), or a design (0), or with no
    run past the design's seeds, every run at 95 %."""
    missed = list(missed_by_seed)
    if not (design and second_look and len(missed) > design):
        return cell_rate(sum(missed), len(missed))
    first = cell_rate(sum(missed[:design]), design)
    if first.call != Call.INCONCLUSIVE:
        return first
    return cell_rate(sum(missed), len(missed), second_look)


@dataclass
class Evidence:
    """The study's cells and what turns passes into seconds, with the failure definition."""

    cells: list
    workers: list
    definition: str = MISSED
    collapse_loss: Optional[float] = None
    clocks: dict = field(default_factory=dict)
    base: object = None  # cells.TimeBase: n_train, n_val, epoch definition
    design: int = 0  # the seeds the design gives every cell (0: not checked)
    second_look: float = 0.0  # the second look's level (0: none; docs/decision-rules.md)

    def short(self, mode: str, ns) -> list:
        """The N of `ns` where `mode` has fewer runs than the design's seeds (a study in progress)."""
        return [n for n in ns if 0 < len([c for c in self.cells if c.mode == mode and c.n == n]) < self.design]

    def ran(self, mode: str, least: int = 1) -> list:
        return sorted({c.n for c in self.cells if c.mode == mode and c.n >= least})

    def missed(self, c) -> bool:
        if self.definition == MISSED:
            return c.status != RunStatus.REACHED
        return outcome(c.status, c.final_val_loss, self.collapse_loss) == Outcome.FAILED

    def rate(self, mode: str, ns) -> CellRate:
        """One cell's rate by its two looks (`two_looks`); several N pooled, every run at 95 %."""
        runs = sorted((c for c in self.cells if c.mode == mode and c.n in ns), key=lambda c: c.seed)
        if len(set(ns)) == 1:
            return self.looked(runs)
        return cell_rate(sum(self.missed(c) for c in runs), len(runs))

    def looked(self, runs: list) -> CellRate:
        """The rate of one cell's runs (in seed order) by its two looks."""
        return two_looks([self.missed(c) for c in runs], self.design, self.second_look)

    def seconds(self, mode: str, n: int, clock, scale: float = 1.0) -> list:
        """Time to target per seed of (mode, N) under `clock` (times `scale`), inf where it missed."""
        return [
            seconds(c, clock, self.base, scale)
            for c in sorted(self.cells, key=lambda c: c.seed)
            if c.mode == mode and c.n == n
        ]


def seconds(c, clock, base, scale: float = 1.0) -> float:
    """A cell's time to target under `clock`, times `scale`; inf when it missed the target
    (seconds_to_target with the clock's epoch at the cell's mode and N)."""
    return seconds_to_target(c, *epoch_under(c, clock, base), scale)


def epoch_under(c, clock, base) -> tuple:
    """(seconds, passes over the training set) of one epoch at the cell's mode and N under `clock`."""
    return (
        clock.epoch_seconds(c.mode, c.n, base.n_train, base.n_val, base.definition),
        curves.passes_per_epoch(c.n, base.definition),
    )


def timed_under(cells: list, clock, base) -> list:
    """The cells, each with its time to target under `clock` as a Cell keeps it (time_to_target)."""
    return [dataclasses.replace(c, time_to_target_s=time_to_target(c, *epoch_under(c, clock, base))) for c in cells]


def time_to_target(c, epoch_s: float, per_epoch: int) -> Optional[float]:
    """A cell's time to target as a Cell and the record keep it: seconds_to_target, None where it
    is not finite. A miss is inf to the rank tests (slower than every run that reached) but None
    in a Cell, since JSON has no inf and the tables and figures read None as "did not reach"."""
    t = seconds_to_target(c, epoch_s, per_epoch)
    return t if math.isfinite(t) else None


def seconds_to_target(c, epoch_s: float, per_epoch: int, scale: float = 1.0) -> float:
    """The one time to target of a cell's run: passes to target x the seconds of a pass (an
    epoch of `epoch_s` seconds is `per_epoch` passes), times `scale`; inf when it missed the
    target. Epochs to target stand in for passes only where a run recorded no passes."""
    if c.status != RunStatus.REACHED:
        return math.inf
    passes = c.passes_to_target if c.passes_to_target is not None else c.epochs_to_target * per_epoch
    return seconds_of_passes(passes, epoch_s, per_epoch, scale)


def seconds_of_passes(passes: float, epoch_s: float, per_epoch: int, scale: float = 1.0) -> float:
    """`passes` passes over the training set in seconds, an epoch of `epoch_s` seconds being
    `per_epoch` passes, times `scale`: a time to target, or a figure's time at any pass of a run
    (Fig. 4 draws every pass of strong scaling by it, so its runs end where the tables put them)."""
    return passes * epoch_s / per_epoch * scale


class Outcome:
    """A run's outcome under the sensitivity definition of failure (REPORT.md's sensitivity
    column): it *failed* when its loss became non-finite or it ended at the collapse level (the
    loss of an output that ignores its input, rules.collapsed): it learnt nothing. A run that
    missed the target and ended below the collapse level is *slow*. Under the primary
    definition, the paper's, every run that missed the target within the cap is MISSED."""

    REACHED, SLOW, FAILED = "reached", "slow", "failed"


def outcome(status: str, final_val_loss: Optional[float], collapse_loss: Optional[float]) -> str:
    """reached, slow or failed, from a run's status and last validation loss."""
    if status == RunStatus.REACHED:
        return Outcome.REACHED
    if (
        status in (RunStatus.DIVERGED, RunStatus.COLLAPSED)
        or final_val_loss is None
        or not math.isfinite(final_val_loss)
    ):
        return Outcome.FAILED
    if collapse_loss is not None and final_val_loss >= collapse_loss:
        return Outcome.FAILED
    return Outcome.SLOW
