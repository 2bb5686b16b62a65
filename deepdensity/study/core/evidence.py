"""The study's cells as the rules of docs/decision-rules.md read them (claims.py, contrasts.py):
what counts as a miss, what a cell's runs say, and a run's one time to target.

  outcome   A run *missed* when it did not reach the target within the cap, the paper's "NaN"
            (MISSED, the primary definition); the sensitivity definition counts as failed only
            a run that collapsed or became non-finite (FAILED, outcomes.outcome).
  cell      missed / runs with its exact 95 % interval (stats.missed_rate): *converges* when the
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
from dataclasses import dataclass, field
from typing import Optional

from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import curves, outcomes, stats

MISSED, FAILED = "missed within the cap", "collapsed or non-finite"


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

    def __str__(self) -> str:
        if not self.runs:
            return "not run"
        return (f"{self.missed} of {self.runs} missed ({self.missed / self.runs:.0%}, 95% CI "
                f"{self.low:.2f}-{self.high:.2f}): {self.call}")


def cell_rate(missed: int, runs: int) -> CellRate:
    if not runs:
        return CellRate(0, 0, 0.0, 1.0, Call.NOT_RUN, None, None)
    low, high = stats.missed_rate(missed, runs)
    call = Call.CONVERGES if high < 0.5 else Call.FAILS if low > 0.5 else Call.INCONCLUSIVE
    more = stats.seeds_to_call(missed, runs)
    return CellRate(runs, missed, low, high, call, more["to_fail"], more["to_converge"])


@dataclass
class Evidence:
    """The study's cells and what turns passes into seconds, with the failure definition."""
    cells: list
    workers: list
    definition: str = MISSED
    collapse_loss: Optional[float] = None
    clocks: dict = field(default_factory=dict)
    base: object = None                  # cells.TimeBase: n_train, n_val, epoch definition
    design: int = 0                      # the seeds the design gives every cell (0: not checked)

    def short(self, mode: str, ns) -> list:
        """The N of `ns` where `mode` has fewer runs than the design's seeds (a study in progress)."""
        return [n for n in ns if 0 < len([c for c in self.cells if c.mode == mode and c.n == n]) < self.design]

    def ran(self, mode: str, least: int = 1) -> list:
        return sorted({c.n for c in self.cells if c.mode == mode and c.n >= least})

    def missed(self, c) -> bool:
        if self.definition == MISSED:
            return c.status != RunStatus.REACHED
        return outcomes.outcome(c.status, c.final_val_loss, self.collapse_loss) == outcomes.FAILED

    def rate(self, mode: str, ns) -> CellRate:
        runs = [c for c in self.cells if c.mode == mode and c.n in ns]
        return cell_rate(sum(self.missed(c) for c in runs), len(runs))

    def seconds(self, mode: str, n: int, clock, scale: float = 1.0) -> list:
        """Time to target per seed of (mode, N) under `clock` (times `scale`), inf where it missed."""
        return [seconds(c, clock, self.base, scale) for c in sorted(self.cells, key=lambda c: c.seed)
                if c.mode == mode and c.n == n]


def seconds(c, clock, base, scale: float = 1.0) -> float:
    """A cell's time to target under `clock`, times `scale`; inf when it missed the target
    (seconds_to_target with the clock's epoch at the cell's mode and N)."""
    return seconds_to_target(c, *epoch_under(c, clock, base), scale)


def epoch_under(c, clock, base) -> tuple:
    """(seconds, passes over the training set) of one epoch at the cell's mode and N under `clock`."""
    return (clock.epoch_seconds(c.mode, c.n, base.n_train, base.n_val, base.definition),
            curves.passes_per_epoch(c.n, base.definition))


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
