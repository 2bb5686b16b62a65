"""The paper's six claims judged by the rules fixed on 2026-11-26 before the full grid's runs
(docs/decision-rules.md): the study's cells in, one row per claim out, each *reproduced*,
*contradicted* or *inconclusive* (Verdict) by the table there. Pure: no TensorFlow. A cell, its
outcome and its time are cells.py's; how two cells' times are compared, and the pooled contrasts
beside the claims, contrasts.py's.

A default study's record judged as its reports read it: the cells timed by passes on this host's
clock (`cells_of`), the three clocks time claims are judged under (`clock_set`), the rules'
evidence of the record (`evidence_of`), and the claims under both definitions of failure
(`claims_of`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from deepdensity.scaling.policies import LINEAR, STRONG, WARMUP, WEAK
from deepdensity.study.core import clocks, stats
from deepdensity.study.core.cells import FAILED, MISSED, Call, Cell, Evidence, Verdict, epoch_under, time_to_target
from deepdensity.study.core.protocol_text import SEQUENTIAL_PROOF, real_strong_summary
from deepdensity.study.judge.contrasts import ALPHA, holm_verdict, more_for_ranks, pooled, rank_test, ratio_text
from deepdensity.study.record import config_of, study_of, time_base


def claim_row(claim: str, paper: str, rule: str, ours: str, verdict: str, more: str, brief: tuple,
           by_clock: Optional[dict] = None, break_even: str = "-") -> dict:
    """A claim's row: its verdict is the paper's clock's, `verdicts` every registered clock's
    (clocks.JUDGED; a claim not about time has the same under each); `brief` is (ours in a few
    words, the one number the verdict rests on), what the report's first table shows."""
    by_clock = by_clock or {}
    return {"claim": claim, "paper": paper, "rule": rule, "ours": ours, "more_seeds": more,
            "verdict": by_clock.get(clocks.PAPER, verdict),
            "verdicts": {c.name: by_clock[c.name] if by_clock else verdict for c in clocks.JUDGED},
            "break_even": break_even,
            "ours_brief": brief[0], "deciding": brief[1]}


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


def _every_n(v: Evidence, mode: str, expect: str, least: int = 1) -> tuple:
    """(verdict, evidence, more seeds) of "`mode` `expect`s at every N >= least", cell by cell."""
    against = Call.FAILS if expect == Call.CONVERGES else Call.CONVERGES
    rates_ = {n: v.rate(mode, [n]) for n in v.ran(mode, least)}
    calls = [r.call for r in rates_.values()]
    verdict = (Verdict.CONTRADICTED if against in calls else
               Verdict.REPRODUCED if calls and all(c == expect for c in calls) else Verdict.INCONCLUSIVE)
    ours = "; ".join(f"N = {n}: {r}" for n, r in rates_.items())
    settled = any(r.call == against and not v.short(mode, [n]) for n, r in rates_.items())
    named = [n for n in v.workers if n >= least]
    verdict, ours = _all_named(v, mode, named, verdict, ours, settled)
    missing = [str(n) for n in named if n not in rates_]
    brief = _calls_brief(rates_) + (f"; not run at N = {', '.join(missing)}" if missing else "")
    return verdict, ours, _more_for_rates(rates_, expect), (
        brief, _nearest_the_line({n: (r, expect) for n, r in rates_.items()}))


def _all_named(v: Evidence, mode: str, named: list, verdict: str, ours: str, settled: bool = False) -> tuple:
    """A claim about every N is reproduced only on every N it names: one not run leaves it open;
    and a study in progress decides nothing on cells below the design's seeds (the runs still
    missing are not missing at random: a run trained later may be the one that misses)."""
    missing = [n for n in named if n not in v.ran(mode)]
    if missing:
        verdict = Verdict.INCONCLUSIVE if verdict == Verdict.REPRODUCED else verdict
        ours += f" (not run at N = {', '.join(map(str, missing))})"
    return (verdict, ours) if settled else _complete(v, {mode: named}, verdict, ours)


def _complete(v: Evidence, cells: dict, verdict: str, ours: str) -> tuple:
    """The verdict, or inconclusive while a cell it rests on ({mode: [N]}) is below the design's
    seeds (a contradiction that a complete cell already settles is not passed here)."""
    short = [f"{mode} N = {n}" for mode, ns in cells.items() for n in v.short(mode, ns)]
    if not short:
        return verdict, ours
    return Verdict.INCONCLUSIVE, ours + (f" (below the design's {v.design} seeds so far: {', '.join(short)}; "
                                         f"no verdict until they are run)")


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
            parts.append(f"N = {n}: {k} more, all {'missing' if expect == Call.CONVERGES else 'reaching'}, "
                         f"would unsettle it")
        else:
            k = r.to_converge if expect == Call.CONVERGES else r.to_fail
            parts.append(f"N = {n}: {'over 1000' if k is None else k} more, all "
                         f"{'reaching' if expect == Call.CONVERGES else 'missing'}, would call it {expect}")
    return "yes: " + "; ".join(parts) if parts else "-"


