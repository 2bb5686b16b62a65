"""The beyond study's answers recomputed apart from the code that gives them (docs/beyond.md's
rules, fixed 2026-11-26 12:30 UTC): passes and seconds written out from the record (the three
clocks by their formulas, local's pass from its runs' allreduces), the Mann-Whitney p from
scipy.stats directly, Holm step by step, the smallest p a seed count allows by its formulas.
Checked against the committed reports/beyond (its answers.json and REPORT.md) and against
hand-made cells whose answer is known, so that a rule that drifts from its statement, or a
verdict edited by hand, fails.

Tolerances: p-values, ratios and seconds agree to rel 1e-9: both sides compute the same
formulas in float64 in another order, so they differ by rounding only (~1e-15 relative); 1e-9
is far above that and far below any difference a verdict turns on. The break-even is checked
1 % either side of the rho reported: clocks.break_even narrows it to a ratio of 1.0005 and
rounds it to 3 significant digits (at most 0.5 %)."""

import json
import math
import shutil

import numpy as np
import pytest
from scipy import optimize, stats

from tests.support import ROOT

BEYOND = ROOT / "reports" / "beyond"
TABLE1 = {2: 105.17, 4: 86.81, 8: 90.09, 16: 58.08, 32: 46.25}
SPLITS = ("strong", "local", "adaptive")  # the global batch B split over N; the others B x N


def load():
    if not (BEYOND / "study.json").is_file():
        pytest.skip("no committed beyond study")
    return json.loads((BEYOND / "study.json").read_text())


# ------------------------------------------------------------------------------------
# the clocks and times, written out
# ------------------------------------------------------------------------------------
def parts(timing: dict, clock: str, B: int = 32) -> dict:
    """A step's parts under a clock: the host's (compute scaled to the real epoch), the paper's
    (the host's base-batch step split by Table I's fit, no latency) or one device per worker."""
    k = timing["compute_scale"]
    p = {
        "fixed": k * timing["step_fixed_s"],
        "per_sample": k * timing["per_sample_s"],
        "eval": k * timing["eval_per_sample_s"],
        "per_doubling": timing["allreduce_per_doubling_s"],
        "latency": timing.get("allreduce_latency_s", 0.0),
        "overhead": timing.get("epoch_overhead_s", 0.0),
    }
    if clock == "paper":
        step = p["fixed"] + p["per_sample"] * B
        ns = np.array(sorted(TABLE1), float)
        (s, rho), _ = optimize.nnls(
            np.stack([1 - 1 / ns, np.log2(ns)], 1), np.array([100 / (m * TABLE1[int(m)]) - 1 / m for m in ns])
        )
        p.update(fixed=s * step, per_sample=(1 - s) * step / B, per_doubling=rho * step, latency=0.0)
    elif clock == "device":
        p.update(per_doubling=0.0, latency=0.0)
    return p


def pass_seconds(
    p: dict, mode: str, n: int, n_train: int, n_val: int, B: int = 32, allreduces=None, batch: int = None
) -> float:
    """Seconds of one pass (per_worker: an epoch is N passes) at (mode, N); `allreduces` per epoch
    as local's runs counted them (each 3x the gradient's floats), else one per step; `batch`: a
    sequential run at another global batch (the sweep)."""
    gb = batch or (B if mode in SPLITS else B * n)
    steps = n * (n_train // B * B) // gb if batch is None else n_train // batch
    size, count = (3.0, allreduces) if allreduces is not None else (1.0, steps)
    comm = p["latency"] + size * p["per_doubling"] * math.log2(n) if n > 1 else 0.0
    epoch = steps * (p["fixed"] + p["per_sample"] * gb / n) + count * comm + p["eval"] * n_val / n + p["overhead"]
    return epoch / n


def passes(c: dict) -> float:
    """Passes to target, inf where missed; epochs x N where the record kept none (docs/beyond.md)."""
    if c["status"] != "reached_target":
        return math.inf
    return c["passes_to_target"] if c.get("passes_to_target") is not None else c["epochs_to_target"] * c["n"]


# ------------------------------------------------------------------------------------
# the rules, written out
# ------------------------------------------------------------------------------------
def p_less(a, b) -> float:
    a, b = [float(x) for x in a], [float(x) for x in b]
    ties = len(set(a + b)) < len(a + b)
    return float(stats.mannwhitneyu(a, b, alternative="less", method="asymptotic" if ties else "exact").pvalue)


def smallest_p(n, m) -> float:
    """Every A below every B: 1 / C(n + m, n) exactly, or tied within each side, the normal
    approximation with the tie correction and a continuity correction of 0.5."""
    N = n + m
    var = n * m / 12 * (N + 1 - ((n**3 - n) + (m**3 - m)) / (N * (N - 1)))
    tied = stats.norm.cdf((0 - n * m / 2 + 0.5) / math.sqrt(var)) if var > 0 else 1.0
    return min(1 / math.comb(N, n), tied)


def holm(ps, alpha=0.05) -> list:
    """Rejections, step by step: sorted p against alpha / (m - i), stopping at the first that fails."""
    order, out = sorted(range(len(ps)), key=lambda i: ps[i]), [False] * len(ps)
    for rank, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - rank):
            break
        out[i] = True
    return out


