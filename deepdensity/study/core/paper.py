"""The paper's published numbers the study sets its own beside: Tables I and II of Cunha et al.
(HPML 2018), efficiency in per cent, NaN where the target was not reached."""
from __future__ import annotations

import math

from deepdensity.scaling import policies

PAPER_TABLE1 = {1: 100.00, 2: 105.17, 4: 86.81, 8: 90.09, 16: 58.08, 32: 46.25}


PAPER_TABLE2 = {
    policies.WEAK: {1: 100.00, 2: 96.96, 4: 63.86, 8: 42.32, 16: 19.65, 32: 9.45},
    policies.WARMUP: {1: 100.00, 2: 84.95, 4: 75.49, 8: math.nan, 16: math.nan, 32: math.nan},
    policies.LINEAR: {1: 100.0, 2: math.nan, 4: math.nan, 8: math.nan, 16: math.nan, 32: math.nan},
}