def strong_converges(v: Evidence) -> dict:
    verdict, ours, more, brief = _every_n(v, STRONG, Call.CONVERGES)
    return claim_row("Strong scaling always converges", "reached the target at N = 1..32",
                  "every N converges (missed rate's 95 % upper bound < 0.5)", ours, verdict, more, brief)


def linear_fails(v: Evidence) -> dict:
    verdict, ours, more, brief = _every_n(v, LINEAR, Call.FAILS, least=2)
    return claim_row("The linear scaling rule fails at every N > 1", "diverged at N = 2..32",
                  "every N > 1 fails (missed rate's 95 % lower bound > 0.5)", ours, verdict, more, brief)


def warmup_to_four(v: Evidence) -> dict:
    below, above = [n for n in v.ran(WARMUP, 2) if n <= 4], v.ran(WARMUP, 8)
    rb = {n: v.rate(WARMUP, [n]) for n in below}
    ra = {n: v.rate(WARMUP, [n]) for n in above}
    if any(r.call == Call.FAILS for r in rb.values()) or any(r.call == Call.CONVERGES for r in ra.values()):
        verdict = Verdict.CONTRADICTED
    elif below and above and all(r.call == Call.CONVERGES for r in rb.values()) \
            and all(r.call == Call.FAILS for r in ra.values()):
        verdict = Verdict.REPRODUCED
    else:
        verdict = Verdict.INCONCLUSIVE
    ours = "; ".join(f"N = {n}: {r}" for n, r in {**rb, **ra}.items())
    settled = any(r.call == Call.FAILS and not v.short(WARMUP, [n]) for n, r in rb.items()) or \
        any(r.call == Call.CONVERGES and not v.short(WARMUP, [n]) for n, r in ra.items())
    verdict, ours = _all_named(v, WARMUP, [n for n in v.workers if n > 1], verdict, ours, settled)
    m_below, r_below = pooled(v, WARMUP, below)
    m_above, r_above = pooled(v, WARMUP, above)
    if r_below and r_above:
        f = stats.fisher_greater(m_above, r_above, m_below, r_below)
        ours += (f"; N >= 8 pooled against N = 2, 4 pooled: {m_above}/{r_above} against {m_below}/{r_below} missed, "
                 f"Fisher one-sided p = {f['p']:.2g}")
    parts = [p[len("yes: "):] for p in (_more_for_rates(rb, Call.CONVERGES), _more_for_rates(ra, Call.FAILS))
             if p != "-"]
    more = "yes: " + "; ".join(parts) if parts else "-"
    return claim_row("Warmup converges only up to N = 4", "reached at N = 1, 2, 4; failed at 8, 16, 32",
                  "N = 2, 4 converge and N = 8, 16, 32 fail (each cell's missed rate)", ours, verdict, more,
                  (_calls_brief({**rb, **ra}), _nearest_the_line({**{n: (r, Call.CONVERGES) for n, r in rb.items()},
                                                                  **{n: (r, Call.FAILS) for n, r in ra.items()}})))


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
    return (counts + (f", longer in {slower}" if slower else ""),
            f"least clear: {names[weakest]}, ratio {ratio_text(tests[weakest]['ratio'])}, "
            f"Holm p = {shorter[weakest]['p_adjusted']:.2g}")


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
                parts.append(f"N = {n} vs {mode}: ratio {ratio_text(t['ratio'])}, P(strong shorter) "
                             f"{t['prob_shorter']:.2f}, p = {t['p_shorter']:.2g}")
        verdict = holm_verdict(tests)
        if verdict == Verdict.REPRODUCED and len(tests) < len(named):      # a comparison not run: open
            verdict = Verdict.INCONCLUSIVE
        return (*_complete(v, {m: [n for n in v.workers if n > 1] for m in [STRONG, *others]}, verdict,
                           "; ".join(parts) + f" (one-sided Mann-Whitney, Holm over {len(tests)} of {len(named)})"),
                lambda: _holm_brief(tests, names))

    by_clock, flips, evidence, brief = _time_claim(v, judge)
    paper = v.clocks.get("paper", v.clocks.get("host"))
    pairs = {(n, mode): (v.seconds(STRONG, n, paper), v.seconds(mode, n, paper))
             for n in v.ran(STRONG, 2) for mode in others if n in v.ran(mode)}
    return claim_row("Strong scaling is the fastest at every N", "fastest at N = 2..32",
                  "at each N > 1, strong's time to target shorter than each other mode's: every one-sided "
                  "Mann-Whitney test rejects at 0.05 after Holm; ratio = Hodges-Lehmann strong / other",
                  evidence, by_clock.get("paper", Verdict.INCONCLUSIVE), more_for_ranks(pairs), brief, by_clock, flips)


