"""The beyond study's decision rules (docs/beyond.md, fixed 2026-11-26 12:30 UTC, before its
next run): does a remedy beat strong scaling, does filtering help the large-batch modes, which
batch does the sequential model prefer. Each comparison is the default study's rank test
(contrasts.rank_test: one-sided Mann-Whitney both ways, the Hodges-Lehmann ratio, P(shorter)), on
passes to target first and then on seconds under each clock (cells.seconds, the one time to
target), corrected by Holm over the comparisons of one question, with the break-even in rho.
Pure: cells and clocks in, verdict rows out; no files.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Callable, Optional

from deepdensity.scaling import policies, rules
from deepdensity.study.core import clocks, curves, stats
from deepdensity.study.core.cells import Cell, median_time, seconds
from deepdensity.study.judge import contrasts

# When docs/beyond.md was committed (493e1f4), before the study's next run: later than the default
# study's docs/decision-rules.md (protocol_text.DECISION_RULES_FIXED_UTC), so a name of its own.
BEYOND_RULES_FIXED_UTC = "2026-11-26 12:30 UTC"
ALPHA = contrasts.ALPHA
MIN_SEEDS = 3
SHORTER, LONGER, NO_DIFFERENCE = "shorter", "longer", "no measurable difference"
TOO_FEW, NEITHER = "too few seeds", "neither reached"

RULES_SUMMARY = (
    "a run missed when it did not reach the target within the cap; passes to target first, then seconds "
    "(passes x the clock's s/pass) under the paper's clock (the verdict), this host's and one device per worker; "
    "each comparison a one-sided Mann-Whitney U test both ways (a miss slower than every run that reached), "
    f"Holm at {ALPHA:g} over the comparisons of one question, with the Hodges-Lehmann ratio and P(shorter); "
    f"'too few seeds' below {MIN_SEEDS} seeds a side or where no outcome at these seeds could be called; "
    "the break-even: the rho at which a verdict changes"
)


@dataclass(frozen=True)
class PassClock:
    """The clock under which cells.seconds gives passes to target: every pass costs one unit."""

    name: str = "passes"

    def epoch_seconds(self, mode: str, n: int, n_train: int, n_val: int, definition: str) -> float:
        return float(curves.passes_per_epoch(n, definition))

    def with_rho(self, rho: float, name: Optional[str] = None) -> "PassClock":
        return self


PASSES = PassClock()


@dataclass(frozen=True)
class RowClock:
    """A clocks.Clock that prices an epoch of a policy whose batch or allreduces vary by epoch
    from what its runs did: `epochs` holds, per (mode, N), each recorded epoch's (global batch,
    allreduces); its epoch is the median of those epochs under the clock (exact for local SGD,
    whose epochs are all alike). Every other cell is the clock's own epoch; N = 1 of every mode is
    the sequential run's."""

    clock: clocks.Clock
    epochs: tuple = ()  # ((mode, n, ((global batch, allreduces), ...)), ...)

    @property
    def name(self) -> str:
        return self.clock.name

    def with_rho(self, rho: float, name: Optional[str] = None) -> "RowClock":
        return RowClock(self.clock.with_rho(rho, name), self.epochs)

    def at_batch(self, batch: int) -> "RowClock":
        """The same clock for a sequential run at another batch (the sweep): its step at `batch`."""
        return RowClock(dataclasses.replace(self.clock, base_batch=batch), self.epochs)

    def epoch_seconds(self, mode: str, n: int, n_train: int, n_val: int, definition: str) -> float:
        if n == 1:  # N = 1 of every mode is the sequential run (adaptive plans N >= 2 only)
            return self.clock.epoch_seconds(policies.SEQUENTIAL, 1, n_train, n_val, definition)
        done = next((e for m, k, e in self.epochs if (m, k) == (mode, n)), None)
        if not done:
            return self.clock.epoch_seconds(mode, n, n_train, n_val, definition)
        p = policies.plan(mode, n, self.clock.base_batch)
        steps = [rules.steps_per_epoch(n_train, p, definition, global_batch=batch) for batch, _ in done]
        return statistics.median(
            self.clock.epoch_seconds_as_run(mode, n, n_val, s, batch, allreduces)
            for s, (batch, allreduces) in zip(steps, done)
        )


