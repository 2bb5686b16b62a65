"""The paper's six claims judged by the rules fixed on 2026-11-26 before the full grid's runs
(docs/decision-rules.md). Pure: the study's cells in, one row per claim out.

  outcome   A run *missed* when it did not reach the target within the cap, the paper's "NaN"
            (MISSED, the primary definition); the sensitivity definition counts as failed only
            a run that collapsed or became non-finite (FAILED, rates.outcome).
  cell      missed / runs with its exact 95 % interval (stats.missed_rate): *converges* when the
            upper bound is below 0.5, *fails* when the lower bound is above 0.5, else
            *inconclusive*; and the further seeds that could still change that (stats.seeds_to_call).
  time      passes to target x the clock's seconds per pass (one function: `seconds`); two
            cells compared by a one-sided Mann-Whitney U test, a miss slower than every run that
            reached, the comparisons of a claim corrected by Holm at ALPHA, with the
            Hodges-Lehmann ratio of their times.
  claim     *reproduced*, *contradicted* or *inconclusive* (Verdict), by the table in
            docs/decision-rules.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study import curves
from deepdensity.scaling.policies import LINEAR, STRONG, WARMUP, WEAK
from deepdensity.study import clocks, rates, stats

RULES_VERSION = "2026-11-26: missed within the cap, rank tests with Holm, pooled trend tests, three clocks"
# When docs/decision-rules.md was committed (4ba81fe), before the full grid's runs began.
RULES_FIXED_UTC = "2026-11-26 09:13 UTC"
ALPHA = 0.05
MISSED, FAILED = "missed within the cap", "collapsed or non-finite"


class Call:
    """What the runs of one cell (or one pooled side) say: the cell vocabulary."""
    CONVERGES, FAILS, INCONCLUSIVE, NOT_RUN = "converges", "fails", "inconclusive", "not run"


class Verdict:
    """What the cells say of one claim: the claim vocabulary, apart from the cells'."""
    REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"


@dataclass(frozen=True)
class CellRate:
    runs: int
    missed: int
    low: float
    high: float
    call: str
    to_fail: Optional[int]
    to_converge: Optional[int]

    def __str__(self) -> str:
        if not self.runs:
            return "not run"
        return (f"{self.missed} of {self.runs} missed ({self.missed / self.runs:.0%}, 95% CI "
                f"{self.low:.2f}-{self.high:.2f}): {self.call}")


def cell_rate(missed: int, runs: int) -> CellRate:
    if not runs:
        return CellRate(0, 0, 0.0, 1.0, Call.NOT_RUN, None, None)
    low, high = stats.missed_rate(missed, runs)
    call = Call.CONVERGES if high < 0.5 else Call.FAILS if low > 0.5 else Call.INCONCLUSIVE
    more = stats.seeds_to_call(missed, runs)
    return CellRate(runs, missed, low, high, call, more["to_fail"], more["to_converge"])


@dataclass
class Evidence:
    """The study's cells and what turns passes into seconds, with the failure definition."""
    cells: list
    workers: list
    definition: str = MISSED
    collapse_loss: Optional[float] = None
    clocks: dict = field(default_factory=dict)
    base: object = None                  # tables.TimeBase: n_train, n_val, epoch definition
    design: int = 0                      # the seeds the design gives every cell (0: not checked)

    def short(self, mode: str, ns) -> list:
        """The N of `ns` where `mode` has fewer runs than the design's seeds (a study in progress)."""
        return [n for n in ns if 0 < len([c for c in self.cells if c.mode == mode and c.n == n]) < self.design]

    def ran(self, mode: str, least: int = 1) -> list:
        return sorted({c.n for c in self.cells if c.mode == mode and c.n >= least})

    def missed(self, c) -> bool:
        if self.definition == MISSED:
            return c.status != "reached_target"
        return rates.outcome(c.status, c.final_val_loss, self.collapse_loss) == rates.FAILED

    def rate(self, mode: str, ns) -> CellRate:
        runs = [c for c in self.cells if c.mode == mode and c.n in ns]
        return cell_rate(sum(self.missed(c) for c in runs), len(runs))

    def seconds(self, mode: str, n: int, clock, scale: float = 1.0) -> list:
        """Time to target per seed of (mode, N) under `clock` (times `scale`), inf where it missed."""
        return [seconds(c, clock, self.base, scale) for c in sorted(self.cells, key=lambda c: c.seed)
                if c.mode == mode and c.n == n]


