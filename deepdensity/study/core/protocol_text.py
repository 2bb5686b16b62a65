"""The paper, and how the study was run beside it: the paper's published numbers (Tables I and
II of Cunha et al., HPML 2018, efficiency in per cent, NaN where the target was not reached),
the protocol table of REPORT.md (paper against ours, every difference with its reason),
why strong scaling at N > 1 is read off the sequential runs, and what the real strong-scaling
runs showed."""

from __future__ import annotations

import math
from typing import Optional

from deepdensity.scaling import policies, rules
from deepdensity.utils.templates import fill

# The default study's decision rules (docs/decision-rules.md), as its record names them
RULES_VERSION = "2026-11-26: missed within the cap, rank tests with Holm, pooled trend tests, three clocks"
# When docs/decision-rules.md was committed (4ba81fe), before the full grid's runs began.
DECISION_RULES_FIXED_UTC = "2026-11-26 09:13 UTC"

SEQUENTIAL_PROOF = (
    "N > 1 is derived from the sequential runs (strong scaling's global batches are the "
    "sequential run's, in the same order: tests/scaling/test_rules.py::"
    "test_per_worker_strong_epoch_is_n_sequential_passes, and under horovodrun "
    "tests/training/test_horovod.py::test_strong_on_two_workers_follows_the_sequential_path)"
)


def real_strong_summary(rows: Optional[list]) -> str:
    """What the real strong-scaling runs (sequential.real_strong_runs) showed, beside the derivation."""
    if not rows:
        return "not run for real in this study"
    said = []
    for r in rows:
        got, seq = r["passes_to_target"], r["sequential_passes"]
        if got is None:
            said.append(f"horovodrun -np {r['n']} did not reach the target ({r['status']}, {r['epochs']} epochs)")
        else:
            said.append(
                f"horovodrun -np {r['n']} reached it after {got:g} passes"
                + (f" (the sequential run: {seq:g})" if seq is not None else " (the sequential run: not reached)")
            )
    return f"run for real on seed {rows[0]['seed']}: " + "; ".join(said)


def time_phrase(cfg) -> str:
    """How a cell's time to target is made, as the run's settings have it: passes to target
    (validated at every pass, or read at the epochs' ends) x the seconds of a pass."""
    read = "validated at every pass" if cfg.validate_every_pass else "read at the epochs' ends"
    epoch = "an epoch at N is N passes" if cfg.epoch_definition == rules.PER_WORKER else "an epoch is one pass"
    return f"passes to target ({read}) x the seconds of a pass ({epoch})"


def protocol_table(
    study, cfg, n_train: int, n_val: int, target: float, max_epochs: int, eta: float, sweep: Optional[dict], runner: str
) -> str:
    """REPORT.md's table "protocol: paper vs ours" (templates/protocol.md): a row per point the
    paper states (section VI), with every difference and its reason."""
    return fill(
        "protocol.md",
        study=study,
        cfg=cfg,
        n_train=n_train,
        n_val=n_val,
        target=target,
        max_epochs=max_epochs,
        eta=eta,
        sweep=sweep,
        runner=runner,
        time_phrase=time_phrase(cfg),
        PER_WORKER=rules.PER_WORKER,
        WARMUP=policies.WARMUP,
    )


PAPER_TABLE1 = {1: 100.00, 2: 105.17, 4: 86.81, 8: 90.09, 16: 58.08, 32: 46.25}


PAPER_TABLE2 = {
    policies.WEAK: {1: 100.00, 2: 96.96, 4: 63.86, 8: 42.32, 16: 19.65, 32: 9.45},
    policies.WARMUP: {1: 100.00, 2: 84.95, 4: 75.49, 8: math.nan, 16: math.nan, 32: math.nan},
    policies.LINEAR: {1: 100.0, 2: math.nan, 4: math.nan, 8: math.nan, 16: math.nan, 32: math.nan},
}