def row_epochs(cells: list, run_rows: dict) -> tuple:
    """RowClock.epochs of the cells at N > 1 of the policies that vary by epoch, from the record's
    per-epoch rows of their runs."""
    out = {}
    for c in cells:
        if c.n > 1 and policies.get(c.mode).varies_by_epoch and c.run in run_rows:
            out.setdefault((c.mode, c.n), []).extend((r["global_batch"], r["allreduces"]) for r in run_rows[c.run])
    return tuple((m, n, tuple(e)) for (m, n), e in sorted(out.items()))


def clock_set(timing: dict, base_batch: int, epochs: tuple = ()) -> dict:
    """The clocks of a verdict (clocks.JUDGED, the verdict's first), as RowClocks."""
    host = clocks.host_clock(timing, base_batch)
    return {name: RowClock(c, epochs) for name, c in clocks.judged_clocks(host).items()}


def values(cells: list, clock, base, scale: float = 1.0) -> list:
    """cells.seconds of each cell (in seed order) under `clock`: passes under PASSES; inf where missed."""
    return [seconds(c, clock, base, scale) for c in sorted(cells, key=lambda c: c.seed)]


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest p the one-sided test (stats.mann_whitney_less) can give at these seed counts:
    every A below every B, with no ties (the exact null) or tied within each side (the normal
    approximation with the tie correction, whose variance is then smallest)."""
    return min(
        stats.mann_whitney_less(list(range(n_a)), list(range(n_a, n_a + n_b)))["p"],
        stats.mann_whitney_less([0.0] * n_a, [1.0] * n_b)["p"],
    )


def _test(a: list, b: list) -> dict:
    out = {"n_a": len(a), "n_b": len(b), "ratio": None, "prob_shorter": None, "p_shorter": None, "p_longer": None}
    if a and b:
        out.update(contrasts.rank_test(list(a), list(b)))
    return out


def family(pairs: dict, more: bool = True) -> dict:
    """{key: row} of the comparisons of one question, `pairs` = {key: (A's values, B's values)},
    by the rules of docs/beyond.md: the rank test both ways, Holm over the comparisons tested (3
    seeds a side or more, some seed reaching), the verdict, and with `more` the further seeds a
    side that could still call a comparison not yet called."""
    rows, tested = {}, []
    for key, (a, b) in pairs.items():
        rows[key] = _test(a, b)
        if min(len(a), len(b)) < MIN_SEEDS:
            rows[key].update(verdict=TOO_FEW, why=f"{len(a)} and {len(b)} seeds: fewer than {MIN_SEEDS} a side")
        elif all(math.isinf(x) for x in [*a, *b]):
            rows[key]["verdict"] = NEITHER
        else:
            tested.append(key)
    shorter = stats.holm([rows[k]["p_shorter"] for k in tested], ALPHA)
    longer = stats.holm([rows[k]["p_longer"] for k in tested], ALPHA)
    floor = [smallest_p(rows[k]["n_a"], rows[k]["n_b"]) for k in tested]
    able = stats.holm(floor, ALPHA)
    for k, s, lo, ok, p_min in zip(tested, shorter, longer, able, floor):
        r = rows[k]
        r.update(p_shorter_holm=s["p_adjusted"], p_longer_holm=lo["p_adjusted"], holm_over=len(tested))
        r["verdict"] = (
            SHORTER if s["reject"] else LONGER if lo["reject"] else NO_DIFFERENCE if ok["reject"] else TOO_FEW
        )
        if r["verdict"] == TOO_FEW:
            r["why"] = (
                f"{r['n_a']} and {r['n_b']} seeds: the smallest p the test can give, {p_min:.2g}, does not "
                f"survive Holm over {len(tested)}"
            )
    if more:
        for key, (a, b) in pairs.items():
            rows[key]["more"] = _more(rows[key], a, b, len(pairs))
    return rows


def _more(row: dict, a: list, b: list, m: int) -> Optional[int]:
    """The fewest further seeds a side, all going the way the ratio leans, that could call a
    comparison not yet called (contrasts.seeds_to_reject at ALPHA / m); None when none is needed or
    not within 50."""
    if row["verdict"] not in (NO_DIFFERENCE, TOO_FEW) or not a or not b:
        return None
    lean_shorter = row["ratio"] is None or row["ratio"] <= 1.0
    return contrasts.seeds_to_reject(a, b, ALPHA / m) if lean_shorter else contrasts.seeds_to_reject(b, a, ALPHA / m)


def judge(pairs_of: Callable, by_name: dict, break_even: bool = True) -> dict:
    """A question judged by the rules: {"passes": family under PASSES, each clock's name: its
    family, "break_even": {key: text}} where `pairs_of(clock)` gives the question's pairs under a
    clock. The break-even is each comparison's verdict on the host clock's compute with rho
    varied (clocks.break_even); without `break_even` (N = 1: no communication) it is left out."""
    out = {"passes": family(pairs_of(PASSES))}
    out.update({name: family(pairs_of(clock)) for name, clock in by_name.items()})
    if break_even:
        host, seen = by_name["host"], {}

        def at(rho: float) -> dict:
            if rho not in seen:
                seen[rho] = family(pairs_of(host.with_rho(rho)), more=False)
            return seen[rho]

        out["break_even"] = {
            k: clocks.describe_break_even(clocks.break_even(lambda rho, k=k: at(rho)[k]["verdict"]))
            for k in out["passes"]
        }
    return out


def remedy(cells: list, mode: str, workers, by_name: dict, base) -> dict:
    """Question 1 for one remedy: `mode` against strong scaling at each N > 1 it ran ({N: ...})."""
    ns = [n for n in workers if n > 1 and any(c.mode == mode and c.n == n for c in cells)]

    def pairs_of(clock) -> dict:
        return {
            n: (
                values([c for c in cells if c.mode == mode and c.n == n], clock, base),
                values([c for c in cells if c.mode == policies.SEQUENTIAL and c.n == n], clock, base),
            )
            for n in ns
        }

    return judge(pairs_of, by_name)


def filter_cells(rows: list) -> list:
    """The filter experiment's rows as (data, Cell)."""
    return [(r["data"], Cell.of(r, time_source="modelled")) for r in rows]


