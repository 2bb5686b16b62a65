"""What one more seed of each unit of the study runs (a unit, design.py: the sequential run with
strong scaling read off it, the sequential model at 2 x eta, one trained (mode, N) cell), as jobs
that record their outcomes in the study's Book.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.core import curves
from deepdensity.study.run.design import Book
from deepdensity.study.run.runner import StudyRunner
from deepdensity.study.run.sequential import strong_from_sequential
from deepdensity.study.run.session import Protocol, StudyRun


def study_units(s: StudyRun, proto: Protocol, real_strong: bool, book: Book, double_eta: bool,
                runner: Optional[StudyRunner] = None, prefix: str = "") -> dict:
    """{unit: job(seed) -> run names}: what one more seed of each unit (design.py) runs.
    Strong scaling follows the sequential path (the tests show it under horovodrun), so
    unless its runs are real it is read off each seed's sequential run. `runner` and `prefix`:
    another runner and run names, for the same units under other conditions (the ISA check)."""
    study, common, runner = s.study, proto.common(), runner or s.runner

    def sequential(seed: int) -> list:
        workers = [n for n in study.workers if n == 1 or not real_strong]
        derived, vals = strong_from_sequential(runner, seed, proto.eta, proto.seq_passes, workers, proto.target,
                                               proto.cap, proto.cfg.stall_patience, proto.collapse(), prefix,
                                               (proto.cfg.stall_near, proto.cfg.stall_near_patience))
        for n, (status, epochs) in derived.items():
            last = curves.sample_epoch_losses(vals, n)[epochs - 1]
            book.results[(policies.STRONG, n, seed)] = ({"status": status, "epochs": epochs, "time_to_target_s": None,
                                                  "final_val_loss": last if math.isfinite(last) else None},
                                                 f"{prefix}seq-s{seed}")
        return [f"{prefix}seq-s{seed}"]

    def cell(mode: str, n: int, seed: int, name: str, settings: dict, train_mode: str = "") -> list:
        result = runner.run(prefix + name, train_mode or mode, n, {**common, "seed": seed, **settings})
        book.results[(mode, n, seed)] = (result, prefix + name)
        return [prefix + name]

    units = {(policies.STRONG,): sequential}
    if double_eta:     # the paper's "further increasing the lr diverges", at 2 x eta
        units[("2eta",)] = lambda seed: cell("2eta", 1, seed, f"seq-2eta-s{seed}",
                                             {"base_lr": repr(2 * proto.eta)}, train_mode=policies.STRONG)
    for mode, n in study.trained_cells(real_strong):
        units[(mode, n)] = functools.partial(lambda mode, n, seed: cell(mode, n, seed, f"{mode}-n{n}-s{seed}", {}),
                                             mode, n)
    return units