_EFFICIENCY = {Verdict.REPRODUCED: "its efficiency falls", Verdict.CONTRADICTED: "its efficiency rises",
               Verdict.INCONCLUSIVE: "no measurable fall in efficiency"}


def weak_efficiency(v: Evidence) -> dict:
    conv, ours, more, (calls, nearest) = _every_n(v, WEAK, Call.CONVERGES)
    ns = v.ran(WEAK, 2)
    rule = ("every N converges, and N x time to target at N = 2 shorter than at the largest N "
            "(one-sided Mann-Whitney, p < 0.05)")
    if len(ns) < 2:
        return claim_row("Weak scaling converges everywhere but its efficiency falls",
                      "reached at every N; efficiency 100 -> 9.45 %", rule,
                      ours + "; efficiency: fewer than two N > 1 run", Verdict.INCONCLUSIVE, more,
                      (calls, nearest))
    lo, hi = ns[0], ns[-1]
    named = (lo, hi) == (min(n for n in v.workers if n > 1), max(v.workers))   # the rule's N = 2 and 32

    def judge(clock) -> tuple:
        t = rank_test(v.seconds(WEAK, lo, clock, lo), v.seconds(WEAK, hi, clock, hi))
        eff = (Verdict.CONTRADICTED if t["p_longer"] < ALPHA else
               Verdict.REPRODUCED if t["p_shorter"] < ALPHA and named else Verdict.INCONCLUSIVE)
        both = (Verdict.CONTRADICTED if Verdict.CONTRADICTED in (conv, eff) else
                Verdict.REPRODUCED if conv == eff == Verdict.REPRODUCED else Verdict.INCONCLUSIVE)
        ratio = f"N x time to target, N = {lo} against N = {hi}: ratio {ratio_text(t['ratio'])}, p = {t['p_shorter']:.2g}"
        return (*_complete(v, {WEAK: [lo, hi]}, both, f"{ours}; {ratio}"),
                lambda: (f"{calls}; {_EFFICIENCY[eff]}", ratio if conv == Verdict.REPRODUCED else f"{nearest}; {ratio}"))

    by_clock, flips, evidence, brief = _time_claim(v, judge)
    return claim_row("Weak scaling converges everywhere but its efficiency falls",
                  "reached at every N; efficiency 100 -> 9.45 %", rule, evidence,
                  by_clock.get("paper", Verdict.INCONCLUSIVE), more, brief, by_clock, flips)


def double_eta_diverges(v: Evidence, seq_2eta: list) -> dict:
    cells = [_Run(r["status"], r.get("final_val_loss"))
             for r in sorted(seq_2eta, key=lambda r: r.get("seed", 0))]
    r = v.looked(cells)
    verdict = {Call.FAILS: Verdict.REPRODUCED, Call.CONVERGES: Verdict.CONTRADICTED}.get(r.call, Verdict.INCONCLUSIVE)
    ours = f"2 x eta: {r}"
    if 0 < len(cells) < v.design:
        verdict, ours = Verdict.INCONCLUSIVE, ours + f" (below the design's {v.design} seeds so far; no verdict until they are run)"
    return claim_row("2 x eta diverges for the sequential model", "further increasing the lr diverges",
                  "the sequential run at 2 x eta fails (missed rate's 95 % lower bound > 0.5)",
                  ours, verdict,
                  _more_for_rates({1: r}, Call.FAILS).replace("N = 1: ", "2 x eta: "),
                  (f"{r.call} at 2 x eta" if r.runs else "not run",
                   f"{r.missed} of {r.runs} missed, {r.ci}" if r.runs else "-"))


@dataclass(frozen=True)
class _Run:
    status: str
    final_val_loss: Optional[float]


@dataclass(frozen=True)
class ClaimRule:
    """A claim the study judges: `judge(evidence, seq_2eta)` gives its row (`claim_row`), where
    `applies(evidence, seq_2eta)` says the study ran what it needs. Its key names it in
    claims.json and wherever a claim is looked up; never its title or its place in the list."""
    key: str
    judge: Callable[[Evidence, Optional[list]], dict]
    applies: Callable[[Evidence, Optional[list]], bool]


def _ran(mode: str) -> Callable[[Evidence, Optional[list]], bool]:
    return lambda v, seq_2eta: bool(v.ran(mode))