def filtering(rows: list, mode: str, bases: dict, by_name: dict) -> dict:
    """Question 2 for one filter mode: the network-filtered data against the full data and
    against the random control ({"full": ..., "random": ...}); `bases` = {data: TimeBase}, each
    data set with its own training-set size."""
    cells = [(d, c) for d, c in filter_cells(rows) if c.mode == mode]

    def pairs_of(clock) -> dict:
        of = {d: values([c for dd, c in cells if dd == d], clock, bases[d]) for d in ("full", "network", "random")}
        return {other: (of["network"], of[other]) for other in ("full", "random") if of[other]}

    return judge(pairs_of, by_name)


def sweep_cells(rows: list, lr_rule: str) -> dict:
    """{global batch: [Cell per seed]} of the batch sweep under `lr_rule` (sequential runs, N = 1)."""
    out = {}
    for r in sorted(rows, key=lambda r: (r["batch"], r.get("seed", 0))):
        if r["lr_rule"] == lr_rule:
            out.setdefault(r["batch"], []).append(
                Cell.of(r, mode=policies.SEQUENTIAL, n=1, seed=r.get("seed", 0), time_source="modelled")
            )
    return out


def at_batch(clock, batch: int):
    """A clock at another batch (RowClock.at_batch); the pass clock needs none."""
    return clock.at_batch(batch) if hasattr(clock, "at_batch") else clock


def sweep(rows: list, lr_rule: str, base_batch: int, by_name: dict, base) -> dict:
    """Question 3 under one lr rule: every batch against the study's batch ({batch: ...}); the
    paper's and this host's clocks (at N = 1 one device is this host), no break-even."""
    by_batch = sweep_cells(rows, lr_rule)

    def pairs_of(clock) -> dict:
        ref = values(by_batch.get(base_batch, []), at_batch(clock, base_batch), base)
        return {b: (values(cs, at_batch(clock, b), base), ref) for b, cs in by_batch.items() if b != base_batch}

    return judge(pairs_of, {k: v for k, v in by_name.items() if k in ("paper", "host")}, break_even=False)


