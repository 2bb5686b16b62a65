"""The beyond study's answers as the rules of docs/beyond.md give them (beyond_verdicts.py): each
question's comparisons as a table and as answers.json keeps them, and the answer on the remedies
against strong scaling."""

from __future__ import annotations

import math

from deepdensity.study.core import clocks
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.judge.contrasts import more_a_side, ratio_text
from deepdensity.study.report.beyond_read import Beyond
from deepdensity.study.report.render import md_table


def answers_of(judged: dict) -> dict:
    """A question's comparisons as answers.json keeps them: {key: {"passes" or clock: {verdict,
    ratio, prob_shorter, p_shorter_holm, p_longer_holm}}, with the break-even}."""
    keep = ("verdict", "ratio", "prob_shorter", "p_shorter_holm", "p_longer_holm")
    out = {}
    for key in judged["passes"]:
        out[str(key)] = {
            k: {f: _finite(judged[k][key].get(f)) for f in keep}
            for k in ("passes", *(c.name for c in clocks.JUDGED if c.name in judged))
        }
        if "break_even" in judged:
            out[str(key)]["break_even"] = judged["break_even"][key]
    return out


def _finite(x):
    """JSON has no inf: a ratio with a miss at its median is written as a string."""
    return str(x) if isinstance(x, float) and math.isinf(x) else x


def verdict_cell(row: dict) -> str:
    """One comparison's verdict with its ratio, P(A shorter) and Holm-adjusted p both ways."""
    text = row["verdict"]
    if row["ratio"] is not None:
        text += f"; ratio {ratio_text(row['ratio'])}, P {row['prob_shorter']:.2f}"
    if "p_shorter_holm" in row:
        text += f", p {row['p_shorter_holm']:.2g} / {row['p_longer_holm']:.2g}"
    return text


def more_cell(row: dict) -> str:
    if row["verdict"] not in (bv.NO_DIFFERENCE, bv.TOO_FEW):
        return "-"
    return more_a_side(row.get("more"))


def comparison_table(judged: dict, label, a: str) -> str:
    """A question's comparisons: passes first, then each clock, the break-even and the seeds
    that could still call one; `label(key)` names a comparison, `a` its first side."""
    shown = [(c.name, c.label) for c in clocks.JUDGED if c.name in judged]
    head = ["comparison", "seeds", "passes to target"] + [name for _, name in shown]
    head += ["break-even (rho, this host's compute)"] if "break_even" in judged else []
    rows = []
    for key, p in judged["passes"].items():
        row = [label(key), f"{p['n_a']} / {p['n_b']}", verdict_cell(p)] + [
            verdict_cell(judged[k][key]) for k, _ in shown
        ]
        row += [judged["break_even"][key]] if "break_even" in judged else []
        rows.append(row + [more_cell(judged[shown[0][0]][key])])
    whys = sorted({r["why"] for k in ["passes"] + [k for k, _ in shown] for r in judged[k].values() if r.get("why")})
    return (
        md_table(head + [f"more seeds that could call it ({shown[0][1]})"], rows)
        + f"\nratio: the Hodges-Lehmann estimate of {a} / the other; P: P({a} shorter); p: Holm-adjusted one-sided "
        f"p of '{a} shorter' / '{a} longer'." + "".join(f"\nToo few seeds: {w}." for w in whys) + "\n"
    )


def _by_n(rows: dict) -> str:
    return "; ".join(f"N = {n}: {r['verdict']}" for n, r in rows.items())


def remedies_answer(b: Beyond, judged: dict) -> str:
    """Does a remedy reach the target measurably sooner than strong scaling? The verdict under
    the paper's clock, the passes first, the other clocks and each comparison's table beside it."""
    parts = [
        f"{m}: not exercised: {why}. It is left out of every table, figure and answer below."
        for m, why in b.skipped.items()
    ]
    if not judged:
        return " ".join(parts + ["No remedy was exercised: nothing to compare with strong scaling."])
    won = [f"{m} at N = {n}" for m, j in judged.items() for n, r in j["paper"].items() if r["verdict"] == bv.SHORTER]
    calls = [r["verdict"] for j in judged.values() for r in j["paper"].values()]
    head = (
        "Yes: " + ", ".join(won) + " reached the target measurably sooner than strong scaling under the paper's clock."
        if won
        else "No answer: too few seeds to call any comparison with strong scaling under the paper's clock."
        if all(c in (bv.TOO_FEW, bv.NEITHER) for c in calls)
        else "No: no remedy reached the target measurably sooner than strong scaling under the paper's clock at any N."
    )
    lines = [head]
    for m, j in judged.items():
        lines.append(
            f"{m} against strong scaling, on passes: {_by_n(j['passes'])}. Under the paper's clock: "
            f"{_by_n(j['paper'])}; this host's: {_by_n(j['host'])}; one device per worker: {_by_n(j['device'])}."
        )
    text = " ".join(lines) + "\n\n" + " ".join(parts)
    return (
        text.rstrip()
        + "\n\n"
        + "\n".join(comparison_table(j, lambda n, m=m: f"{m} vs strong, N = {n}", m) for m, j in judged.items())
    )
