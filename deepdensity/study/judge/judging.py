"""The default study's record judged, as its reports read it: the cells timed by passes on this
host's clock (`cells_of`), the three clocks time claims are judged under (`clock_set`), the
rules' evidence of the record (`evidence_of`), and the paper's claims by the rules of claims.py
under both definitions of failure (`claims_of`)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from deepdensity.study.core import clocks
from deepdensity.study.core.cells import Cell, epoch_under, Evidence, FAILED, MISSED, time_to_target, TimeBase
from deepdensity.study.core.protocol_text import real_strong_summary, SEQUENTIAL_PROOF
from deepdensity.study.judge import claims as claim_rules
from deepdensity.study.record import config_of, study_of


def cells_of(record: dict) -> list:
    """The record's cells, each timed by passes: its time to target is passes to target x this
    host's seconds per pass (cells.time_to_target, as the claims' cells.seconds), its epoch the
    same clock's; a real run's own clock where the study measured it."""
    cells = [Cell(**c) for c in record["cells"]]
    if record_runner(cells) or "timing" not in record:
        return cells
    host, cfg = clock_set(record)[clocks.HOST], config_of(record)
    base = TimeBase(record["n_train"], record["n_val"], cfg.epoch_definition)

    def timed(c: Cell) -> Cell:
        epoch, per_epoch = epoch_under(c, host, base)
        return dataclasses.replace(c, time_to_target_s=time_to_target(c, epoch, per_epoch), epoch_seconds=epoch)
    return [timed(c) for c in cells]


def clock_set(record: dict) -> dict:
    """The clocks time claims are judged under (clocks.JUDGED), made from this host's model."""
    return clocks.judged_clocks(clocks.host_clock(record["timing"], config_of(record).batch_size))


def record_runner(cells: list) -> bool:
    """Were the cells' times measured (real runs with a launcher) rather than modelled?"""
    return any(c.time_source == "measured" for c in cells)


def claims_of(record: dict, cells: list, seq_2eta: Optional[list]) -> list:
    """The claims judged on `cells` and `seq_2eta` by the rules of docs/decision-rules.md
    (claims.py), each with its verdict again under the sensitivity definition of failure."""
    primary, sensitivity = (claim_rules.evaluate(evidence_of(record, cells, definition), seq_2eta or None)
                            for definition in (MISSED, FAILED))
    sensitive = {s["key"]: s["verdict"] for s in sensitivity}
    for c in primary:
        c["verdict_sensitivity"] = sensitive[c["key"]]
        c["ours"] += _real_strong_note(record) if c["key"] == "strong_converges" else ""
    return primary


def evidence_of(record: dict, cells: list, definition: str) -> Evidence:
    study, cfg = study_of(record), config_of(record)
    return Evidence(cells, study.workers, definition, record["collapse_loss"], clock_set(record),
                    TimeBase(record["n_train"], record["n_val"], cfg.epoch_definition), len(study.seeds))


def _real_strong_note(record: dict) -> str:
    return "; " + SEQUENTIAL_PROOF + "; " + real_strong_summary(record.get("real_strong"))