def seconds(c, clock, base, scale: float = 1.0) -> float:
    """The one time to target of a cell's run: passes to target x the clock's seconds per pass
    at its (mode, N), times `scale`; inf when it missed the target."""
    if c.status != "reached_target":
        return math.inf
    per_epoch = curves.passes_per_epoch(c.n, base.definition)
    passes = c.passes_to_target if c.passes_to_target is not None else c.epochs_to_target * per_epoch
    return passes * clock.epoch_seconds(c.mode, c.n, base.n_train, base.n_val, base.definition) / per_epoch * scale


def _claim(claim: str, paper: str, rule: str, ours: str, verdict: str, more: str, by_clock: Optional[dict] = None,
           break_even: str = "-") -> dict:
    by_clock = by_clock or {}
    return {"claim": claim, "paper": paper, "rule": rule, "ours": ours, "more_seeds": more,
            "verdict": by_clock.get("paper", verdict), "verdict_host": by_clock.get("host", verdict),
            "verdict_device": by_clock.get("device", verdict), "break_even": break_even}


def _every_n(v: Evidence, mode: str, expect: str, least: int = 1) -> tuple:
    """(verdict, evidence, more seeds) of "`mode` `expect`s at every N >= least", cell by cell."""
    against = Call.FAILS if expect == Call.CONVERGES else Call.CONVERGES
    rates_ = {n: v.rate(mode, [n]) for n in v.ran(mode, least)}
    calls = [r.call for r in rates_.values()]
    verdict = (Verdict.CONTRADICTED if against in calls else
               Verdict.REPRODUCED if calls and all(c == expect for c in calls) else Verdict.INCONCLUSIVE)
    ours = "; ".join(f"N = {n}: {r}" for n, r in rates_.items())
    settled = any(r.call == against and not v.short(mode, [n]) for n, r in rates_.items())
    verdict, ours = _all_named(v, mode, [n for n in v.workers if n >= least], verdict, ours, settled)
    return verdict, ours, _more_for_rates(rates_, expect, against)


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


def _more_for_rates(rates_: dict, expect: str, against: str) -> str:
    """Whether, and with how many more seeds, these cells' calls could still change: for a cell
    not yet called as the claim needs, the seeds (all going its way) that would call it so; for
    one already called, the seeds (all going the other way) that would unsettle it."""
    parts = []
    for n, r in rates_.items():
        if not r.runs:
            continue
        if r.call == expect:
            k = _to_unsettle(r)
            parts.append(f"N = {n}: {k} more, all {'missing' if expect == Call.CONVERGES else 'reaching'}, "
                         f"would unsettle it")
        else:
            k = r.to_converge if expect == Call.CONVERGES else r.to_fail
            parts.append(f"N = {n}: {'over 1000' if k is None else k} more, all "
                         f"{'reaching' if expect == Call.CONVERGES else 'missing'}, would call it {expect}")
    return "yes: " + "; ".join(parts) if parts else "-"


def _to_unsettle(r: CellRate, limit: int = 1000) -> Optional[int]:
    """The fewest further seeds, all against its call, after which a called cell is inconclusive."""
    for k in range(1, limit + 1):
        low, high = stats.missed_rate(r.missed + (k if r.call == Call.CONVERGES else 0), r.runs + k)
        if (r.call == Call.CONVERGES and high >= 0.5) or (r.call == Call.FAILS and low <= 0.5):
            return k
    return None


def strong_converges(v: Evidence) -> dict:
    verdict, ours, more = _every_n(v, STRONG, Call.CONVERGES)
    return _claim("Strong scaling always converges", "reached the target at N = 1..32",
                  "every N converges (missed rate's 95 % upper bound < 0.5)", ours, verdict, more)


def linear_fails(v: Evidence) -> dict:
    verdict, ours, more = _every_n(v, LINEAR, Call.FAILS, least=2)
    return _claim("The linear scaling rule fails at every N > 1", "diverged at N = 2..32",
                  "every N > 1 fails (missed rate's 95 % lower bound > 0.5)", ours, verdict, more)


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
    m_below, r_below = _pooled(v, WARMUP, below)
    m_above, r_above = _pooled(v, WARMUP, above)
    if r_below and r_above:
        f = stats.fisher_greater(m_above, r_above, m_below, r_below)
        ours += (f"; N >= 8 pooled against N = 2, 4 pooled: {m_above}/{r_above} against {m_below}/{r_below} missed, "
                 f"Fisher one-sided p = {f['p']:.2g}")
    parts = [p[len("yes: "):] for p in (_more_for_rates(rb, Call.CONVERGES, Call.FAILS),
                                        _more_for_rates(ra, Call.FAILS, Call.CONVERGES)) if p != "-"]
    more = "yes: " + "; ".join(parts) if parts else "-"
    return _claim("Warmup converges only up to N = 4", "reached at N = 1, 2, 4; failed at 8, 16, 32",
                  "N = 2, 4 converge and N = 8, 16, 32 fail (each cell's missed rate)", ours, verdict, more)


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


