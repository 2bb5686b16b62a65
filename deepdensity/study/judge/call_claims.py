"""The row every claim gives (`claim_row`), and the claims about cells' calls: strong scaling
converges, the linear rule fails, warmup converges to N = 4, 2 x eta diverges; each read cell by cell,
open while a cell it rests on is below the design's seeds, with the seeds that could still change it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deepdensity.scaling.policies import LINEAR, STRONG, WARMUP
from deepdensity.study.core import clocks, stats
from deepdensity.study.core.cells import Call, Evidence, Verdict
from deepdensity.study.judge.contrasts import pooled


def claim_row(
    claim: str,
    paper: str,
    rule: str,
    ours: str,
    verdict: str,
    more: str,
    brief: tuple,
    by_clock: Optional[dict] = None,
    break_even: str = "-",
) -> dict:
    """A claim's row: its verdict is the paper's clock's, `verdicts` every registered clock's
    (clocks.JUDGED; a claim not about time has the same under each); `brief` is (ours in a few
    words, the one number the verdict rests on), what the report's first table shows."""
    by_clock = by_clock or {}
    return {
        "claim": claim,
        "paper": paper,
        "rule": rule,
        "ours": ours,
        "more_seeds": more,
        "verdict": by_clock.get(clocks.PAPER, verdict),
        "verdicts": {c.name: by_clock[c.name] if by_clock else verdict for c in clocks.JUDGED},
        "break_even": break_even,
        "ours_brief": brief[0],
        "deciding": brief[1],
    }


def _calls_brief(rates_: dict) -> str:
    """The cells' calls in a few words: 'converges at N = 1, 2; inconclusive at N = 4'."""
    by_call: dict = {}
    for n, r in rates_.items():
        if r.runs:
            by_call.setdefault(r.call, []).append(str(n))
    return "; ".join(f"{call} at N = {', '.join(ns)}" for call, ns in by_call.items()) or "not run"


def _nearest_the_line(expected: dict) -> str:
    """The cell a claim about cells' calls rests on, of {N: (its rate, the call the claim
    expects)}: the one whose interval lies least on the expected side of 0.5 (for a cell that
    should converge, 0.5 less its upper bound; for one that should fail, its lower bound less
    0.5). Both are one quantity, the exact lower bound of the runs on the expected side (by the
    interval's symmetry, 0.5 - high(missed of runs) = low(runs - missed of runs) - 0.5), so that
    two cells as near as each other (8 of 8 that should converge and 0 of 8 that should fail)
    give the same number from the same arguments, not two roundings of it; such an exact tie
    goes to the smaller N."""

    def inside(rate, expect) -> float:
        on_side = rate.runs - rate.missed if expect == Call.CONVERGES else rate.missed
        return stats.missed_rate(on_side, rate.runs, rate.confidence)[0] - 0.5

    run = {n: (r, expect) for n, (r, expect) in expected.items() if r.runs}
    if not run:
        return "-"
    n, (r, _) = min(run.items(), key=lambda item: (inside(*item[1]), item[0]))
    return f"N = {n}: {r.missed} of {r.runs} missed, {r.ci}"


def every_n(v: Evidence, mode: str, expect: str, least: int = 1) -> tuple:
    """(verdict, evidence, more seeds) of "`mode` `expect`s at every N >= least", cell by cell."""
    against = Call.FAILS if expect == Call.CONVERGES else Call.CONVERGES
    rates_ = {n: v.rate(mode, [n]) for n in v.ran(mode, least)}
    calls = [r.call for r in rates_.values()]
    verdict = (
        Verdict.CONTRADICTED
        if against in calls
        else Verdict.REPRODUCED
        if calls and all(c == expect for c in calls)
        else Verdict.INCONCLUSIVE
    )
    ours = "; ".join(f"N = {n}: {r}" for n, r in rates_.items())
    settled = any(r.call == against and not v.short(mode, [n]) for n, r in rates_.items())
    named = [n for n in v.workers if n >= least]
    verdict, ours = _all_named(v, mode, named, verdict, ours, settled)
    missing = [str(n) for n in named if n not in rates_]
    brief = _calls_brief(rates_) + (f"; not run at N = {', '.join(missing)}" if missing else "")
    return (
        verdict,
        ours,
        _more_for_rates(rates_, expect),
        (brief, _nearest_the_line({n: (r, expect) for n, r in rates_.items()})),
    )


def _all_named(v: Evidence, mode: str, named: list, verdict: str, ours: str, settled: bool = False) -> tuple:
    """A claim about every N is reproduced only on every N it names: one not run leaves it open;
    and a study in progress decides nothing on cells below the design's seeds (the runs still
    missing are not missing at random: a run trained later may be the one that misses)."""
    missing = [n for n in named if n not in v.ran(mode)]
    if missing:
        verdict = Verdict.INCONCLUSIVE if verdict == Verdict.REPRODUCED else verdict
        ours += f" (not run at N = {', '.join(map(str, missing))})"
    return (verdict, ours) if settled else complete(v, {mode: named}, verdict, ours)


def complete(v: Evidence, cells: dict, verdict: str, ours: str) -> tuple:
    """The verdict, or inconclusive while a cell it rests on ({mode: [N]}) is below the design's
    seeds (a contradiction that a complete cell already settles is not passed here)."""
    short = [f"{mode} N = {n}" for mode, ns in cells.items() for n in v.short(mode, ns)]
    if not short:
        return verdict, ours
    return Verdict.INCONCLUSIVE, ours + (
        f" (below the design's {v.design} seeds so far: {', '.join(short)}; no verdict until they are run)"
    )


