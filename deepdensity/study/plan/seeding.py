"""Which cell gets the next seed, in a preset with a time budget: one more seed at a time to
every cell below max_seeds, whatever its outcome so far, fewest seeds and then cheapest first.
A rule that never spends seeds to settle one answer (docs/decision-rules.md, "Seeds"). The
claims are judged by claims.py, the beyond study by beyond_verdicts.py.
And what a seed still to run should take, in passes (`runs_like`, `passes_to_expect`): the one
estimate behind the plan's missing runs and the report's cells below the design's seeds.
Pure: no TensorFlow, no files.
"""
from __future__ import annotations

import statistics
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


def runs_like(by_cell: dict, mode: str, n: int) -> list:
    """The runs on record a missing seed of (mode, N = n) is expected to take as long as, from
    `by_cell` = {(mode, N): [run]}: the cell's own, else those of the mode's largest N below (a
    cell not reached yet at this N is priced by the nearest one that was); [] without either."""
    below = sorted((k for m, k in by_cell if m == mode and k <= n), reverse=True)
    return by_cell[(mode, below[0])] if below else []


def passes_to_expect(epochs: list, passes_an_epoch: Optional[int], cap: Optional[int] = None) -> Optional[int]:
    """The passes a run still to do is expected to take: the median of the epochs its like runs
    took (`epochs`), `passes_an_epoch` passes each; without such runs the cap's epochs, or None
    where there is no cap either (not estimated). The median, and its lower value for an even
    count, so that one run stopped at the cap does not set the estimate and it is a run's own
    count of epochs."""
    if not epochs:
        return None if cap is None else cap * passes_an_epoch
    return statistics.median_low(epochs) * passes_an_epoch