def _ratio(r: Optional[float]) -> str:
    """A Hodges-Lehmann ratio as read: 0 or inf when the median pair holds a miss."""
    if r is None:
        return "-"
    return "inf (a miss)" if math.isinf(r) else "0 (a miss)" if r == 0 else f"{r:.2f}"


def _time_claim(v: Evidence, judge) -> tuple:
    """({clock: verdict}, break-even text, evidence under the paper clock) of a time claim whose
    `judge(clock)` gives (verdict, evidence)."""
    by_clock = {name: judge(clock)[0] for name, clock in v.clocks.items()}
    host = v.clocks["host"]
    flips = clocks.break_even(lambda rho: judge(host.with_rho(rho))[0])
    device = f"one device per worker, free communication: {by_clock['device']}; " if "device" in by_clock else ""
    return by_clock, device + clocks.describe_break_even(flips), judge(v.clocks.get("paper", host))[1]


def strong_fastest(v: Evidence) -> dict:
    others = [m for m in (WEAK, LINEAR, WARMUP) if v.ran(m)]

    named = [(n, m) for n in v.workers if n > 1 for m in others]

    def judge(clock) -> tuple:
        tests, parts = [], []
        for n in v.ran(STRONG, 2):
            for mode in [m for m in others if n in v.ran(m)]:
                t = rank_test(v.seconds(STRONG, n, clock), v.seconds(mode, n, clock))
                tests.append(t)
                parts.append(f"N = {n} vs {mode}: ratio {_ratio(t['ratio'])}, P(strong shorter) "
                             f"{t['prob_shorter']:.2f}, p = {t['p_shorter']:.2g}")
        verdict = holm_verdict(tests)
        if verdict == Verdict.REPRODUCED and len(tests) < len(named):      # a comparison not run: open
            verdict = Verdict.INCONCLUSIVE
        return _complete(v, {m: [n for n in v.workers if n > 1] for m in [STRONG, *others]}, verdict,
                         "; ".join(parts) + f" (one-sided Mann-Whitney, Holm over {len(tests)} of {len(named)})")

    by_clock, flips, evidence = _time_claim(v, judge)
    paper = v.clocks.get("paper", v.clocks.get("host"))
    pairs = {(n, mode): (v.seconds(STRONG, n, paper), v.seconds(mode, n, paper))
             for n in v.ran(STRONG, 2) for mode in others if n in v.ran(mode)}
    return _claim("Strong scaling is the fastest at every N", "fastest at N = 2..32",
                  "at each N > 1, strong's time to target shorter than each other mode's: every one-sided "
                  "Mann-Whitney test rejects at 0.05 after Holm; ratio = Hodges-Lehmann strong / other",
                  evidence, by_clock.get("paper", Verdict.INCONCLUSIVE), _more_for_ranks(pairs), by_clock, flips)


def seeds_to_reject(a: list, b: list, alpha: float, limit: int = 50) -> Optional[int]:
    """The fewest further seeds a side, strong's all shorter and the other's all missing (the most
    favourable case), after which the one-sided test of a shorter than b rejects at `alpha`."""
    for k in range(0, limit + 1):
        if stats.mann_whitney_less(list(a) + [0.0] * k, list(b) + [math.inf] * k)["p"] < alpha:
            return k
    return None


def _more_for_ranks(pairs: dict) -> str:
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


def weak_efficiency(v: Evidence) -> dict:
    conv, ours, more = _every_n(v, WEAK, Call.CONVERGES)
    ns = v.ran(WEAK, 2)
    rule = ("every N converges, and N x time to target at N = 2 shorter than at the largest N "
            "(one-sided Mann-Whitney, p < 0.05)")
    if len(ns) < 2:
        return _claim("Weak scaling converges everywhere but its efficiency falls",
                      "reached at every N; efficiency 100 -> 9.45 %", rule,
                      ours + "; efficiency: fewer than two N > 1 run", Verdict.INCONCLUSIVE, more)
    lo, hi = ns[0], ns[-1]
    named = (lo, hi) == (min(n for n in v.workers if n > 1), max(v.workers))   # the rule's N = 2 and 32

    def judge(clock) -> tuple:
        t = rank_test(v.seconds(WEAK, lo, clock, lo), v.seconds(WEAK, hi, clock, hi))
        eff = (Verdict.CONTRADICTED if t["p_longer"] < ALPHA else
               Verdict.REPRODUCED if t["p_shorter"] < ALPHA and named else Verdict.INCONCLUSIVE)
        both = (Verdict.CONTRADICTED if Verdict.CONTRADICTED in (conv, eff) else
                Verdict.REPRODUCED if conv == eff == Verdict.REPRODUCED else Verdict.INCONCLUSIVE)
        return _complete(v, {WEAK: [lo, hi]}, both, f"{ours}; N x time to target, N = {lo} against N = {hi}: "
                                                       f"ratio {_ratio(t['ratio'])}, p = {t['p_shorter']:.2g}")

    by_clock, flips, evidence = _time_claim(v, judge)
    return _claim("Weak scaling converges everywhere but its efficiency falls",
                  "reached at every N; efficiency 100 -> 9.45 %", rule, evidence,
                  by_clock.get("paper", Verdict.INCONCLUSIVE), more, by_clock, flips)


