"""The study's decision rules, fixed before any run: when one time to target is measurably
shorter than another, how cells make a claim's verdict, and which cells the sequential design
gives another seed. Whether a cell converges is a failure rate (rates.py); what a time is
depends on the clock (clocks.py). Pure: no TensorFlow, no files.

The rules (REPORT.md prints `RULES` with rates.RULES and the clocks):

  cell       For spending seeds only: a cell (mode, N) whose seeds all reached the target, or
             none did, is unanimous (*converges*, *fails*), else *mixed*; a unanimous call
             needs at least MIN_SEEDS seeds, with fewer it is *too few seeds*.
  compare    Time to target of two cells, seed by seed (a seed that missed the target counts
             as slower than any that reached it). A is *shorter* than B when every seed of A
             reached the target sooner than every seed of B (the ranges do not overlap), with
             at least MIN_SEEDS seeds on each side; *longer* the other way round; otherwise
             there is *no measurable difference*. Why this rule: if the seeds of A and B came
             from one distribution, all of A's below all of B's has probability
             1 / C(n_A + n_B, n_A), 0.05 at 3 against 3 (an exact one-sided permutation
             test). It is also monotone: another seed can only join two ranges, never part
             them, so adding seeds where a verdict is unsettled cannot make a difference
             appear that the first three seeds did not already show.
  claim      Each cell (or pooled side of a trend) a claim speaks of *agrees*, *disagrees* or
             is *undecided*. The claim is *contradicted* when one disagrees, *reproduced* when
             every one agrees, and *inconclusive* otherwise. Claims of one form are scored by
             one rule in every mode.
  seeds      Every cell runs the preset's first seeds; the rest of the time budget goes one
             seed at a time to the cells below the preset's max_seeds (every run narrows a
             failure rate's interval, and a side of a measured difference could close), those
             with the fewest seeds and then the cheapest first.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

MIN_SEEDS = 3
# The rules a study's record was judged under: a record that names another (or none) was run
# before these rules were written, and its report says that its verdicts re-read those runs.
RULES_VERSION = "2026-11-25: failure rates with exact intervals, pooled trend tests, three clocks"

CONVERGES, FAILS, MIXED, TOO_FEW = "converges", "fails", "mixed", "too few seeds"
SHORTER, LONGER, NO_DIFFERENCE, NEITHER = "shorter", "longer", "no measurable difference", "neither reached"
AGREES, DISAGREES, UNDECIDED = "agrees", "disagrees", "undecided"
REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"

RULES = [
    ("cell", f"a cell whose seeds all reached the target, or none did, is unanimous (at least {MIN_SEEDS} "
             f"seeds), else mixed: a description only, claims are judged on failure rates (rule 'rate')"),
    ("time", f"A is shorter than B when every seed of A reached the target sooner than every seed of B "
             f"(non-overlapping ranges, a missed target counting as slowest), at least {MIN_SEEDS} seeds "
             f"each; else no measurable difference. Chance of that under no difference: "
             f"1 / C(n_A + n_B, n_A), 0.05 at 3 against 3 (exact one-sided permutation test)"),
    ("claim", "contradicted when a cell (or a pooled side of a trend) it speaks of disagrees, reproduced "
              "when every one agrees, inconclusive otherwise; claims of one form are scored by one rule in "
              "every mode"),
    ("seeds", "the preset's first seeds in every cell; then, within the time budget, one more seed at a "
              "time for every cell below max_seeds (each run narrows a failure rate's interval; a side of a "
              "measured difference could close), fewest seeds and cheapest first"),
]


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


def verdict(cell_verdicts: Iterable[str]) -> str:
    """A claim's verdict from the verdicts of the cells it speaks of."""
    vs = list(cell_verdicts)
    if DISAGREES in vs:
        return CONTRADICTED
    if vs and all(v == AGREES for v in vs):
        return REPRODUCED
    return INCONCLUSIVE


def unsettled(reached: Sequence[bool], in_difference: bool, max_seeds: int) -> Optional[str]:
    """Why one more seed could still change this cell's part in a verdict, or None. A cell's
    failure rate is judged by its exact interval (rates.py), which narrows with every run, so
    every cell is unsettled until max_seeds; a side of a measured difference says so."""
    if len(reached) >= max_seeds:
        return None
    if len(reached) < MIN_SEEDS:
        return f"only {len(reached)} seed(s)"
    if in_difference:
        return "one side of a measured difference: another seed could close it"
    return f"{len(reached)} seeds: another narrows its failure rate's interval"


def next_in_line(candidates: Iterable[tuple]) -> list:
    """The order in which unsettled cells get their next seed: [(key, seeds so far, cost)]
    sorted fewest seeds first, then cheapest, then by key (for a repeatable order)."""
    return sorted(candidates, key=lambda c: (c[1], c[2], str(c[0])))