# The claims, in the paper's order. A new claim is one entry here and its own function above.
CLAIMS = {rule.key: rule for rule in (
    ClaimRule("strong_converges", lambda v, _: strong_converges(v), _ran(STRONG)),
    ClaimRule("linear_fails", lambda v, _: linear_fails(v), _ran(LINEAR)),
    ClaimRule("warmup_to_four", lambda v, _: warmup_to_four(v), _ran(WARMUP)),
    ClaimRule("weak_efficiency", lambda v, _: weak_efficiency(v), _ran(WEAK)),
    ClaimRule("strong_fastest", lambda v, _: strong_fastest(v), _ran(STRONG)),
    ClaimRule("double_eta_diverges", double_eta_diverges, lambda v, seq_2eta: bool(seq_2eta)),
)}


def evaluate(v: Evidence, seq_2eta: Optional[list]) -> list:
    """Every claim of CLAIMS the study's runs allow, in its order, each row with its key."""
    return [{"key": rule.key, **rule.judge(v, seq_2eta)} for rule in CLAIMS.values() if rule.applies(v, seq_2eta)]


RULES = [
    ("outcome", "a run missed when it did not reach the target within the cap (the paper's NaN), whatever "
                "stopped it: collapsed, non-finite, stalled or capped; the sensitivity column counts as failed "
                "only the runs that collapsed or became non-finite"),
    ("cell", "missed / runs with its exact (Clopper-Pearson) 95 % interval: converges when the upper bound is "
             "below 0.5, fails when the lower bound is above 0.5, inconclusive otherwise; each cell also says how "
             "many more seeds, all going one way, would change its call"),
    ("time", "time to target = passes to target x the clock's seconds per pass; two cells are compared by a "
             f"one-sided Mann-Whitney U test (a miss slower than every run that reached), at {ALPHA:g} after Holm's "
             "correction over the comparisons of a claim, with the Hodges-Lehmann ratio of the times"),
    ("claim", "reproduced, contradicted or inconclusive by the table of docs/decision-rules.md; pooled contrasts "
              "(Fisher, one-sided) and trends in log2 N (Cochran-Armitage, one-sided) are reported beside them"),
    ("seeds", "the preset's seeds in every cell, none spent to settle one answer; the sequential runs take seeds "
              "disjoint from the learning-rate search's; while a cell is below them (a study in progress), a claim "
              "it could still change has no verdict"),
]


def cells_of(record: dict) -> list:
    """The record's cells, each timed by passes: its time to target is passes to target x this
    host's seconds per pass (cells.time_to_target, as the claims' cells.seconds), its epoch the
    same clock's; a real run's own clock where the study measured it."""
    cells = [Cell.of(c) for c in record["cells"]]
    if record_runner(cells) or "timing" not in record:
        return cells
    host, base = clock_set(record)[clocks.HOST], time_base(record)

    def timed(c: Cell) -> Cell:
        epoch, per_epoch = epoch_under(c, host, base)
        return dataclasses.replace(c, time_to_target_s=time_to_target(c, epoch, per_epoch), epoch_seconds=epoch)
    return [timed(c) for c in cells]


def clock_set(record: dict) -> dict:
    """The clocks time claims are judged under (clocks.JUDGED), made from this host's model."""
    return clocks.judged_clocks(clocks.host_clock(record["timing"], config_of(record).batch_size))


def record_runner(cells: list) -> bool:
    """Were the cells' times measured (real runs with a launcher) rather than modelled?"""
    return any(c.time_source == "measured" for c in cells)


def claims_of(record: dict, cells: list, seq_2eta: Optional[list]) -> list:
    """The claims judged on `cells` and `seq_2eta` by the rules of docs/decision-rules.md
    (claims.py), each with its verdict again under the sensitivity definition of failure."""
    primary, sensitivity = (evaluate(evidence_of(record, cells, definition), seq_2eta or None)
                            for definition in (MISSED, FAILED))
    sensitive = {s["key"]: s["verdict"] for s in sensitivity}
    for c in primary:
        c["verdict_sensitivity"] = sensitive[c["key"]]
        c["ours"] += _real_strong_note(record) if c["key"] == "strong_converges" else ""
    return primary


def evidence_of(record: dict, cells: list, definition: str) -> Evidence:
    study = study_of(record)
    return Evidence(cells, study.workers, definition, record["collapse_loss"], clock_set(record), time_base(record),
                    len(study.seeds), study.second_look_confidence if study.second_look_seeds else 0.0)


def _real_strong_note(record: dict) -> str:
    return "; " + SEQUENTIAL_PROOF + "; " + real_strong_summary(record.get("real_strong"))