def double_eta_diverges(v: Evidence, seq_2eta: list) -> dict:
    cells = [_Run(r["status"], r.get("final_val_loss")) for r in seq_2eta]
    r = cell_rate(sum(v.missed(c) for c in cells), len(cells))
    verdict = {Call.FAILS: Verdict.REPRODUCED, Call.CONVERGES: Verdict.CONTRADICTED}.get(r.call, Verdict.INCONCLUSIVE)
    ours = f"2 x eta: {r}"
    if 0 < len(cells) < v.design:
        verdict, ours = Verdict.INCONCLUSIVE, ours + f" (below the design's {v.design} seeds so far; no verdict until they are run)"
    return _claim("2 x eta diverges for the sequential model", "further increasing the lr diverges",
                  "the sequential run at 2 x eta fails (missed rate's 95 % lower bound > 0.5)",
                  ours, verdict,
                  _more_for_rates({1: r}, Call.FAILS, Call.CONVERGES).replace("N = 1: ", "2 x eta: "))


@dataclass(frozen=True)
class _Run:
    status: str
    final_val_loss: Optional[float]


def evaluate(v: Evidence, seq_2eta: Optional[list]) -> list:
    """Every claim the study's modes allow, in the paper's order."""
    claims = [check(v) for mode, check in ((STRONG, strong_converges), (LINEAR, linear_fails),
                                           (WARMUP, warmup_to_four), (WEAK, weak_efficiency),
                                           (STRONG, strong_fastest)) if v.ran(mode)]
    if seq_2eta:
        claims.append(double_eta_diverges(v, seq_2eta))
    return claims


def peak_lr_over_eta(mode: str, n: int) -> float:
    return policies.plan(mode, n, base_lr=1.0).peak_lr


def global_batch_over_base(mode: str, n: int) -> float:
    return policies.plan(mode, n, base_batch=32).global_batch / 32


def _pooled(v: Evidence, mode: str, ns) -> tuple:
    cells = [c for c in v.cells if c.mode == mode and c.n in ns]
    return sum(v.missed(c) for c in cells), len(cells)


def _fisher_row(v: Evidence, a: str, b: str) -> list:
    ma, ra = _pooled(v, a, v.ran(a, 2))
    mb, rb = _pooled(v, b, v.ran(b, 2))
    if not (ra and rb):
        return [f"{a} against {b}, N > 1 pooled", "not run", "-", "-"]
    f = stats.fisher_greater(ma, ra, mb, rb)
    return [f"{a} misses more often than {b}, N > 1 pooled (Fisher, one-sided)", f"{ma}/{ra} against {mb}/{rb}",
            f"odds ratio {_ratio(f['odds_ratio'])}", f"{f['p']:.2g}"]


def _trend_row(what: str, groups: dict) -> list:
    """Cochran-Armitage over {score: (missed, runs)}, scores log2 of the factor."""
    scores = sorted(groups)
    if len(scores) < 2:
        return [what, "fewer than two levels run", "-", "-"]
    t = stats.cochran_armitage([groups[s][0] for s in scores], [groups[s][1] for s in scores],
                               [math.log2(s) for s in scores])
    counts = ", ".join(f"{s:g}: {groups[s][0]}/{groups[s][1]}" for s in scores)
    estimate = "no run missed, or every run did" if t["degenerate"] else \
        f"{t['slope'] * 100:+.1f} points a doubling, z = {t['z']:.2f}"
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
            rows.append(_trend_row(f"{mode}: missed rate rises with log2 N (Cochran-Armitage)",
                                   {n: _pooled(v, mode, [n]) for n in v.ran(mode)}))
    modes = [m for m in policies.paper() if v.ran(m)]
    rows.append(_trend_row("every mode: missed rate rises with log2 of the peak lr over eta (Cochran-Armitage)",
                           _by_factor(v, peak_lr_over_eta, modes)))
    rows.append(_trend_row("weak only (lr eta at every batch): missed rate rises with log2 of the global batch "
                           "over 32 (Cochran-Armitage)", _by_factor(v, global_batch_over_base, [STRONG, WEAK])))
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