def shortest_median(rows: list, lr_rule: str, clock, base) -> Optional[int]:
    """The batch with the shortest median time under `clock` over seeds that all reached: named, not tested."""
    medians = {b: median_time(values(cs, at_batch(clock, b), base)) for b, cs in sweep_cells(rows, lr_rule).items()}
    medians = {b: m for b, m in medians.items() if m is not None}
    return min(medians, key=lambda b: (medians[b], b)) if medians else None


def not_exercised(cells: list, run_rows: dict, base_batch: int, theta: float) -> dict:
    """{mode: what to say} for each policy with a growing batch whose test never fired in any
    epoch of any run at N > 1 (it then ran strong scaling's batches throughout): the largest
    noise / ||g||^2 its runs saw and the theta below which the test would have fired."""
    out = {}
    for mode in sorted({c.mode for c in cells if policies.get(c.mode).grows_batch and c.n > 1}):
        rows = [r for c in cells if c.mode == mode and c.n > 1 for r in run_rows.get(c.run, [])]
        if not rows or any(r["global_batch"] != base_batch for r in rows):
            continue
        ratios = [r["grad_noise"] / r["grad_sq"] for r in rows if r.get("grad_sq") and r.get("grad_noise") is not None]
        if not ratios:
            out[mode] = (
                "its batch never grew in any epoch of any run; its runs' rows hold no noise ratio "
                "(they came from a ledger that did not keep it)"
            )
            continue
        top = max(ratios)
        out[mode] = (
            f"its test never fired: noise / ||g||^2 was at most {top:.3g} in every epoch of every run, "
            f"under theta^2 = {theta**2:g}, so it ran strong scaling's batches throughout; the test would "
            f"have fired in some epoch only with theta below sqrt({top:.3g}) = {math.sqrt(top):.2f} "
            f"(a statement, not a run: theta stays {theta:g})"
        )
    return out


_DATA = {"full": "the full data", "random": "the random control"}


def brief_rows(answers: dict) -> list:
    """The beyond report's first table from its answers (answers.json's form): a row per
    question, [question, the answer under the paper's clock in a few words, the comparison it
    rests on (the one nearest to 'shorter': the smallest Holm-adjusted p of it)]."""
    data = lambda k: _DATA.get(k, f"the {k} data")  # noqa: E731
    rows = [
        [f"{m} against strong scaling", f"not exercised: {why.split(':')[0]}", "-"]
        for m, why in answers["not_exercised"].items()
    ]
    rows += [
        [f"{m} against strong scaling", *_in_brief(comps, lambda ks: "at N = " + ", ".join(ks), "N = {}".format)]
        for m, comps in answers["remedies"].items()
    ]
    rows += [
        [
            f"network-filtered data, {group}",
            *_in_brief(comps, lambda ks: "against " + " and ".join(map(data, ks)), lambda k: "against " + data(k)),
        ]
        for group, comps in answers["filter"].items()
    ]
    rows += [
        [
            f"global batch b against the study's, lr rule {rule}",
            *_in_brief(comps, lambda ks: "at b = " + ", ".join(ks), "b = {}".format),
        ]
        for rule, comps in answers["sweep"].items()
    ]
    return rows


def _in_brief(comparisons: dict, where, name) -> list:
    """[the paper clock's verdicts grouped, `where`(keys) saying of which; the comparison with the
    smallest Holm p of 'shorter', `name`(key) naming it]."""
    by_verdict: dict = {}
    for key, c in comparisons.items():
        by_verdict.setdefault(c["paper"]["verdict"], []).append(key)
    said = "; ".join(f"{verdict} {where(keys)}" for verdict, keys in by_verdict.items())
    tested = [k for k, c in comparisons.items() if c["paper"]["p_shorter_holm"] is not None]
    if not tested:  # too few seeds, or neither side reached: no test ran
        return [said, "-"]
    key = min(tested, key=lambda k: comparisons[k]["paper"]["p_shorter_holm"])
    c = comparisons[key]["paper"]
    ratio = contrasts.ratio_text(None if c["ratio"] is None else float(c["ratio"]))  # answers.json: "inf"
    return [
        said,
        f"{name(key)}: ratio {ratio}, Holm p = {c['p_shorter_holm']:.2g} shorter, {c['p_longer_holm']:.2g} longer",
    ]
