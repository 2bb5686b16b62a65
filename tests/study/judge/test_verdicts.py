"""Every verdict of the committed study recomputed from its study.json with the rules of
docs/decision-rules.md, written out here apart from the code that rendered it: missed runs,
exact intervals by the beta quantiles, the Mann-Whitney p by its normal approximation (ties)
or by enumeration (none), Holm step by step, the paper's clock by its formula, passes to
target as the code uses them. A verdict edited in claims.json, or a rule that drifted from its
statement, fails."""

import itertools
import json
import math

import numpy as np
import pytest
from scipy import optimize, stats

from tests.support import ROOT

STUDY = ROOT / "reports"
TABLE1 = {2: 105.17, 4: 86.81, 8: 90.09, 16: 58.08, 32: 46.25}


def load():
    if not (STUDY / "study.json").is_file():
        pytest.skip("no committed study")
    return json.loads((STUDY / "study.json").read_text()), {
        c["claim"]: c for c in json.loads((STUDY / "claims.json").read_text())
    }


def missed(run, record, definition="missed"):
    if definition == "missed":
        return run["status"] != "reached_target"
    loss = run.get("final_val_loss")
    return run["status"] != "reached_target" and (
        loss is None or not math.isfinite(loss) or loss >= record["collapse_loss"]
    )


def call(k, runs):
    """Clopper-Pearson 95 % from the beta quantiles, 0.5 on either side."""
    low = stats.beta.ppf(0.025, k, runs - k + 1) if k else 0.0
    high = stats.beta.ppf(0.975, k + 1, runs - k) if k < runs else 1.0
    return "converges" if high < 0.5 else "fails" if low > 0.5 else "inconclusive"


def cells(record, mode, ns):
    return [c for c in record["cells"] if c["mode"] == mode and c["n"] in ns]


def ns_of(record, mode, least=1):
    return sorted({c["n"] for c in record["cells"] if c["mode"] == mode and c["n"] >= least})


def cell_call(record, mode, n, definition="missed"):
    cs = cells(record, mode, [n])
    return call(sum(missed(c, record, definition) for c in cs), len(cs))


def named(record, least=1):
    """The N a claim about every N speaks of: the study's, not only those a mode was run at."""
    return [n for n in record["study"]["workers"] if n >= least]


def short(record, mode, ns):
    """A study in progress decides nothing on a cell below the design's seeds (docs/decision-rules.md)."""
    design = len(record["study"]["seeds"])
    return any(0 < len(cells(record, mode, [n])) < design for n in ns)


def every_n(record, mode, expect, least=1, definition="missed"):
    opposite = {"converges": "fails", "fails": "converges"}[expect]
    calls = [cell_call(record, mode, n, definition) for n in ns_of(record, mode, least)]
    if any(c == opposite and not short(record, mode, [n]) for c, n in zip(calls, ns_of(record, mode, least))):
        return "contradicted"  # a complete cell settles it
    if short(record, mode, ns_of(record, mode, least)):
        return "inconclusive"
    if opposite in calls:
        return "contradicted"
    everywhere = ns_of(record, mode, least) == named(record, least)
    return "reproduced" if everywhere and all(x == expect for x in calls) else "inconclusive"


