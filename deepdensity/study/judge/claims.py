"""The paper's six claims judged by the rules fixed on 2026-11-26 before the full grid's runs
(docs/decision-rules.md): the study's cells in, one row per claim out, each *reproduced*,
*contradicted* or *inconclusive* (Verdict) by the table there. Pure: no TensorFlow. A cell, its
outcome and its time are cells.py's; how two cells' times are compared, and the pooled contrasts
beside the claims, contrasts.py's; each claim's own judgement, call_claims.py's (the claims about
cells' calls) or time_claims.py's (the claims about time). Here, their registry (CLAIMS) and the
rules in words (RULES).

A default study's record judged as its reports read it: the cells timed by passes on this host's
clock (`cells_of`), the three clocks time claims are judged under (`clock_set`), the rules'
evidence of the record (`evidence_of`), and the claims under both definitions of failure
(`claims_of`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from deepdensity.scaling.policies import LINEAR, STRONG, WARMUP, WEAK
from deepdensity.study.core import clocks
from deepdensity.study.core.cells import FAILED, MISSED, Cell, Evidence, epoch_under, time_to_target
from deepdensity.study.core.protocol_text import SEQUENTIAL_PROOF, real_strong_summary
from deepdensity.study.judge.call_claims import double_eta_diverges, linear_fails, strong_converges, warmup_to_four
from deepdensity.study.judge.contrasts import ALPHA
from deepdensity.study.judge.time_claims import strong_fastest, weak_efficiency
from deepdensity.study.record import config_of, study_of, time_base


@dataclass(frozen=True)
class ClaimRule:
    """A claim the study judges: `judge(evidence, seq_2eta)` gives its row
    (call_claims.claim_row), where `applies(evidence, seq_2eta)` says the study ran what it needs.
    Its key names it in claims.json and wherever a claim is looked up; never its title or its
    place in the list."""

    key: str
    judge: Callable[[Evidence, Optional[list]], dict]
    applies: Callable[[Evidence, Optional[list]], bool]


def _ran(mode: str) -> Callable[[Evidence, Optional[list]], bool]:
    return lambda v, seq_2eta: bool(v.ran(mode))


# The claims, in the paper's order. A new claim is one entry here and its own function
# (call_claims.py, time_claims.py).
CLAIMS = {
    rule.key: rule
    for rule in (
        ClaimRule("strong_converges", lambda v, _: strong_converges(v), _ran(STRONG)),
        ClaimRule("linear_fails", lambda v, _: linear_fails(v), _ran(LINEAR)),
        ClaimRule("warmup_to_four", lambda v, _: warmup_to_four(v), _ran(WARMUP)),
        ClaimRule("weak_efficiency", lambda v, _: weak_efficiency(v), _ran(WEAK)),
        ClaimRule("strong_fastest", lambda v, _: strong_fastest(v), _ran(STRONG)),
        ClaimRule("double_eta_diverges", double_eta_diverges, lambda v, seq_2eta: bool(seq_2eta)),
    )
}


def evaluate(v: Evidence, seq_2eta: Optional[list]) -> list:
    """Every claim of CLAIMS the study's runs allow, in its order, each row with its key."""
    return [{"key": rule.key, **rule.judge(v, seq_2eta)} for rule in CLAIMS.values() if rule.applies(v, seq_2eta)]


RULES = [
    (
        "outcome",
        "a run missed when it did not reach the target within the cap (the paper's NaN), whatever "
        "stopped it: collapsed, non-finite, stalled or capped; the sensitivity column counts as failed "
        "only the runs that collapsed or became non-finite",
    ),
    (
        "cell",
        "missed / runs with its exact (Clopper-Pearson) 95 % interval: converges when the upper bound is "
        "below 0.5, fails when the lower bound is above 0.5, inconclusive otherwise; each cell also says how "
        "many more seeds, all going one way, would change its call",
    ),
    (
        "time",
        "time to target = passes to target x the clock's seconds per pass; two cells are compared by a "
        f"one-sided Mann-Whitney U test (a miss slower than every run that reached), at {ALPHA:g} after Holm's "
        "correction over the comparisons of a claim, with the Hodges-Lehmann ratio of the times",
    ),
    (
        "claim",
        "reproduced, contradicted or inconclusive by the table of docs/decision-rules.md; pooled contrasts "
        "(Fisher, one-sided) and trends in log2 N (Cochran-Armitage, one-sided) are reported beside them",
    ),
    (
        "seeds",
        "the preset's seeds in every cell, none spent to settle one answer; the sequential runs take seeds "
        "disjoint from the learning-rate search's; while a cell is below them (a study in progress), a claim "
        "it could still change has no verdict",
    ),
]


def cells_of(record: dict) -> list:
    """The record's cells, each timed by passes: its time to target is passes to target x this
    host's seconds per pass (cells.time_to_target, as the claims' cells.seconds), its epoch the
    same clock's; a real run's own clock where the study measured it."""
    cells = [Cell.of(c) for c in record["cells"]]
    if record_runner(cells) or "timing" not in record:
        return cells
    host, base = clock_set(record)[clocks.HOST], time_base(record)

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
    primary, sensitivity = (
        evaluate(evidence_of(record, cells, definition), seq_2eta or None) for definition in (MISSED, FAILED)
    )
    sensitive = {s["key"]: s["verdict"] for s in sensitivity}
    for c in primary:
        c["verdict_sensitivity"] = sensitive[c["key"]]
        c["ours"] += _real_strong_note(record) if c["key"] == "strong_converges" else ""
    return primary


def evidence_of(record: dict, cells: list, definition: str) -> Evidence:
    study = study_of(record)
    return Evidence(
        cells,
        study.workers,
        definition,
        record["collapse_loss"],
        clock_set(record),
        time_base(record),
        len(study.seeds),
        study.second_look_confidence if study.second_look_seeds else 0.0,
    )


def _real_strong_note(record: dict) -> str:
    return "; " + SEQUENTIAL_PROOF + "; " + real_strong_summary(record.get("real_strong"))