def _more_for_rates(rates_: dict, expect: str) -> str:
    """Whether, and with how many more seeds, these cells' calls could still change: for a cell
    not yet called as the claim needs, the seeds (all going its way) that would call it so; for
    one already called, the seeds (all going the other way) that would unsettle it."""
    parts = []
    for n, r in rates_.items():
        if not r.runs:
            continue
        if r.call == expect:
            k = stats.seeds_to_unsettle(r.missed, r.runs)
            parts.append(
                f"N = {n}: {k} more, all {'missing' if expect == Call.CONVERGES else 'reaching'}, would unsettle it"
            )
        else:
            k = r.to_converge if expect == Call.CONVERGES else r.to_fail
            parts.append(
                f"N = {n}: {'over 1000' if k is None else k} more, all "
                f"{'reaching' if expect == Call.CONVERGES else 'missing'}, would call it {expect}"
            )
    return "yes: " + "; ".join(parts) if parts else "-"


def strong_converges(v: Evidence) -> dict:
    verdict, ours, more, brief = every_n(v, STRONG, Call.CONVERGES)
    return claim_row(
        "Strong scaling always converges",
        "reached the target at N = 1..32",
        "every N converges (missed rate's 95 % upper bound < 0.5)",
        ours,
        verdict,
        more,
        brief,
    )


def linear_fails(v: Evidence) -> dict:
    verdict, ours, more, brief = every_n(v, LINEAR, Call.FAILS, least=2)
    return claim_row(
        "The linear scaling rule fails at every N > 1",
        "diverged at N = 2..32",
        "every N > 1 fails (missed rate's 95 % lower bound > 0.5)",
        ours,
        verdict,
        more,
        brief,
    )


def warmup_to_four(v: Evidence) -> dict:
    below, above = [n for n in v.ran(WARMUP, 2) if n <= 4], v.ran(WARMUP, 8)
    rb = {n: v.rate(WARMUP, [n]) for n in below}
    ra = {n: v.rate(WARMUP, [n]) for n in above}
    if any(r.call == Call.FAILS for r in rb.values()) or any(r.call == Call.CONVERGES for r in ra.values()):
        verdict = Verdict.CONTRADICTED
    elif (
        below
        and above
        and all(r.call == Call.CONVERGES for r in rb.values())
        and all(r.call == Call.FAILS for r in ra.values())
    ):
        verdict = Verdict.REPRODUCED
    else:
        verdict = Verdict.INCONCLUSIVE
    ours = "; ".join(f"N = {n}: {r}" for n, r in {**rb, **ra}.items())
    settled = any(r.call == Call.FAILS and not v.short(WARMUP, [n]) for n, r in rb.items()) or any(
        r.call == Call.CONVERGES and not v.short(WARMUP, [n]) for n, r in ra.items()
    )
    verdict, ours = _all_named(v, WARMUP, [n for n in v.workers if n > 1], verdict, ours, settled)
    m_below, r_below = pooled(v, WARMUP, below)
    m_above, r_above = pooled(v, WARMUP, above)
    if r_below and r_above:
        f = stats.fisher_greater(m_above, r_above, m_below, r_below)
        ours += (
            f"; N >= 8 pooled against N = 2, 4 pooled: {m_above}/{r_above} against {m_below}/{r_below} missed, "
            f"Fisher one-sided p = {f['p']:.2g}"
        )
    parts = [
        p[len("yes: ") :] for p in (_more_for_rates(rb, Call.CONVERGES), _more_for_rates(ra, Call.FAILS)) if p != "-"
    ]
    more = "yes: " + "; ".join(parts) if parts else "-"
    return claim_row(
        "Warmup converges only up to N = 4",
        "reached at N = 1, 2, 4; failed at 8, 16, 32",
        "N = 2, 4 converge and N = 8, 16, 32 fail (each cell's missed rate)",
        ours,
        verdict,
        more,
        (
            _calls_brief({**rb, **ra}),
            _nearest_the_line(
                {**{n: (r, Call.CONVERGES) for n, r in rb.items()}, **{n: (r, Call.FAILS) for n, r in ra.items()}}
            ),
        ),
    )


def double_eta_diverges(v: Evidence, seq_2eta: list) -> dict:
    cells = [_Run(r["status"], r.get("final_val_loss")) for r in sorted(seq_2eta, key=lambda r: r.get("seed", 0))]
    r = v.looked(cells)
    verdict = {Call.FAILS: Verdict.REPRODUCED, Call.CONVERGES: Verdict.CONTRADICTED}.get(r.call, Verdict.INCONCLUSIVE)
    ours = f"2 x eta: {r}"
    if 0 < len(cells) < v.design:
        verdict, ours = (
            Verdict.INCONCLUSIVE,
            ours + f" (below the design's {v.design} seeds so far; no verdict until they are run)",
        )
    return claim_row(
        "2 x eta diverges for the sequential model",
        "further increasing the lr diverges",
        "the sequential run at 2 x eta fails (missed rate's 95 % lower bound > 0.5)",
        ours,
        verdict,
        _more_for_rates({1: r}, Call.FAILS).replace("N = 1: ", "2 x eta: "),
        (f"{r.call} at 2 x eta" if r.runs else "not run", f"{r.missed} of {r.runs} missed, {r.ci}" if r.runs else "-"),
    )


@dataclass(frozen=True)
class _Run:
    status: str
    final_val_loss: Optional[float]