def pass_seconds(record, mode, n):
    """The paper's clock, written out: the host's base-batch step split by Table I's fit, per pass."""
    t, B = record["timing"], record["settings"]["batch_size"]
    k = t["compute_scale"]
    step = k * (t["step_fixed_s"] + t["per_sample_s"] * B)
    ns = np.array(sorted(TABLE1), float)
    (s, rho), _ = optimize.nnls(
        np.stack([1 - 1 / ns, np.log2(ns)], 1), np.array([100 / (m * TABLE1[int(m)]) - 1 / m for m in ns])
    )
    gb = B if mode == "strong" else B * n
    steps = n * (record["n_train"] // B * B) // gb  # per_worker: N passes an epoch
    per_worker = gb // n
    epoch = (
        steps * (s * step + (1 - s) * step / B * per_worker + rho * step * math.log2(n))
        + k * t["eval_per_sample_s"] * record["n_val"] / n
    )
    return epoch / n


def times(record, mode, n, scale=1.0):
    e = pass_seconds(record, mode, n)
    return [
        math.inf if c["status"] != "reached_target" else c["passes_to_target"] * e * scale
        for c in sorted(cells(record, mode, [n]), key=lambda c: c["seed"])
    ]


def u_of(a, b):
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def p_less(a, b):
    """One-sided: a tends to be smaller. No ties: the exact share of arrangements with a U no
    larger; ties: the tie-corrected normal approximation with a continuity correction of 0.5."""
    pooled = a + b
    if len(set(pooled)) == len(pooled):
        observed, hits, total = u_of(a, b), 0, 0
        for chosen in itertools.combinations(range(len(pooled)), len(a)):
            side_a = [pooled[i] for i in chosen]
            side_b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
            total += 1
            hits += u_of(side_a, side_b) <= observed
        return hits / total
    n, m, N = len(a), len(b), len(pooled)
    ties = [pooled.count(v) for v in set(pooled)]
    var = n * m / 12 * (N + 1 - sum(t**3 - t for t in ties) / (N * (N - 1)))
    return 0.5 * math.erfc(-((u_of(a, b) - n * m / 2 + 0.5) / math.sqrt(var)) / math.sqrt(2))


def holm_rejects(ps, alpha=0.05):
    """Holm step by step: sorted p against alpha / (m - i); stop at the first that fails."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    rejected = [False] * len(ps)
    for rank, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - rank):
            break
        rejected[i] = True
    return rejected


def test_convergence_verdicts_follow_the_stated_rules():
    record, claims = load()
    assert record["settings"]["epoch_definition"] == "per_worker"
    for definition, column in (("missed", "verdict"), ("failed", "verdict_sensitivity")):
        assert claims["Strong scaling always converges"][column] == every_n(
            record, "strong", "converges", definition=definition
        )
        assert claims["The linear scaling rule fails at every N > 1"][column] == every_n(
            record, "linear", "fails", 2, definition
        )
        twice = record["seq_2eta"]
        got = call(sum(missed(r, record, definition) for r in twice), len(twice))
        if 0 < len(twice) < len(record["study"]["seeds"]):
            got = "below the design's seeds"
        assert claims["2 x eta diverges for the sequential model"][column] == {
            "fails": "reproduced",
            "converges": "contradicted",
        }.get(got, "inconclusive")


def test_the_warmup_verdict_follows_its_cells():
    record, claims = load()
    below = [cell_call(record, "warmup", n) for n in ns_of(record, "warmup", 2) if n <= 4]
    above = [cell_call(record, "warmup", n) for n in ns_of(record, "warmup", 8)]
    everywhere = ns_of(record, "warmup", 2) == named(record, 2)
    settled = any(
        cell_call(record, "warmup", n) == ("fails" if n <= 4 else "converges") and not short(record, "warmup", [n])
        for n in ns_of(record, "warmup", 2)
    )
    want = (
        "contradicted"
        if settled
        else "inconclusive"
        if short(record, "warmup", ns_of(record, "warmup", 2))
        else "contradicted"
        if "fails" in below or "converges" in above
        else "reproduced"
        if everywhere and set(below) == {"converges"} and set(above) == {"fails"}
        else "inconclusive"
    )
    assert claims["Warmup converges only up to N = 4"]["verdict"] == want


def test_time_verdicts_under_the_papers_clock_follow_the_stated_rules():
    record, claims = load()
    others = [m for m in ("weak", "linear", "warmup") if cells(record, m, [1])]
    pairs = [
        (times(record, "strong", n), times(record, m, n))
        for n in ns_of(record, "strong", 2)
        for m in others
        if cells(record, m, [n])
    ]
    shorter = holm_rejects([p_less(a, b) for a, b in pairs])
    longer = holm_rejects([p_less(b, a) for a, b in pairs])
    every_pair = len(pairs) == len(named(record, 2)) * len(others)
    want = "contradicted" if any(longer) else "reproduced" if every_pair and all(shorter) else "inconclusive"
    if any(short(record, m, named(record, 2)) for m in ["strong", *others]):
        want = "inconclusive"
    assert claims["Strong scaling is the fastest at every N"]["verdict"] == want
    # a time does not depend on the failure definition: the sensitivity column says the same
    assert claims["Strong scaling is the fastest at every N"]["verdict_sensitivity"] == want

    ns = ns_of(record, "weak", 2)
    conv = every_n(record, "weak", "converges")
    lo, hi = times(record, "weak", ns[0], ns[0]), times(record, "weak", ns[-1], ns[-1])
    at_the_ends = (ns[0], ns[-1]) == (named(record, 2)[0], named(record)[-1])
    eff = (
        "contradicted"
        if p_less(hi, lo) < 0.05
        else "reproduced"
        if p_less(lo, hi) < 0.05 and at_the_ends
        else "inconclusive"
    )
    want = (
        "contradicted"
        if "contradicted" in (conv, eff)
        else "reproduced"
        if conv == eff == "reproduced"
        else "inconclusive"
    )
    if short(record, "weak", [ns[0], ns[-1]]):
        want = "inconclusive"
    assert claims["Weak scaling converges everywhere but its efficiency falls"]["verdict"] == want