def verdicts(pairs: dict) -> dict:
    """{key: verdict} of one question's comparisons {key: (A, B)} by docs/beyond.md."""
    out, tested = {}, []
    for key, (a, b) in pairs.items():
        if min(len(a), len(b)) < 3:
            out[key] = "too few seeds"
        elif all(math.isinf(x) for x in [*a, *b]):
            out[key] = "neither reached"
        else:
            tested.append(key)
    shorter = holm([p_less(*pairs[k]) for k in tested])
    longer = holm([p_less(pairs[k][1], pairs[k][0]) for k in tested])
    able = holm([smallest_p(len(pairs[k][0]), len(pairs[k][1])) for k in tested])
    for k, s, lo, ok in zip(tested, shorter, longer, able):
        out[k] = "shorter" if s else "longer" if lo else "no measurable difference" if ok else "too few seeds"
    return out


# ------------------------------------------------------------------------------------
# the committed study
# ------------------------------------------------------------------------------------
def remedy_pairs(record, mode, clock):
    cells, rows, t = record["cells"], record["run_rows"], record["timing"]
    out = {}
    for n in sorted({c["n"] for c in cells if c["mode"] == mode and c["n"] > 1}):
        sides = []
        for m in (mode, "strong"):
            cs = sorted((c for c in cells if c["mode"] == m and c["n"] == n), key=lambda c: c["seed"])
            counts = [r["allreduces"] for c in cs for r in rows.get(c["run"], [])] if m == mode else []
            per_pass = (
                1.0
                if clock == "passes"
                else pass_seconds(
                    parts(t, clock),
                    m,
                    n,
                    record["n_train"],
                    record["n_val"],
                    allreduces=float(np.median(counts)) if counts else None,
                )
            )
            sides.append([passes(c) * per_pass for c in cs])
        out[n] = tuple(sides)
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The committed record rendered now, and its answers."""
    from deepdensity.study.report.report_beyond import render_reports

    record = load()
    out = tmp_path_factory.mktemp("beyond")
    render_reports(out, record)
    return record, json.loads((out / "answers.json").read_text()), out


def test_the_remedies_answers_are_the_rules_recomputed(rendered):
    record, answers, _ = rendered
    assert set(answers["remedies"]) == {"local"}, "adaptive never grew its batch: not exercised, not answered"
    for clock in ("passes", "paper", "host", "device"):
        pairs = remedy_pairs(record, "local", clock)
        want = verdicts(pairs)
        got = {int(n): row[clock]["verdict"] for n, row in answers["remedies"]["local"].items()}
        assert got == want, clock
        for n, (a, b) in pairs.items():  # the ratio and P(shorter), recomputed by hand
            row = answers["remedies"]["local"][str(n)][clock]
            logs = sorted(math.log(x) - math.log(y) for x in a for y in b)
            assert row["ratio"] == pytest.approx(math.exp(np.median(logs)), rel=1e-9)
            assert row["prob_shorter"] == pytest.approx(
                sum(1.0 if x < y else 0.5 if x == y else 0.0 for x in a for y in b) / (len(a) * len(b)), rel=1e-9
            )
    # three seeds a side and three N: even every local seed below every strong seed could not be called
    assert smallest_p(3, 3) * 3 > 0.05


def test_the_committed_report_says_what_the_rules_give(rendered):
    record, answers, out = rendered
    committed = BEYOND / "answers.json"
    assert committed.is_file(), "reports/beyond is rendered by the code of docs/beyond.md's rules"
    assert json.loads(committed.read_text()) == answers
    text = (BEYOND / "REPORT.md").read_text()
    for n, row in answers["remedies"]["local"].items():
        line = next(x for x in text.splitlines() if x.startswith(f"| local vs strong, N = {n} |"))
        cells = [x.strip() for x in line.strip("|").split("|")]
        assert [c.split(";")[0] for c in cells[2:6]] == [
            row[k]["verdict"] for k in ("passes", "paper", "host", "device")
        ]


def test_adaptive_is_not_exercised_and_says_the_theta_that_would_have_fired(rendered):
    record, answers, out = rendered
    ratios = [
        r["grad_noise"] / r["grad_sq"]
        for c in record["cells"]
        if c["mode"] == "adaptive" and c["n"] > 1
        for r in record["run_rows"][c["run"]]
    ]
    assert all(
        r["global_batch"] == 32
        for c in record["cells"]
        if c["mode"] == "adaptive" and c["n"] > 1
        for r in record["run_rows"][c["run"]]
    )
    said = answers["not_exercised"]["adaptive"]
    assert f"at most {max(ratios):.3g}" in said and f"= {math.sqrt(max(ratios)):.2f}" in said
    assert max(ratios) < record["settings"]["adaptive_theta"] ** 2
    text = (out / "REPORT.md").read_text()
    tables = text.split("## What was run")[1]
    assert "| adaptive |" not in tables and "adaptive: s" not in tables, "left out of every table"
    assert not (out / "fig7.png").exists()
    assert "adaptive" not in (out / "time_to_target.csv").read_text()


def test_the_filter_and_the_sweep_are_the_rules_recomputed(rendered):
    record, answers, _ = rendered
    f, t = record["filtering"], record["timing"]
    size = {"full": record["n_train"], "network": f["filter"]["n_train_before"] - f["filter"]["n_dropped"]}
    size["random"] = size["network"]
    for mode in dict.fromkeys(r["mode"] for r in f["rows"]):
        n = next(r["n"] for r in f["rows"] if r["mode"] == mode)
        for clock in ("passes", "paper", "host", "device"):
            of = {
                d: [
                    passes({**r, "n": n})
                    * (1.0 if clock == "passes" else pass_seconds(parts(t, clock), mode, n, size[d], record["n_val"]))
                    for r in sorted(f["rows"], key=lambda r: r["seed"])
                    if (r["mode"], r["data"]) == (mode, d)
                ]
                for d in size
            }
            want = verdicts({"full": (of["network"], of["full"]), "random": (of["network"], of["random"])})
            got = {k: v[clock]["verdict"] for k, v in answers["filter"][f"{mode} N = {n}"].items()}
            assert got == want, (mode, clock)
    for rule in ("eta", "linear"):
        rows = [r for r in record["batch_sweep"] if r["lr_rule"] == rule]
        for clock in ("passes", "paper", "host"):

            def side(b):
                return [
                    passes({**r, "n": 1})
                    * (
                        1.0
                        if clock == "passes"
                        else pass_seconds(parts(t, clock), "strong", 1, record["n_train"], record["n_val"], batch=b)
                    )
                    for r in sorted(rows, key=lambda r: r.get("seed", 0))
                    if r["batch"] == b
                ]

            want = verdicts({b: (side(b), side(32)) for b in sorted({r["batch"] for r in rows}) if b != 32})
            assert {int(b): v[clock]["verdict"] for b, v in answers["sweep"][rule].items()} == want, (rule, clock)
        # the host clock at each batch is the sweep's own time, modelled epoch by epoch when it ran
        for r in rows:
            if r["time_to_target_s"] is not None:
                assert passes({**r, "n": 1}) * pass_seconds(
                    parts(t, "host"), "strong", 1, record["n_train"], record["n_val"], batch=r["batch"]
                ) == pytest.approx(r["time_to_target_s"], rel=1e-9)


@pytest.mark.medium
def test_a_hand_edited_verdict_fails_the_check(tmp_path):
    from deepdensity.study import rerender

    load()
    copy = tmp_path / "beyond"
    shutil.copytree(BEYOND, copy)
    text = (copy / "REPORT.md").read_text()
    assert rerender.main(["--from", str(copy), "--check"]) == 0
    # the verdict on passes of local against strong at N = 8, whatever it is, hand-edited to another
    row = next(line for line in text.splitlines() if line.startswith("| local vs strong, N = 8 |"))
    cells = row.split(" | ")
    cells[2] = "shorter" + cells[2][cells[2].index(";") :] if not cells[2].startswith("shorter") else "longer"
    edited = text.replace(row, " | ".join(cells), 1)
    assert edited != text, "the edit changes the report"
    (copy / "REPORT.md").write_text(edited)
    assert rerender.main(["--from", str(copy), "--check"]) == 1


# ------------------------------------------------------------------------------------
# hand-made cells whose answer is known
# ------------------------------------------------------------------------------------
TIMING = {
    "compute_scale": 1.0,
    "step_fixed_s": 0.004,
    "per_sample_s": 0.0006,
    "eval_per_sample_s": 0.0003,
    "allreduce_per_doubling_s": 0.005,
    "allreduce_latency_s": 0.005,
    "epoch_overhead_s": 0.1,
}


def _cells(mode, n, passes_):
    from deepdensity.study.core.cells import Cell

    return [
        Cell(
            mode,
            n,
            s,
            "reached_target" if math.isfinite(p) else "stalled",
            9,
            9 if math.isfinite(p) else None,
            1.0,
            "modelled",
            None,
            f"{mode}-n{n}-s{s}",
            None,
            p if math.isfinite(p) else None,
        )
        for s, p in enumerate(passes_)
    ]


def _judge(cells, syncs=29):
    from deepdensity.study.core.cells import TimeBase
    from deepdensity.study.judge import beyond_verdicts as bv

    rows = {c.run: [{"global_batch": 32, "allreduces": syncs}] for c in cells if c.mode == "local"}
    clocks = bv.clock_set(TIMING, 32, bv.row_epochs(cells, rows))
    return bv.remedy(cells, "local", [1, 2, 4, 8], clocks, TimeBase(1844, 256, "per_worker"))


def test_the_rules_can_say_shorter_longer_no_difference_and_too_few_seeds():
    strong = [20.0, 20.5, 21.0, 21.5, 22.0]
    cells = _cells("strong", 2, strong) + _cells("local", 2, [14.0, 14.5, 15.0, 15.5, 16.0])  # 5 below 5
    cells += _cells("strong", 4, strong) + _cells("local", 4, [30.0, 31.0, 32.0, 33.0, math.inf])  # 5 above 5
    cells += _cells("strong", 8, strong) + _cells("local", 8, [19.0, 20.2, 21.2, 21.7, 23.0])  # interleaved
    got = _judge(cells)["passes"]
    assert [got[n]["verdict"] for n in (2, 4, 8)] == ["shorter", "longer", "no measurable difference"]
    assert got[2]["p_shorter_holm"] == pytest.approx(3 * p_less([14.0, 14.5, 15.0, 15.5, 16.0], strong), rel=1e-9)
    assert got[8]["more"] is not None and got[8]["more"] > 0
    # three seeds a side, every one below strong's at every N: the old rule said "shorter", the
    # rank test at Holm over 3 cannot: too few seeds, never "no measurable difference"
    few = []
    for n in (2, 4, 8):
        few += _cells("strong", n, strong[:3]) + _cells("local", n, [10.0, 11.0, 12.0])
    assert {r["verdict"] for r in _judge(few)["passes"].values()} == {"too few seeds"}
    two = _cells("strong", 2, strong[:2]) + _cells("local", 2, [10.0, 11.0])
    assert _judge(two)["passes"][2]["verdict"] == "too few seeds"
    assert verdicts({2: ([10.0, 11.0], strong[:2])}) == {2: "too few seeds"}


def test_the_break_even_is_where_the_recomputed_verdict_changes():
    """local needs more passes than strong, but pays 29 allreduces of 3 gradients a pass pair
    where strong pays 114 of one: free communication favours strong, costly communication local."""
    strong = [20.0, 20.5, 21.0, 21.5, 22.0]
    local = [22.0, 22.5, 23.0, 23.5, 24.0]
    judged = _judge(_cells("strong", 2, strong) + _cells("local", 2, local))
    text = judged["break_even"][2]
    step = TIMING["step_fixed_s"] + TIMING["per_sample_s"] * 32

    def at(r):
        p = {**parts(TIMING, "host"), "per_doubling": r * step, "latency": 0.0}
        a = [x * pass_seconds(p, "local", 2, 1844, 256, allreduces=29) for x in local]
        b = [x * pass_seconds(p, "strong", 2, 1844, 256) for x in strong]
        return verdicts({2: (a, b)})[2]

    flips = [
        (float(rest.split(", ")[0]), below, rest.split(", ")[1].removesuffix(" above"))
        for below, rest in (f.split(" below rho = ") for f in text.split("; "))
    ]
    assert [(b, a) for _, b, a in flips] == [
        ("longer", "no measurable difference"),
        ("no measurable difference", "shorter"),
    ], text
    for rho, below, above in flips:
        assert at(rho * 0.99) == below and at(rho * 1.01) == above, (rho, text)
    assert judged["device"][2]["verdict"] == at(0.0) == "longer", "with free communication only passes count"


def test_locals_pass_is_priced_from_what_its_runs_did():
    """Under this host's clock, local's epoch is the one the study modelled epoch by epoch from the
    same rows (outcomes.modelled_from_rows): its allreduces every H steps, each of 3 gradients."""
    from deepdensity.study.core.cells import Cell
    from deepdensity.study.judge import beyond_verdicts as bv

    record = load()
    cells = [Cell(**c) for c in record["cells"]]
    host = bv.clock_set(record["timing"], 32, bv.row_epochs(cells, record["run_rows"]))["host"]
    local = [c for c in cells if c.mode == "local" and c.n > 1]
    assert local
    for c in local:
        assert host.epoch_seconds("local", c.n, record["n_train"], record["n_val"], "per_worker") == pytest.approx(
            c.epoch_seconds, rel=1e-9
        )
        by_hand = pass_seconds(
            parts(record["timing"], "host"),
            "local",
            c.n,
            record["n_train"],
            record["n_val"],
            allreduces=record["run_rows"][c.run][0]["allreduces"],
        )
        assert c.epoch_seconds / c.n == pytest.approx(by_hand, rel=1e-9)


def test_an_adaptive_whose_batch_grew_is_exercised():
    from deepdensity.study.judge import beyond_verdicts as bv

    cells = _cells("adaptive", 2, [20.0, 21.0, 22.0])
    still = {c.run: [{"global_batch": 32, "allreduces": 114, "grad_noise": 0.1, "grad_sq": 1.0}] for c in cells}
    assert "theta below sqrt(0.1) = 0.32" in bv.not_exercised(cells, still, 32, 1.0)["adaptive"]
    grew = {
        **still,
        cells[0].run: still[cells[0].run] + [{"global_batch": 64, "allreduces": 57, "grad_noise": 3.0, "grad_sq": 1.0}],
    }
    assert bv.not_exercised(cells, grew, 32, 1.0) == {}


def test_the_first_table_groups_the_paper_clocks_verdicts_and_names_the_nearest_to_shorter():
    """bv.brief_rows on hand-made answers: each question's verdicts grouped in their order, and
    the comparison with the smallest Holm p of 'shorter' with its ratio and both p; none where no
    comparison was tested (too few seeds: the tiny study's sweep)."""
    from deepdensity.study.judge import beyond_verdicts as bv

    def comp(verdict, ratio, shorter, longer):
        return {"paper": {"verdict": verdict, "ratio": ratio, "p_shorter_holm": shorter, "p_longer_holm": longer}}

    answers = {
        "not_exercised": {"adaptive": "its test never fired: a long reason"},
        "remedies": {"local": {"2": comp("shorter", 0.5, 0.01, 1.0), "4": comp("longer", "inf", 1.0, 0.02)}},
        "filter": {
            "weak N = 4": {
                "full": comp("no measurable difference", 0.9, 0.4, 1.0),
                "random": comp("no measurable difference", 1.1, 0.7, 0.6),
            }
        },
        "sweep": {
            "eta": {"8": comp("longer", 1.5, 1.0, 0.001)},
            "linear": {"8": comp("too few seeds", None, None, None)},
        },
    }
    assert bv.brief_rows(answers) == [
        ["adaptive against strong scaling", "not exercised: its test never fired", "-"],
        [
            "local against strong scaling",
            "shorter at N = 2; longer at N = 4",
            "N = 2: ratio 0.50, Holm p = 0.01 shorter, 1 longer",
        ],
        [
            "network-filtered data, weak N = 4",
            "no measurable difference against the full data and the random control",
            "against the full data: ratio 0.90, Holm p = 0.4 shorter, 1 longer",
        ],
        [
            "global batch b against the study's, lr rule eta",
            "longer at b = 8",
            "b = 8: ratio 1.50, Holm p = 1 shorter, 0.001 longer",
        ],
        ["global batch b against the study's, lr rule linear", "too few seeds at b = 8", "-"],
    ]
