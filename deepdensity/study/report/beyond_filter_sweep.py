"""The beyond study's sections on the data filter and the batch sweep (templates/filtering.md and
batch_sweep.md), with their figures and JSON, where the study ran them."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from deepdensity.study.core.cells import median_time
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.record import without_machine_paths
from deepdensity.study.report import against_n
from deepdensity.study.report.beyond_answers import answers_of, comparison_table
from deepdensity.study.report.beyond_read import Beyond
from deepdensity.study.report.render import md_table
from deepdensity.utils.templates import fill


def _filter_groups(b: Beyond) -> list:
    """[(mode, N, {data: (cells, TimeBase)})]: each data set with its own training-set size."""
    f = b.record["filtering"]
    facts, cells = f["filter"], bv.filter_cells(f["rows"])
    filtered = facts.get("n_train_before", b.base.n_train) - facts.get("n_dropped", 0)
    size = {"full": b.base.n_train, "network": filtered, "random": filtered}
    out = []
    for mode, n in dict.fromkeys((c.mode, c.n) for _, c in cells):
        by_data = {
            d: (
                [c for dd, c in cells if dd == d and (c.mode, c.n) == (mode, n)],
                dataclasses.replace(b.base, n_train=size[d]),
            )
            for d in against_n.DATA_STYLE
        }
        out.append((mode, n, {d: v for d, v in by_data.items() if v[0]}))
    return out


def _medians(cells: list, clock, base, digits: int = 1) -> str:
    med = median_time(bv.values(cells, clock, base))
    return "not every seed reached" if med is None else f"{med:.{digits}f}"


def filtering_md(out: Path, b: Beyond, plt, answers: dict) -> str:
    filtering, groups, paper = b.record["filtering"], _filter_groups(b), b.clocks["paper"]
    facts = filtering["filter"]
    (out / "filtering.json").write_text(
        without_machine_paths(json.dumps({"filter": facts, "runs": filtering["rows"]}, indent=2))
    )
    against_n.filter_figure(out / "fig8.png", groups, paper, plt)
    rows, judged, tables, helped = [], [], [], []
    for mode, n, by_data in groups:
        for d, (cs, base) in by_data.items():
            passes = ", ".join(f"{v:.4g}" if math.isfinite(v) else "-" for v in bv.values(cs, bv.PASSES, base))
            rows.append([mode, n, d, base.n_train, passes, _medians(cs, bv.PASSES, base), _medians(cs, paper, base)])
        j = bv.filtering(filtering["rows"], mode, {d: base for d, (_, base) in by_data.items()}, b.clocks)
        answers[f"{mode} N = {n}"] = answers_of(j)
        if j["paper"] and all(r["verdict"] == bv.SHORTER for r in j["paper"].values()):
            helped.append(f"{mode} at N = {n}")
        judged.append((mode, n, j))
        tables.append(comparison_table(j, lambda k, mode=mode: f"{mode}, network vs {k}", "network"))
    table = md_table(
        [
            "mode",
            "N",
            "data",
            "training cubes",
            "passes to target (per seed)",
            "passes, median",
            "time to target (s, the paper's clock), median",
        ],
        rows,
    )
    return fill(
        "filtering.md",
        helped=helped,
        judged=judged,
        pca=facts.get("pca_components"),
        perplexity=facts.get("tsne_perplexity"),
        min_samples=facts.get("dbscan_min_samples"),
        eps=f"{float(facts.get('dbscan_eps', float('nan'))):.4g}",
        clusters=facts.get("clusters"),
        n_dropped=facts.get("n_dropped"),
        n_before=facts.get("n_train_before"),
        target=f"{b.record['target']:.6g}",
        table=table,
        comparisons="\n".join(tables),
    )


def sweep_md(out: Path, b: Beyond, plt, answers: dict) -> str:
    sweep, paper, batch = b.record["batch_sweep"], b.clocks["paper"], b.cfg.batch_size
    (out / "batch_sweep.json").write_text(json.dumps(sweep, indent=2))
    by_rule = {rule: bv.sweep_cells(sweep, rule) for rule in dict.fromkeys(r["lr_rule"] for r in sweep)}
    against_n.sweep_figure(out / "fig9.png", by_rule, batch, paper, b.base, plt)
    rows, said, tables = [], [], []
    lr = {(r["lr_rule"], r["batch"]): r["lr"] for r in sweep}
    for rule, per_batch in by_rule.items():
        rows += _sweep_rows(b, rule, per_batch, lr)
        j = bv.sweep(sweep, rule, batch, b.clocks, b.base)
        answers[rule] = answers_of(j)
        said.append(_sweep_said(rule, j, bv.shortest_median(sweep, rule, paper, b.base), batch))
        tables.append(comparison_table(j, lambda k, rule=rule: f"{rule}: b = {k} vs {batch}", "b"))
    table = md_table(
        [
            "global batch",
            "lr rule",
            "lr",
            "seeds",
            "passes to target (per seed)",
            "passes, median",
            "s, the paper's clock, median",
            "s, this host's clock, median",
        ],
        rows,
    )
    return fill(
        "batch_sweep.md",
        eta=f"{b.record['eta']:.6g}",
        batch=batch,
        target=f"{b.record['target']:.6g}",
        stopping=b.record.get("sweep_stopping"),
        answer=" ".join(said),
        table=table,
        comparisons="\n".join(tables),
        median=against_n.sweep_caption(by_rule),
    )


def _sweep_rows(b: Beyond, rule: str, per_batch: dict, lr: dict) -> list:
    """One lr rule's rows of the sweep's table, a global batch each: its seeds' passes to target
    (a miss with its status and epochs) and the medians in passes and under the paper's and this
    host's clocks at that batch."""
    paper, host = b.clocks["paper"], b.clocks["host"]
    rows = []
    for size, cs in per_batch.items():
        listing = ", ".join(
            f"{v:.4g}" if math.isfinite(v) else f"- ({c.status}, {c.epochs})"
            for c, v in zip(cs, bv.values(cs, bv.PASSES, b.base))
        )
        rows.append(
            [
                size,
                rule,
                f"{lr[(rule, size)]:.4g}",
                len(cs),
                listing,
                _medians(cs, bv.PASSES, b.base),
                _medians(cs, bv.at_batch(paper, size), b.base),
                _medians(cs, bv.at_batch(host, size), b.base),
            ]
        )
    return rows


def _sweep_said(rule: str, judged: dict, best, batch: int) -> str:
    """What the sweep answers for one lr rule: the batch with the shortest median time under the
    paper's clock (`best`, named, not tested), and the batches by their verdict against `batch`."""
    named = (
        f"batch {best} has the shortest median time under the paper's clock (named, not tested)"
        if best is not None
        else "no batch reached the target on every seed"
    )
    calls = {
        v: [k for k, r in judged["paper"].items() if r["verdict"] == v]
        for v in (bv.SHORTER, bv.LONGER, bv.NO_DIFFERENCE, bv.TOO_FEW, bv.NEITHER)
    }
    return (
        f"{'At eta' if rule == 'eta' else 'With lr eta x b / ' + str(batch)} ({rule}): {named}; against "
        f"batch {batch}, under the paper's clock: "
        + "; ".join(f"{v}: {', '.join(map(str, ks))}" for v, ks in calls.items() if ks)
        + "."
    )
