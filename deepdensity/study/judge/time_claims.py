"""The claims about time: strong scaling is the fastest at every N, weak scaling's efficiency falls.
Each is judged under every clock (clocks.JUDGED), its verdict the paper's clock's, with the ratio of
communication to compute at which the verdict would change (its break-even)."""

from __future__ import annotations

from deepdensity.scaling.policies import LINEAR, STRONG, WARMUP, WEAK
from deepdensity.study.core import clocks, stats
from deepdensity.study.core.cells import Call, Evidence, Verdict
from deepdensity.study.judge.call_claims import claim_row, complete, every_n
from deepdensity.study.judge.contrasts import ALPHA, holm_verdict, more_for_ranks, rank_test, ratio_text


def _time_claim(v: Evidence, judge) -> tuple:
    """({clock: verdict}, break-even text, evidence under the paper clock, its brief) of a time
    claim whose `judge(clock)` gives (verdict, evidence, a function giving its brief): the brief
    is made for the paper's clock alone, not at every rho of the break-even search."""
    by_clock = {name: judge(clock)[0] for name, clock in v.clocks.items()}
    host = v.clocks["host"]
    flips = clocks.break_even(lambda rho: judge(host.with_rho(rho))[0])
    device = f"one device per worker, free communication: {by_clock['device']}; " if "device" in by_clock else ""
    _, evidence, brief = judge(v.clocks.get("paper", host))
    return by_clock, device + clocks.describe_break_even(flips), evidence, brief()


def _holm_brief(tests: list, names: list) -> tuple:
    """(how many comparisons went each way after Holm, the one nearest to not rejecting) of the
    comparisons `tests` of a claim that A is shorter, named by `names`."""
    if not tests:
        return "no comparison run", "-"
    shorter = stats.holm([t["p_shorter"] for t in tests], ALPHA)
    longer = stats.holm([t["p_longer"] for t in tests], ALPHA)
    counts = f"shorter in {sum(h['reject'] for h in shorter)} of {len(tests)} comparisons after Holm"
    slower = sum(h["reject"] for h in longer)
    weakest = max(range(len(tests)), key=lambda i: shorter[i]["p_adjusted"])
    return (
        counts + (f", longer in {slower}" if slower else ""),
        f"least clear: {names[weakest]}, ratio {ratio_text(tests[weakest]['ratio'])}, "
        f"Holm p = {shorter[weakest]['p_adjusted']:.2g}",
    )


def strong_fastest(v: Evidence) -> dict:
    others = [m for m in (WEAK, LINEAR, WARMUP) if v.ran(m)]

    named = [(n, m) for n in v.workers if n > 1 for m in others]

    def judge(clock) -> tuple:
        tests, parts, names = [], [], []
        for n in v.ran(STRONG, 2):
            for mode in [m for m in others if n in v.ran(m)]:
                t = rank_test(v.seconds(STRONG, n, clock), v.seconds(mode, n, clock))
                tests.append(t)
                names.append(f"N = {n} vs {mode}")
                parts.append(
                    f"N = {n} vs {mode}: ratio {ratio_text(t['ratio'])}, P(strong shorter) "
                    f"{t['prob_shorter']:.2f}, p = {t['p_shorter']:.2g}"
                )
        verdict = holm_verdict(tests)
        if verdict == Verdict.REPRODUCED and len(tests) < len(named):  # a comparison not run: open
            verdict = Verdict.INCONCLUSIVE
        return (
            *complete(
                v,
                {m: [n for n in v.workers if n > 1] for m in [STRONG, *others]},
                verdict,
                "; ".join(parts) + f" (one-sided Mann-Whitney, Holm over {len(tests)} of {len(named)})",
            ),
            lambda: _holm_brief(tests, names),
        )

    by_clock, flips, evidence, brief = _time_claim(v, judge)
    paper = v.clocks.get("paper", v.clocks.get("host"))
    pairs = {
        (n, mode): (v.seconds(STRONG, n, paper), v.seconds(mode, n, paper))
        for n in v.ran(STRONG, 2)
        for mode in others
        if n in v.ran(mode)
    }
    return claim_row(
        "Strong scaling is the fastest at every N",
        "fastest at N = 2..32",
        "at each N > 1, strong's time to target shorter than each other mode's: every one-sided "
        "Mann-Whitney test rejects at 0.05 after Holm; ratio = Hodges-Lehmann strong / other",
        evidence,
        by_clock.get("paper", Verdict.INCONCLUSIVE),
        more_for_ranks(pairs),
        brief,
        by_clock,
        flips,
    )


_EFFICIENCY = {
    Verdict.REPRODUCED: "its efficiency falls",
    Verdict.CONTRADICTED: "its efficiency rises",
    Verdict.INCONCLUSIVE: "no measurable fall in efficiency",
}


def weak_efficiency(v: Evidence) -> dict:
    conv, ours, more, (calls, nearest) = every_n(v, WEAK, Call.CONVERGES)
    ns = v.ran(WEAK, 2)
    rule = (
        "every N converges, and N x time to target at N = 2 shorter than at the largest N "
        "(one-sided Mann-Whitney, p < 0.05)"
    )
    if len(ns) < 2:
        return claim_row(
            "Weak scaling converges everywhere but its efficiency falls",
            "reached at every N; efficiency 100 -> 9.45 %",
            rule,
            ours + "; efficiency: fewer than two N > 1 run",
            Verdict.INCONCLUSIVE,
            more,
            (calls, nearest),
        )
    lo, hi = ns[0], ns[-1]
    named = (lo, hi) == (min(n for n in v.workers if n > 1), max(v.workers))  # the rule's N = 2 and 32

    def judge(clock) -> tuple:
        t = rank_test(v.seconds(WEAK, lo, clock, lo), v.seconds(WEAK, hi, clock, hi))
        eff = (
            Verdict.CONTRADICTED
            if t["p_longer"] < ALPHA
            else Verdict.REPRODUCED
            if t["p_shorter"] < ALPHA and named
            else Verdict.INCONCLUSIVE
        )
        both = (
            Verdict.CONTRADICTED
            if Verdict.CONTRADICTED in (conv, eff)
            else Verdict.REPRODUCED
            if conv == eff == Verdict.REPRODUCED
            else Verdict.INCONCLUSIVE
        )
        ratio = (
            f"N x time to target, N = {lo} against N = {hi}: ratio {ratio_text(t['ratio'])}, p = {t['p_shorter']:.2g}"
        )
        return (
            *complete(v, {WEAK: [lo, hi]}, both, f"{ours}; {ratio}"),
            lambda: (f"{calls}; {_EFFICIENCY[eff]}", ratio if conv == Verdict.REPRODUCED else f"{nearest}; {ratio}"),
        )

    by_clock, flips, evidence, brief = _time_claim(v, judge)
    return claim_row(
        "Weak scaling converges everywhere but its efficiency falls",
        "reached at every N; efficiency 100 -> 9.45 %",
        rule,
        evidence,
        by_clock.get("paper", Verdict.INCONCLUSIVE),
        more,
        brief,
        by_clock,
        flips,
    )
