"""Every verdict of the committed study recomputed from its study.json with the rules as
REPORT.md states them, written out here apart from the code that rendered it: failures, exact
intervals by the beta quantiles, Fisher's test by the hypergeometric sum, the paper's clock by
its formula. A verdict edited in claims.json, or a rule that drifted from its statement, fails."""
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
    return json.loads((STUDY / "study.json").read_text()), \
        {c["claim"]: c for c in json.loads((STUDY / "claims.json").read_text())}


def failed(run, collapse):
    loss = run.get("final_val_loss")
    return run["status"] != "reached_target" and (loss is None or not math.isfinite(loss) or loss >= collapse)


def call(fails, runs):
    """The 'rate' rule: Clopper-Pearson 95 % from the beta quantiles, 0.5 on either side."""
    low = stats.beta.ppf(0.025, fails, runs - fails + 1) if fails else 0.0
    high = stats.beta.ppf(0.975, fails + 1, runs - fails) if fails < runs else 1.0
    return "converges" if high < 0.5 else "fails" if low > 0.5 else "inconclusive"


def cells(record, mode, ns):
    return [c for c in record["cells"] if c["mode"] == mode and c["n"] in ns]


def every_n(record, mode, expect, least=1):
    opposite = {"converges": "fails", "fails": "converges"}[expect]
    calls = [call(sum(failed(c, record["collapse_loss"]) for c in cells(record, mode, [n])), len(cells(record, mode, [n])))
             for n in sorted({c["n"] for c in record["cells"] if c["mode"] == mode and c["n"] >= least})]
    return "contradicted" if opposite in calls else "reproduced" if all(x == expect for x in calls) else "inconclusive"


def epoch_seconds(record, mode, n):
    """The paper's clock, written out: the host's base-batch step split by Table I's fit."""
    t, B = record["timing"], record["settings"]["batch_size"]
    k = t["compute_scale"]
    step = k * (t["step_fixed_s"] + t["per_sample_s"] * B)
    ns = np.array(sorted(TABLE1), float)
    (s, rho), _ = optimize.nnls(np.stack([1 - 1 / ns, np.log2(ns)], 1),
                                np.array([100 / (m * TABLE1[int(m)]) - 1 / m for m in ns]))
    gb = B if mode == "strong" else B * n
    steps = n * (record["n_train"] // B * B) // gb                     # per_worker: N passes
    per_worker = gb // n
    return steps * (s * step + (1 - s) * step / B * per_worker + rho * step * math.log2(n)) \
        + k * t["eval_per_sample_s"] * record["n_val"] / n


def times(record, mode, n, scale=1.0):
    e = epoch_seconds(record, mode, n)
    return [math.inf if c["epochs_to_target"] is None else c["epochs_to_target"] * e * scale
            for c in sorted(cells(record, mode, [n]), key=lambda c: c["seed"])]


def shorter(a, b):
    if len(a) < 3 or len(b) < 3 or (math.isinf(min(a)) and math.isinf(min(b))):
        return "undecided"
    return "agrees" if max(a) < min(b) else "disagrees" if max(b) < min(a) else "undecided"


def verdict(bearings):
    return "contradicted" if "disagrees" in bearings else \
        "reproduced" if bearings and all(b == "agrees" for b in bearings) else "inconclusive"


def test_convergence_verdicts_follow_the_stated_rules():
    record, claims = load()
    assert record["settings"]["epoch_definition"] == "per_worker"
    assert claims["Strong scaling always converges"]["verdict"] == every_n(record, "strong", "converges")
    assert claims["The linear scaling rule fails at every N > 1"]["verdict"] == every_n(record, "linear", "fails", 2)
    twice = record["seq_2eta"]
    got = call(sum(failed(r, record["collapse_loss"]) for r in twice), len(twice))
    assert claims["2 x eta diverges for the sequential model"]["verdict"] == \
        {"fails": "reproduced", "converges": "contradicted"}.get(got, "inconclusive")


def test_the_warmup_trend_follows_fishers_test_written_out():
    record, claims = load()
    collapse = record["collapse_loss"]
    below = cells(record, "warmup", [2, 4])
    above = [c for c in record["cells"] if c["mode"] == "warmup" and c["n"] >= 8]
    fb, fa = sum(failed(c, collapse) for c in below), sum(failed(c, collapse) for c in above)
    total, n_above = fb + fa, len(above)
    # P(at least fa of the failures fall above), hypergeometric
    p = sum(math.comb(n_above, k) * math.comb(len(below), total - k) for k in range(fa, min(total, n_above) + 1)) \
        / math.comb(len(below) + n_above, total)
    contradicted = call(fb, len(below)) == "fails" or call(fa, n_above) == "converges"
    want = "contradicted" if contradicted else "reproduced" if p < 0.05 else "inconclusive"
    assert claims["Warmup converges only up to N = 4"]["verdict"] == want
    assert f"p = {p:.3g}" in claims["Warmup converges only up to N = 4"]["ours"]


def test_time_verdicts_under_the_papers_clock_follow_the_stated_rules():
    record, claims = load()
    others = [m for m in ("weak", "linear", "warmup") if cells(record, m, [1])]
    bearings = [shorter(times(record, "strong", n), times(record, m, n))
                for n in (2, 4, 8, 16, 32) for m in others if cells(record, m, [n]) and cells(record, "strong", [n])]
    assert claims["Strong scaling is the fastest at every N"]["verdict"] == verdict(bearings)
    ns = sorted({c["n"] for c in record["cells"] if c["mode"] == "weak" and c["n"] > 1})
    weak = [{"converges": "agrees", "fails": "disagrees"}.get(
        call(sum(failed(c, record["collapse_loss"]) for c in cells(record, "weak", [n])),
             len(cells(record, "weak", [n]))), "undecided") for n in [1] + ns]
    weak.append(shorter(times(record, "weak", ns[0], ns[0]), times(record, "weak", ns[-1], ns[-1])))
    assert claims["Weak scaling converges everywhere but its efficiency falls"]["verdict"] == verdict(weak)
