"""How the study's cells are compared (docs/decision-rules.md). Two cells' times, for the claims
(claims.py) and the beyond study's comparisons (beyond_verdicts.py): a one-sided Mann-Whitney U
test both ways, a miss slower than every run that reached, with the Hodges-Lehmann ratio
(`rank_test`), a claim's comparisons corrected by Holm at ALPHA (`holm_verdict`), and the fewest
further seeds that could make one reject (`seeds_to_reject`, `more_for_ranks`). Beside the six
claims, what the runs say pooled: one mode's missed runs against another's (Fisher, one-sided),
trends of the missed rate in log2 N, in the peak lr and in the global batch (Cochran-Armitage,
one-sided), and warmup's claim as the runs have it (`warmup_holds_to`).
"""

from __future__ import annotations

import math
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.scaling.policies import LINEAR, STRONG, WARMUP, WEAK
from deepdensity.study.core import stats
from deepdensity.study.core.cells import Call, Evidence, Verdict


def peak_lr_over_eta(mode: str, n: int) -> float:
    return policies.plan(mode, n, base_lr=1.0).peak_lr


def global_batch_over_base(mode: str, n: int) -> float:
    return policies.plan(mode, n, base_batch=32).global_batch / 32


def pooled(v: Evidence, mode: str, ns) -> tuple:
    cells = [c for c in v.cells if c.mode == mode and c.n in ns]
    return sum(v.missed(c) for c in cells), len(cells)


def _fisher_row(v: Evidence, a: str, b: str) -> list:
    ma, ra = pooled(v, a, v.ran(a, 2))
    mb, rb = pooled(v, b, v.ran(b, 2))
    if not (ra and rb):
        return [f"{a} against {b}, N > 1 pooled", "not run", "-", "-"]
    f = stats.fisher_greater(ma, ra, mb, rb)
    return [
        f"{a} misses more often than {b}, N > 1 pooled (Fisher, one-sided)",
        f"{ma}/{ra} against {mb}/{rb}",
        f"odds ratio {ratio_text(f['odds_ratio'])}",
        f"{f['p']:.2g}",
    ]


def _trend_row(what: str, groups: dict) -> list:
    """Cochran-Armitage over {score: (missed, runs)}, scores log2 of the factor."""
    scores = sorted(groups)
    if len(scores) < 2:
        return [what, "fewer than two levels run", "-", "-"]
    t = stats.cochran_armitage(
        [groups[s][0] for s in scores], [groups[s][1] for s in scores], [math.log2(s) for s in scores]
    )
    counts = ", ".join(f"{s:g}: {groups[s][0]}/{groups[s][1]}" for s in scores)
    estimate = (
        "no run missed, or every run did"
        if t["degenerate"]
        else f"{t['slope'] * 100:+.1f} points a doubling, z = {t['z']:.2f}"
    )
    return [what, counts, estimate, "-" if t["degenerate"] else f"{t['p_increasing']:.2g}"]


def _by_factor(v: Evidence, factor, modes) -> dict:
    """{factor level: (missed, runs)}, each run once: the sequential runs as strong N = 1 (strong
    at N > 1 and every mode's N = 1 are read off those same runs)."""
    groups = {}
    for c in v.cells:
        once = c.n == 1 if policies.get(c.mode).follows_sequential_path else c.n > 1
        if c.mode in modes and once:
            level = factor(c.mode, c.n)
            m, r = groups.get(level, (0, 0))
            groups[level] = (m + v.missed(c), r + 1)
    return groups


def contrasts(v: Evidence) -> list:
    """[[what, counts, estimate, one-sided p]]: the pooled contrasts the data can speak to,
    beside the paper's claims (docs/decision-rules.md)."""
    rows = [_fisher_row(v, LINEAR, WEAK), _fisher_row(v, LINEAR, WARMUP), _fisher_row(v, WARMUP, WEAK)]
    # (warmup N >= 8 against N = 2, 4 is in the warmup claim's row)
    for mode in (LINEAR, WARMUP, WEAK):
        if v.ran(mode):
            rows.append(
                _trend_row(
                    f"{mode}: missed rate rises with log2 N (Cochran-Armitage)",
                    {n: pooled(v, mode, [n]) for n in v.ran(mode)},
                )
            )
    modes = [m for m in policies.paper() if v.ran(m)]
    rows.append(
        _trend_row(
            "every mode: missed rate rises with log2 of the peak lr over eta (Cochran-Armitage)",
            _by_factor(v, peak_lr_over_eta, modes),
        )
    )
    rows.append(
        _trend_row(
            "weak only (lr eta at every batch): missed rate rises with log2 of the global batch "
            "over 32 (Cochran-Armitage)",
            _by_factor(v, global_batch_over_base, [STRONG, WEAK]),
        )
    )
    return rows


def warmup_holds_to(v: Evidence) -> str:
    """The reformulation the data support: the largest N up to which every warmup cell converges,
    and the smallest N whose cell fails."""
    ns = v.ran(WARMUP)
    calls = {n: "below the design's seeds" if v.short(WARMUP, [n]) else v.rate(WARMUP, [n]).call for n in ns}
    holds = 0
    for n in ns:
        if calls[n] != Call.CONVERGES:
            break
        holds = n
    fails = next((n for n in ns if calls[n] == Call.FAILS), None)
    held = f"every warmup cell converges up to N = {holds}" if holds else "no warmup cell converges"
    failed = f"the first that fails is N = {fails}" if fails else "none fails"
    return f"{held}; {failed} ({', '.join(f'N = {n}: {c}' for n, c in calls.items())})"


ALPHA = 0.05


def rank_test(a: list, b: list) -> dict:
    """A's times against B's: one-sided p both ways, the ratio A / B and P(A shorter)."""
    less, more = stats.mann_whitney_less(a, b), stats.mann_whitney_less(b, a)
    return {
        "p_shorter": less["p"],
        "p_longer": more["p"],
        "prob_shorter": less["prob_less"],
        "ratio": stats.hodges_lehmann_ratio(a, b),
    }


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


MORE_SEEDS_LIMIT = 50  # how far seeds_to_reject looks


def seeds_to_reject(a: list, b: list, alpha: float, limit: int = MORE_SEEDS_LIMIT) -> Optional[int]:
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
        if k != 0:
            parts.append(f"N = {n} vs {mode}: {more_a_side(k)}")
    return ("yes, in the most favourable case: " + "; ".join(parts)) if parts else "-"


def more_a_side(k: Optional[int]) -> str:
    """seeds_to_reject's answer as the reports say it, for both studies."""
    return f"not within {MORE_SEEDS_LIMIT} more a side" if k is None else f"{k} more a side"
