"""Two cells' times compared, by the rules of docs/decision-rules.md (the claims of claims.py,
and the beyond study's comparisons, beyond_verdicts.py): a one-sided Mann-Whitney U test both
ways, a miss slower than every run that reached, with the Hodges-Lehmann ratio of the times
(`rank_test`); the comparisons of a claim corrected by Holm at ALPHA (`holm_verdict`); and the
fewest further seeds that could make a comparison reject (`seeds_to_reject`, `more_for_ranks`).
"""
from __future__ import annotations

import math
from typing import Optional

from deepdensity.study.core import stats
from deepdensity.study.core.evidence import Verdict

ALPHA = 0.05


def rank_test(a: list, b: list) -> dict:
    """A's times against B's: one-sided p both ways, the ratio A / B and P(A shorter)."""
    less, more = stats.mann_whitney_less(a, b), stats.mann_whitney_less(b, a)
    return {"p_shorter": less["p"], "p_longer": more["p"], "prob_shorter": less["prob_less"],
            "ratio": stats.hodges_lehmann_ratio(a, b)}


def holm_verdict(tests: list) -> str:
    """reproduced when every `p_shorter` rejects after Holm; contradicted when a `p_longer` does."""
    if not tests:
        return Verdict.INCONCLUSIVE
    if any(h["reject"] for h in stats.holm([t["p_longer"] for t in tests], ALPHA)):
        return Verdict.CONTRADICTED
    if all(h["reject"] for h in stats.holm([t["p_shorter"] for t in tests], ALPHA)):
        return Verdict.REPRODUCED
    return Verdict.INCONCLUSIVE


def ratio_text(r: Optional[float]) -> str:
    """A Hodges-Lehmann ratio as read: 0 or inf when the median pair holds a miss."""
    if r is None:
        return "-"
    return "inf (a miss)" if math.isinf(r) else "0 (a miss)" if r == 0 else f"{r:.2f}"


def seeds_to_reject(a: list, b: list, alpha: float, limit: int = 50) -> Optional[int]:
    """The fewest further seeds a side, strong's all shorter and the other's all missing (the most
    favourable case), after which the one-sided test of a shorter than b rejects at `alpha`."""
    for k in range(0, limit + 1):
        if stats.mann_whitney_less(list(a) + [0.0] * k, list(b) + [math.inf] * k)["p"] < alpha:
            return k
    return None


def more_for_ranks(pairs: dict) -> str:
    """For each comparison that does not yet reject at Holm's strictest level (ALPHA / m), the
    fewest further seeds a side that could make it; '-' when every one already does."""
    m = len(pairs)
    parts = []
    for (n, mode), (a, b) in pairs.items():
        k = seeds_to_reject(a, b, ALPHA / m) if m else None
        if k:
            parts.append(f"N = {n} vs {mode}: {k} more a side")
        elif k is None:
            parts.append(f"N = {n} vs {mode}: not within 50 more a side")
    return ("yes, in the most favourable case: " + "; ".join(parts)) if parts else "-"
