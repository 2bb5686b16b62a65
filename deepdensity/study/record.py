"""The result records the study's reports are rendered from: what a study found, in one
object, so that a report is a function of its record and the templates."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from deepdensity.config import Config
from deepdensity.scaling.rules import SpeedupModel
from deepdensity.study.preset import Study


@dataclass
class StudyRecord:
    """The default study (the paper's protocol): its cells, claims and how they were got."""
    name: str                        # the preset
    study: Study
    cfg: Config                      # the runs' settings, eta included
    cells: list                      # tables.Cell, one per mode, N and seed
    claims: list                     # tables.evaluate_claims
    protocol: list                   # tables.protocol_rows: paper vs ours
    target: float
    cap: int
    collapse_loss: float
    timing: dict                     # repro.measure_timing's parts of a step
    seq_epoch_s: float               # the sequential run's median epoch, measured
    modelled_seq_epoch_s: float      # the timing model's epoch at N = 1
    strong_model: SpeedupModel
    seq_2eta: Optional[dict]         # the sequential run at 2 x eta, or None
    sweep: Optional[dict]            # the edge-of-stability search, or None (eta fixed)
    n_train: int
    n_val: int
    runner: str                      # the --runner template, or "" (emulated workers)
    invocation: str                  # runs trained and reused, wall time
    runs_root: Path
    seq_run: Path                    # the first seed's sequential run (Fig. 1, Fig. 4)


@dataclass
class BeyondRecord:
    """A study of the modes beyond the paper (adaptive, local), the filter and the batch sweep."""
    name: str
    study: Study
    cfg: Config
    cells: list
    earlier: tuple                   # (the default study's weak/linear/warmup cells, a note on them)
    target: float
    cap: int
    eta: float
    timing: dict
    runs_root: Path
    n_train: int
    n_val: int
    invocation: str
    filtering: Optional[dict] = None
    sweep: Optional[list] = None
