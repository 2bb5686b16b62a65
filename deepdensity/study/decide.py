"""What remains of the 2026-11-25 rules: the beyond study's time comparison, and the order
in which a preset with a time budget gives cells more seeds. The paper's claims are judged by
claims.py (docs/decision-rules.md); the beyond study moves to those rules next (issue 46).
Pure: no TensorFlow, no files.

  cell       a cell whose seeds all reached the target, or none did, is unanimous (*converges*,
             *fails*), else *mixed*; a unanimous call needs at least MIN_SEEDS seeds.
  compare    A's time to target is *shorter* than B's when every seed of A reached the target
             sooner than every seed of B (a miss counts as slowest), at least MIN_SEEDS seeds a
             side; *longer* the other way round; otherwise *no measurable difference*. Under
             no difference that has probability 1 / C(n_A + n_B, n_A), 0.05 at 3 against 3.
  seeds      within a preset's time budget, one more seed at a time to every cell below
             max_seeds, whatever its outcome so far, fewest seeds and then cheapest first.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

MIN_SEEDS = 3

CONVERGES, FAILS, MIXED, TOO_FEW = "converges", "fails", "mixed", "too few seeds"
SHORTER, LONGER, NO_DIFFERENCE, NEITHER = "shorter", "longer", "no measurable difference", "neither reached"



def call(reached: Sequence[bool]) -> str:
    """The convergence call of one cell from its seeds' outcomes (True: reached the target)."""
    if any(reached) and not all(reached):
        return MIXED
    if len(reached) < MIN_SEEDS:
        return TOO_FEW
    return CONVERGES if all(reached) else FAILS


def _slowest_last(t: Optional[float]) -> float:
    return math.inf if t is None or not math.isfinite(t) else t


def compare(times_a: Sequence[Optional[float]], times_b: Sequence[Optional[float]]) -> str:
    """A's time to target against B's, seed by seed (None: that seed missed the target)."""
    if len(times_a) < MIN_SEEDS or len(times_b) < MIN_SEEDS:
        return TOO_FEW
    a, b = [_slowest_last(t) for t in times_a], [_slowest_last(t) for t in times_b]
    if math.isinf(min(a)) and math.isinf(min(b)):
        return NEITHER
    if max(a) < min(b):
        return SHORTER
    if max(b) < min(a):
        return LONGER
    return NO_DIFFERENCE


def unsettled(reached: Sequence[bool], max_seeds: int) -> Optional[str]:
    """Why a cell gets one more seed, or None: every cell below max_seeds does, whatever its
    outcome so far (a rule that never spends seeds to settle one answer: docs/decision-rules.md)."""
    if len(reached) >= max_seeds:
        return None
    if len(reached) < MIN_SEEDS:
        return f"only {len(reached)} seed(s)"
    return f"{len(reached)} seeds: another narrows its missed rate's interval"


def next_in_line(candidates: Iterable[tuple]) -> list:
    """The order in which unsettled cells get their next seed: [(key, seeds so far, cost)]
    sorted fewest seeds first, then cheapest, then by key (for a repeatable order)."""
    return sorted(candidates, key=lambda c: (c[1], c[2], str(c[0])))
