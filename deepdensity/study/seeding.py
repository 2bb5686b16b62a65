"""Which cell gets the next seed, in a preset with a time budget: one more seed at a time to
every cell below max_seeds, whatever its outcome so far, fewest seeds and then cheapest first.
A rule that never spends seeds to settle one answer (docs/decision-rules.md, "Seeds"). The
claims are judged by claims.py, the beyond study by beyond_verdicts.py.
Pure: no TensorFlow, no files.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

# below this many seeds a cell is reported as short of seeds, whatever its outcomes
MIN_SEEDS = 3


def unsettled(reached: Sequence[bool], max_seeds: int) -> Optional[str]:
    """Why a cell gets one more seed, or None: every cell below max_seeds does, whatever its
    outcome so far."""
    if len(reached) >= max_seeds:
        return None
    if len(reached) < MIN_SEEDS:
        return f"only {len(reached)} seed(s)"
    return f"{len(reached)} seeds: another narrows its missed rate's interval"


def next_in_line(candidates: Iterable[tuple]) -> list:
    """The order in which unsettled cells get their next seed: [(key, seeds so far, cost)]
    sorted fewest seeds first, then cheapest, then by key (for a repeatable order)."""
    return sorted(candidates, key=lambda c: (c[1], c[2], str(c[0])))
