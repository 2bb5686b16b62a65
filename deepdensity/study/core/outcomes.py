"""A run's outcome under the sensitivity definition of failure (REPORT.md's sensitivity column):
it *failed* when its loss became non-finite or it ended at the collapse level (the loss of an
output that ignores its input, rules.collapsed): it learnt nothing. A run that missed the target
and ended below the collapse level is *slow*. Under the primary definition, the paper's, every
run that missed the target within the cap counts as missed (evidence.MISSED). Pure."""
from __future__ import annotations

import math
from typing import Optional

from deepdensity.scaling.rules import RunStatus

REACHED, SLOW, FAILED = "reached", "slow", "failed"


def outcome(status: str, final_val_loss: Optional[float], collapse_loss: Optional[float]) -> str:
    """reached, slow or failed, from a run's status and last validation loss."""
    if status == RunStatus.REACHED:
        return REACHED
    if status in (RunStatus.DIVERGED, RunStatus.COLLAPSED) or final_val_loss is None \
            or not math.isfinite(final_val_loss):
        return FAILED
    if collapse_loss is not None and final_val_loss >= collapse_loss:
        return FAILED
    return SLOW
