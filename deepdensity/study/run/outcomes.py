"""The study's outcomes: the Book its runs fill (each unit's seeds, their results, and why each
seed was run), and the cells read off it with their times to target (study_cells); `timed` gives
one run's outcome the same way, for the beyond study's rows."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import clocks, curves
from deepdensity.study.core.cells import Cell, time_to_target
from deepdensity.study.core.preset import DOUBLE_ETA, Study
from deepdensity.training.runs import read_metrics

# The unit of the sequential run (design.py), from which strong scaling at every N is read.
SEQUENTIAL_UNIT = (policies.SEQUENTIAL,)


class Book:
    """The study's outcomes so far: {(mode, N, seed): (result, run name)}, each unit's seeds,
    the runs behind them and why each seed was run."""

    def __init__(self):
        self.results, self.seeds, self.runs, self.why = {}, {}, {}, {}

    def add(self, unit: tuple, seed: int, run_names: list, why: str) -> None:
        self.seeds.setdefault(unit, []).append(seed)
        self.seeds[unit].sort()
        self.runs.setdefault(unit, []).extend(run_names)
        self.why[(unit, seed)] = why

    def reached(self, mode: str, n: int) -> list:
        """Reached the target? Per seed of (mode, N), in seed order."""
        return [
            r["status"] == RunStatus.REACHED
            for (m, nn, s), (r, _) in sorted(self.results.items())
            if (m, nn) == (mode, n)
        ]

    def cells_of(self, unit: tuple) -> list:
        """The (mode, N) whose outcome a unit's seeds decide."""
        if unit == SEQUENTIAL_UNIT:
            return sorted({(m, n) for m, n, _ in self.results if m == policies.SEQUENTIAL})
        if unit == (DOUBLE_ETA,):
            return [(DOUBLE_ETA, 1)]
        return [unit]


def epoch_durations(run_dir: Path) -> list:
    """Seconds of each epoch of a run after its first, from its own clock."""
    secs = [r["seconds"] for r in read_metrics(run_dir)]
    return [b - a for a, b in zip(secs, secs[1:])]


def study_cells(
    study: Study, book: Book, root: Path, real_runner: Optional[str], timing: dict, n_val: int, modelled, target: float
) -> list:
    """One Cell per mode, N and seed run so far, with its time to target: passes to target x
    the calibrated model's seconds of a pass (clocks.model_epoch), epoch by epoch where a run's batch or
    allreduces vary, or a real run's own clock with a runner."""
    cells = []
    for mode in study.modes:
        for n in study.mode_workers.get(mode, study.workers):
            key = mode if n > 1 else policies.SEQUENTIAL  # derived strong N > 1 are kept under strong too
            for (m, nn, seed), (r, run_name) in sorted(book.results.items()):
                if (m, nn) != (key, n):
                    continue
                epochs_to_target = r["epochs"] if r["status"] == RunStatus.REACHED else None
                if real_runner and n > 1:  # a real run on n workers: its own clock
                    epoch_s = statistics.median(epoch_durations(root / run_name) or [math.nan])
                    source, t = "measured", r["time_to_target_s"]
                elif policies.get(mode).varies_by_epoch and n > 1:  # batch or allreduces vary: epoch by epoch
                    epoch_s, t = modelled_from_rows(root / run_name, mode, n, n_val, timing, epochs_to_target)
                    source = "modelled"
                else:  # N = 1 of every mode is the sequential run
                    epoch_s, source, t = modelled(mode if n > 1 else policies.SEQUENTIAL, n), "modelled", None
                derived = n > 1 and policies.get(mode).follows_sequential_path and not real_runner
                cell = Cell.of(
                    r,
                    mode=mode,
                    n=n,
                    seed=seed,
                    epochs_to_target=epochs_to_target,
                    epoch_seconds=epoch_s,
                    time_source=source,
                    time_to_target_s=t,
                    run=run_name,
                    final_val_loss=r.get("final_val_loss"),
                    passes_to_target=_passes(root / run_name, r, n, study, target, derived),
                )
                cells.append(_timed_by_passes(cell, study) if source == "modelled" and t is None else cell)
    return cells


def _timed_by_passes(c: Cell, study: Study) -> Cell:
    """A cell on the calibrated model: its time to target is its passes to target x the model's
    seconds of a pass (cells.time_to_target, the one function the reports and claims time by)."""
    per_epoch = curves.passes_per_epoch(c.n, study.runs.epoch_definition)
    return dataclasses.replace(c, time_to_target_s=time_to_target(c, c.epoch_seconds, per_epoch))


def _passes(run_dir: Path, result: dict, n: int, study: Study, target: float, derived: bool) -> Optional[float]:
    """Passes to target of a cell that reached it, from its run's rows (curves.passes_to_target);
    strong scaling read off the sequential run takes that run's passes, which are the same at
    every N (its global batches are the sequential run's, and its epoch N of them)."""
    if result["status"] != RunStatus.REACHED:
        return None
    if not derived and result.get("passes_to_target") is not None:  # a run taken from the ledger
        return result["passes_to_target"]
    per_epoch = 1 if derived else curves.passes_per_epoch(n, study.runs.epoch_definition)
    return curves.passes_to_target(read_metrics(run_dir), target, per_epoch)


def modelled_from_rows(
    run_dir: Path, mode: str, n: int, n_val: int, timing: dict, epochs_to_target: Optional[int]
) -> tuple:
    """(median seconds per epoch, time to target or None) of an adaptive or local run on n
    devices, from each epoch's own steps, batch and allreduces (Clock.epoch_seconds_as_run)."""
    # the calibrated model, as for every other cell (its base batch sets rho only, unused here)
    c = clocks.host_clock(timing, 32)
    per_epoch = [
        c.epoch_seconds_as_run(mode, n, n_val, r["steps"], r["global_batch"], r["allreduces"])
        for r in read_metrics(run_dir)
    ]
    t = sum(per_epoch[:epochs_to_target]) if epochs_to_target else None
    return statistics.median(per_epoch or [math.nan]), t


def timed(
    run_dir: Path, mode: str, n: int, n_val: int, timing: dict, result: dict, target: float, per_epoch: int
) -> dict:
    """A run's outcome with its modelled time to target (epoch by epoch, from its rows) and its
    passes to target (`per_epoch` passes an epoch; the beyond study's verdicts compare passes first)."""
    reached = result["status"] == RunStatus.REACHED
    epoch_s, t = modelled_from_rows(run_dir, mode, n, n_val, timing, result["epochs"] if reached else None)
    return {
        "status": result["status"],
        "epochs": result["epochs"],
        "epochs_to_target": result["epochs"] if reached else None,
        "epoch_seconds": epoch_s,
        "time_to_target_s": t,
        "run": run_dir.name,
        "final_val_loss": result.get("final_val_loss"),
        "passes_to_target": curves.passes_to_target(read_metrics(run_dir), target, per_epoch) if reached else None,
    }
