"""The base lr of a study by default: the sequential model's edge of stability on this data, the
largest lr on a sqrt(2) grid that converges on every seed, below the collapse level (paper
section VI; docs/protocol.md, "The learning-rate premise"). The search runs the probes that
curves.py's edge_probe asks for, a speculative one beside each when two runs fit, and writes
its record to lr_sweep.json.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies, rules
from deepdensity.study.core import curves
from deepdensity.study.core.preset import Study
from deepdensity.study.run.runner import StudyRunner
from deepdensity.study.run.sequential import val_losses
from deepdensity.utils.files import write_atomic

# The stall rule's patience when the preset leaves it off; also the divergence criterion's.
DEFAULT_PATIENCE = 3


def find_edge(runner: StudyRunner, base_lr: float, epochs: int, patience: int, seeds,
              collapse_loss: Optional[float], say=print) -> tuple:
    """The sequential model's edge of stability: the largest lr on the grid
    base_lr * sqrt(2)^k that converges over `epochs` epochs (rules.diverges, with the
    collapse level) for every seed (curves.edge_probe). Returns (edge lr, one row per probe).
    With room for two runs, the probe the search would ask next if this one converges runs
    beside it; an outcome the search did not need cannot move the edge (curves.edge_index
    depends on the lowest k that diverges and on every seed just below it)."""
    outcomes, rows = {}, []

    def probe_run(probe: tuple) -> bool:
        k, i = probe
        lr, name = base_lr * curves.EDGE_STEP ** k, f"edge-k{k:+d}-s{seeds[i]}"
        runner.run(name, policies.STRONG, 1, {"base_lr": repr(lr), "max_epochs": epochs, "target_loss": 0.0,
                                       "seed": seeds[i], "stall_patience": patience, "collapse_patience": 0})
        vals = val_losses(runner.root / name)
        diverges = rules.diverges(vals, patience, collapse_loss)
        rows.append({"k": k, "seed": seeds[i], "lr": lr, "run": name, "diverges": diverges,
                     "epochs": len(vals), "val_losses": [v if math.isfinite(v) else None for v in vals]})
        say(f"edge search: lr {lr:.6g} (k = {k:+d}), seed {seeds[i]}: {'diverges' if diverges else 'converges'}")
        return diverges

    while (probe := curves.edge_probe(outcomes, len(seeds))) is not None:
        batch = [probe] + _speculative_probe(outcomes, probe, len(seeds), runner.parallel)
        for p, diverged in zip(batch, runner.run_all([functools.partial(probe_run, p) for p in batch],
                                                     label="edge search")):
            outcomes[p] = diverged
    k = curves.edge_index(outcomes, len(seeds))
    return base_lr * curves.EDGE_STEP ** k, sorted(rows, key=lambda r: (r["k"], r["seed"]))


def _speculative_probe(outcomes: dict, probe: tuple, n_seeds: int, parallel: int) -> list:
    """[the probe after `probe` if `probe` converges], when a second run fits beside it."""
    if parallel < 2:
        return []
    try:
        guess = curves.edge_probe({**outcomes, probe: False}, n_seeds)
    except rules.PlanError:
        return []
    return [guess] if guess is not None and guess != probe and guess not in outcomes else []


def edge_of_stability(runner: "StudyRunner", study: Study, cfg, collapse_loss: float, out: Path) -> tuple:
    """(eta, the search's record): find_edge over the study's seeds, written to lr_sweep.json."""
    E, patience = study.calibration_epochs, cfg.stall_patience or DEFAULT_PATIENCE
    eta, probes = find_edge(runner, cfg.base_lr, E, patience, study.edge_seeds, collapse_loss)
    sweep = {"epochs": E, "patience": patience, "grid_base_lr": cfg.base_lr, "edge_lr": eta,
             "seeds": study.edge_seeds, "collapse_loss": collapse_loss, "probes": probes}
    write_atomic(out / "lr_sweep.json", json.dumps(sweep, indent=2))
    print(f"edge of stability: lr {eta:.6g} ({eta / cfg.base_lr:.3g} x {cfg.base_lr:g}); "
          f"{eta * curves.EDGE_STEP:.6g} diverges")
    return eta, sweep
