"""What a run's validation curve says, in passes and epochs: where it reached the target,
strong scaling's epochs read off a sequential run, the edge of stability found on a grid of
learning rates (paper section VI), and the target calibrated on sequential runs (section VII).

Pure functions (no TensorFlow): the study reads its runs' metrics rows through them.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from deepdensity.scaling.rules import EPOCH_DEFINITIONS, PER_WORKER, PlanError, StoppingRules


def passes_per_epoch(workers: int, definition: str) -> int:
    """Passes over the training set in one epoch: N for `per_worker` (every worker walks one
    pass), 1 for `global` (the workers share one)."""
    if definition not in EPOCH_DEFINITIONS:
        raise PlanError(f"unknown epoch definition {definition!r}")
    return workers if definition == PER_WORKER else 1


def epoch_definition(settings: dict) -> str:
    """The epoch definition of a run's or a study's training settings (a config.json, a
    preset's `train`, a record's `settings`): PER_WORKER where they name none."""
    return settings.get("epoch_definition", PER_WORKER)


def validation_points(rows: Sequence[dict], per_epoch: int) -> list:
    """[(passes, val_loss)] of a run's metrics rows, in order: the validations inside each epoch
    (`pass_val_losses`, [passes, val_loss] pairs, with validate_every_pass) and the epoch's own
    at its end (epoch x per_epoch passes); a non-finite loss is None in the rows and stays so."""
    return [
        point
        for row in rows
        for point in [tuple(p) for p in row.get("pass_val_losses") or []]
        + [(row["epoch"] * per_epoch, row["val_loss"])]
    ]


def passes_to_target(rows: Sequence[dict], target_loss: float, per_epoch: int) -> Optional[float]:
    """The passes a run took to reach the target, read from its metrics rows (validation_points).
    None when it never reached it."""
    for passes, val in validation_points(rows, per_epoch):
        if val is not None and math.isfinite(val) and val <= target_loss:
            return float(passes)
    return None


def sample_epoch_losses(pass_losses: Sequence[float], workers: int) -> list:
    """Strong scaling's per-epoch validation losses read off the sequential run's per-pass
    ones: with `per_worker` epochs, epoch e on N workers ends where pass N*(e+1) ends."""
    return [pass_losses[i] for i in range(workers - 1, len(pass_losses), workers)]


def derive_strong(pass_losses: Sequence[float], workers: int, stopping: StoppingRules) -> Optional[tuple]:
    """(status, epochs) of strong scaling on N workers from the sequential run's per-pass
    validation losses, applying the same stopping rules at its own epochs; None when the
    sequential run is not yet long enough to decide."""
    history = []
    for e, v in enumerate(sample_epoch_losses(pass_losses, workers)):
        history.append(v)
        reason = stopping.reason(e, v, v, history)
        if reason:
            return reason, e + 1
    return None


# The edge of stability (paper section VI: eta is the largest lr that still converges,
# so increasing it "causes divergence"), searched on a grid of base * sqrt(2)^k.
EDGE_STEP = math.sqrt(2.0)
EDGE_MAX_PROBES = 12


def edge_probe(outcomes: dict, n_seeds: int = 1) -> Optional[tuple]:
    """The next probe (grid index k, seed index) to run, given {(k, seed index): diverged?}
    so far; None once the edge is known.

    An lr converges only if it converges for every seed of the study: the edge is a
    property of the lr, not of one lucky initialisation. To spend few runs, the search
    climbs (from k = 0) or descends on the first seed alone until it meets a k that
    diverges, then checks the k just below it on the other seeds; if one diverges there,
    that k becomes the one that diverges and the search goes one step lower.
    """
    if n_seeds < 1:
        raise ValueError("need at least one seed")
    if not outcomes:
        return 0, 0
    if edge_index(outcomes, n_seeds) is not None:
        return None
    ks = {k for k, _ in outcomes}
    if len(ks) >= EDGE_MAX_PROBES:
        raise PlanError(f"no edge of stability within {EDGE_MAX_PROBES} probes of the lr grid")
    bad = _lowest_diverging(outcomes)
    if bad is None:  # everything so far converges: climb
        return max(ks) + 1, 0
    below = bad - 1
    return below, next(i for i in range(n_seeds) if (below, i) not in outcomes)


def _lowest_diverging(outcomes: dict) -> Optional[int]:
    bad = [k for (k, _), div in outcomes.items() if div]
    return min(bad) if bad else None


def edge_index(outcomes: dict, n_seeds: int = 1) -> Optional[int]:
    """The largest k that converges on every seed while k + 1 diverges on one; None if not
    yet bracketed."""
    bad = _lowest_diverging(outcomes)
    if bad is None:
        return None
    below = bad - 1
    if all(outcomes.get((below, i)) is False for i in range(n_seeds)):
        return below
    return None


def calibrate_target_median(runs_val_losses: Sequence[Sequence[float]], epochs: int) -> tuple:
    """The target from calibration runs that the study does not otherwise use: the median of
    their validation losses after `epochs` epochs, so that no seed of the study reaches it by
    construction. Returns (target, cap) with the cap 4 * epochs, as `calibrate_target`."""
    if not runs_val_losses:
        raise ValueError("calibration needs at least one run")
    ends = [calibrate_target(vals, epochs)[0] for vals in runs_val_losses]
    return float(np.median(ends)), 4 * epochs


def calibrate_target(sequential_val_losses: Sequence[float], epochs: int) -> tuple:
    """The paper's target: the validation loss the sequential run reaches after `epochs`
    epochs (paper: ~100), with a cap of 4 * epochs (paper: 400). Returns (target, cap)."""
    if epochs < 1:
        raise ValueError("calibration needs at least one epoch")
    if len(sequential_val_losses) < epochs:
        raise ValueError(f"the sequential run has {len(sequential_val_losses)} epochs, calibration needs {epochs}")
    target = float(sequential_val_losses[epochs - 1])
    if not math.isfinite(target):
        raise ValueError("the sequential run's loss is not finite at the calibration epoch")
    return target, 4 * epochs
