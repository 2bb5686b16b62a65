"""A beyond study's record read for its reports (`Beyond`): its cells and the default study's
beside them, the modes shown, the clocks and what turns passes into seconds."""

from __future__ import annotations

from dataclasses import dataclass

from deepdensity.config import Config
from deepdensity.scaling import policies
from deepdensity.study.core.cells import Cell, TimeBase
from deepdensity.study.core.preset import Study
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.record import config_of, study_of, time_base

ORDER = (policies.STRONG, policies.WEAK, policies.LINEAR, policies.WARMUP, policies.ADAPTIVE, policies.LOCAL)


@dataclass
class Beyond:
    """A beyond record read for its reports: its cells, the default study's beside them, the
    modes shown (a remedy not exercised is not), the clocks and what turns passes into seconds."""

    record: dict
    study: Study
    cfg: Config
    cells: list  # this study's
    every: list  # and the default study's weak, linear and warmup
    skipped: dict  # {mode: why}: not exercised, left out of tables, figures and answers
    modes: list  # the modes shown, in ORDER
    clocks: dict  # {name: beyond_verdicts.RowClock}, the paper's first
    base: TimeBase


def read(record: dict) -> Beyond:
    study, cfg = study_of(record), config_of(record)
    cells = [Cell.of(c) for c in record["cells"]]
    every = cells + [Cell.of(c) for c in record["earlier"]["cells"]]
    skipped = bv.not_exercised(cells, record["run_rows"], cfg.batch_size, cfg.adaptive_theta)
    modes = [m for m in ORDER if m not in skipped and any(c.mode == m for c in every)]
    shown = [c for c in every if c.mode in modes]
    return Beyond(
        record,
        study,
        cfg,
        [c for c in cells if c.mode in modes],
        shown,
        skipped,
        modes,
        bv.clock_set(record["timing"], cfg.batch_size, bv.row_epochs(cells, record["run_rows"])),
        time_base(record),
    )
