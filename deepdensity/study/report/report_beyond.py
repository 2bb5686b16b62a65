"""The `beyond` study's reports: local SGD (and adaptive batches, when exercised) against strong
scaling with the paper's four modes beside them, the data filter and the batch sweep, each
answer by the rules of docs/beyond.md (beyond_verdicts.py); rendered from the study's record
(study.json, record.beyond_keys) alone, with templates/beyond.md, filtering.md and
batch_sweep.md, and the figures of against_n.py."""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from deepdensity.config import Config
from deepdensity.scaling import policies, rules
from deepdensity.study.core import clocks
from deepdensity.study.core.cells import Cell, TimeBase, efficiency_table, failures, median_time, timed_under
from deepdensity.study.core.clocks import describe_allreduce
from deepdensity.study.core.preset import Study
from deepdensity.study.core.protocol_text import PAPER_TABLE1
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.judge.contrasts import more_a_side, ratio_text
from deepdensity.study.record import config_of, study_of, time_base, without_machine_paths
from deepdensity.study.report import against_n
from deepdensity.study.report.render import (
    cells_at,
    cost_line,
    epochs_listing,
    fmt,
    md_table,
    target_source,
    time_range,
    write_csv,
)
from deepdensity.utils.plots import pyplot
from deepdensity.utils.templates import fill

ORDER = (policies.STRONG, policies.WEAK, policies.LINEAR, policies.WARMUP, policies.ADAPTIVE, policies.LOCAL)

# The text files render_reports writes; `deepdensity report --check` compares exactly these.
TEXT_OUTPUTS = ("REPORT.md", "answers.json", "time_to_target.md", "time_to_target.csv", "filtering.json",
                "batch_sweep.json")


@dataclass
class Beyond:
    """A beyond record read for its reports: its cells, the default study's beside them, the
    modes shown (a remedy not exercised is not), the clocks and what turns passes into seconds."""
    record: dict
    study: Study
    cfg: Config
    cells: list                 # this study's
    every: list                 # and the default study's weak, linear and warmup
    skipped: dict               # {mode: why}: not exercised, left out of tables, figures and answers
    modes: list                 # the modes shown, in ORDER
    clocks: dict                # {name: beyond_verdicts.RowClock}, the paper's first
    base: TimeBase


def read(record: dict) -> Beyond:
    study, cfg = study_of(record), config_of(record)
    cells = [Cell.of(c) for c in record["cells"]]
    every = cells + [Cell.of(c) for c in record["earlier"]["cells"]]
    skipped = bv.not_exercised(cells, record["run_rows"], cfg.batch_size, cfg.adaptive_theta)
    modes = [m for m in ORDER if m not in skipped and any(c.mode == m for c in every)]
    shown = [c for c in every if c.mode in modes]
    return Beyond(record, study, cfg, [c for c in cells if c.mode in modes], shown, skipped, modes,
                  bv.clock_set(record["timing"], cfg.batch_size, bv.row_epochs(cells, record["run_rows"])),
                  time_base(record))


def render_reports(out: Path, record: dict, entries: Optional[list] = None) -> list:
    """REPORT.md, answers.json (every comparison's verdicts), time_to_target.md/.csv and the
    figures under `out`; the filter's and the batch sweep's sections, figures and JSON where the
    study ran them. From `record` alone (`entries`, the ledger's, are the paper report's); its
    answers are in answers.json, so no claims are returned."""
    out.mkdir(parents=True, exist_ok=True)
    for name in OPTIONAL_OUTPUTS + (() if record["filtering"] else FILTER_TOOL_FIGURES):
        (out / name).unlink(missing_ok=True)
    b, plt = read(record), pyplot()
    judged = {m: bv.remedy(b.cells, m, b.study.workers, b.clocks, b.base) for m in policies.beyond() if m in b.modes}
    against_n.figures_against_n(out, b.every, b.modes, b.study.workers, b.clocks["paper"], b.base, plt)
    if any(policies.get(m).grows_batch for m in b.modes):
        against_n.adaptive_figure(out / "fig7.png", b.cells, record["run_rows"], record["target"], plt)
    answers = {"rules_fixed": bv.BEYOND_RULES_FIXED_UTC, "not_exercised": b.skipped,
               "remedies": {m: answers_of(j) for m, j in judged.items()}, "filter": {}, "sweep": {}}
    sections = (_filtering_md(out, b, plt, answers["filter"]) if record["filtering"] else "") + \
        (_sweep_md(out, b, plt, answers["sweep"]) if record["batch_sweep"] else "")
    first = md_table(["question", "answer (the paper's clock)", "the comparison it rests on"], bv.brief_rows(answers))
    text = fill("beyond.md", **_fields(b, judged), time_table=_time_tables(out, b), answers_table=first)
    (out / "REPORT.md").write_text(text + sections)
    (out / "answers.json").write_text(json.dumps(answers, indent=1) + "\n")
    return []


# what a beyond report writes only where its study ran that part (adaptive's growing batch, the
# filter, the batch sweep); removed before each rendering, so that a folder rendered into before,
# for a study that ran them, keeps none that this report does not describe
OPTIONAL_OUTPUTS = ("fig7.png", "fig8.png", "filtering.json", "fig9.png", "batch_sweep.json")
# the filter tool's own figures, copied in by the study's run (not drawn from the record): removed
# only where the record holds no filtering
FILTER_TOOL_FIGURES = ("filter.embedding.png", "filter.dropped.png")


def answers_of(judged: dict) -> dict:
    """A question's comparisons as answers.json keeps them: {key: {"passes" or clock: {verdict,
    ratio, prob_shorter, p_shorter_holm, p_longer_holm}}, with the break-even}."""
    keep = ("verdict", "ratio", "prob_shorter", "p_shorter_holm", "p_longer_holm")
    out = {}
    for key in judged["passes"]:
        out[str(key)] = {k: {f: _finite(judged[k][key].get(f)) for f in keep}
                         for k in ("passes", *(c.name for c in clocks.JUDGED if c.name in judged))}
        if "break_even" in judged:
            out[str(key)]["break_even"] = judged["break_even"][key]
    return out


def _finite(x):
    """JSON has no inf: a ratio with a miss at its median is written as a string."""
    return str(x) if isinstance(x, float) and math.isinf(x) else x


def _time_tables(out: Path, b: Beyond) -> str:
    """Passes to target, and time to target under the paper's clock with the efficiency, per mode
    and N: written as time_to_target.md/.csv, returned as markdown."""
    workers, modes = b.study.workers, b.modes
    passes, paper = timed_under(b.every, bv.PASSES, b.base), timed_under(b.every, b.clocks["paper"], b.base)
    eff = efficiency_table(paper, modes, workers)
    row = {n: [n] for n in workers}
    for n in workers:
        row[n] += [time_range(passes, m, n) or "not run" for m in modes]
        row[n] += [f"{time_range(paper, m, n)} ({fmt(eff[m][n], 0)})" if cells_at(paper, m, n) else "not run"
                   for m in modes]
    head = ["N"] + [f"{m}: passes" for m in modes] + [f"{m}: s (eff %)" for m in modes]
    write_csv(out / "time_to_target.csv", ["N"] + [f"{m} {k}" for m in modes for k in ("passes", "time_s", "efficiency")],
              [[n] + [v for m in modes for v in (time_range(passes, m, n), time_range(paper, m, n), fmt(eff[m][n]))]
               for n in workers])
    table = md_table(head, [row[n] for n in workers])
    (out / "time_to_target.md").write_text(
        "Passes to target and time to target under the paper's clock (passes x s/pass), median (range) over seeds, "
        "with the efficiency T1 / (N TN) on the medians.\n\n" + table)
    return table


def _fields(b: Beyond, judged: dict) -> dict:
    """The fields of templates/beyond.md but the time table."""
    r, cfg, p, env = b.record, b.cfg, b.record["provenance"], b.record["environment"]
    host = b.clocks["host"].clock
    s, rho = clocks.fit_table1(PAPER_TABLE1)
    steps1 = rules.steps_per_epoch(r["n_train"], policies.plan(policies.SEQUENTIAL, 1, cfg.batch_size),
                                   cfg.epoch_definition)
    fail_rows = [[m, n, sd, st, ep, fmt(v, 6)] for m, n, sd, st, ep, v in failures(b.every)]
    # the seeds the record's sequential runs used (a preset of another version may pick others)
    seq = sorted({c["seed"] for c in r["cells"] if c["mode"] == policies.SEQUENTIAL})
    return {
        "name": r["preset"], "when": p["generated"], "revision": p["revision"],
        "env": env, "study": b.study, "provenance": cost_line(p, "the filter's and the batch sweep's runs"),
        "rules_fixed": bv.BEYOND_RULES_FIXED_UTC, "rules_summary": bv.RULES_SUMMARY, "strong_seeds": seq,
        "edge_seeds_among_strong": bool(set(seq) & set(b.study.edge_seeds)), "answer": _answer(b, judged),
        "batch": cfg.batch_size, "theta": f"{cfg.adaptive_theta:g}", "local_steps": cfg.local_steps,
        "eta": f"{r['eta']:.6g}", "target": f"{r['target']:.6g}",
        "target_source": target_source(r, b.study.calibration_epochs), "max_epochs": r["cap"],
        "earlier_note": without_machine_paths(r["earlier"]["note"]), "step_fixed_ms": f"{host.step_fixed_s * 1e3:.2f}",
        "per_sample_ms": f"{host.per_sample_s * 1e3:.3f}", "allreduce": describe_allreduce(r["timing"]),
        "serial_share": f"{s:.3f}", "paper_rho": f"{rho:.3f}", "host_rho": f"{host.rho:.3f}",
        "local_allreduce_size": f"{policies.get('local').allreduce_size:g}", "steps1": steps1, "n_train": r["n_train"],
        "epoch_definition": cfg.epoch_definition,
        "communication_table": md_table(["mode", "N", "passes to target (per seed)", "epochs to target (per seed)",
                                         "allreduces / epoch", "global batches"], _communication_rows(b)),
        "failures_table": md_table(["mode", "N", "seed", "status", "epochs run", "last val_loss"], fail_rows)
        if fail_rows else "none",
        "against_n_caption": against_n.against_n_caption(b.every, b.modes), "skipped": b.skipped,
        "grows_batch": any(policies.get(m).grows_batch for m in b.modes),
    }


def _communication_rows(b: Beyond) -> list:
    """Per mode shown and N > 1: passes and epochs to target per seed, allreduces per epoch and
    the global batches used (what the runs did, for a policy whose epochs vary)."""
    rows = []
    for m in b.modes:
        for n in [n for n in b.study.workers if n > 1]:
            cs = sorted(cells_at(b.every, m, n), key=lambda c: c.seed)
            if not cs:
                continue
            if policies.get(m).varies_by_epoch:
                metrics = [row for c in cs for row in b.record["run_rows"].get(c.run, [])]
                per_epoch = statistics.median(row["allreduces"] for row in metrics) if metrics else math.nan
                batches = sorted({row["global_batch"] for row in metrics})
            else:                           # fixed by the policy (strong is read off the sequential run)
                plan = policies.plan(m, n, b.cfg.batch_size)
                per_epoch, batches = rules.steps_per_epoch(b.record["n_train"], plan, b.cfg.epoch_definition), \
                    [plan.global_batch]
            passes = ", ".join(f"{v:.4g}" if math.isfinite(v) else "-" for v in bv.values(cs, bv.PASSES, b.base))
            rows.append([m, n, passes, epochs_listing(b.every, m, n), f"{per_epoch:.0f}", ", ".join(map(str, batches))])
    return rows


# ------------------------------------------------------------------------------------
# the answers, as the rules give them
# ------------------------------------------------------------------------------------
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
        row = [label(key), f"{p['n_a']} / {p['n_b']}", verdict_cell(p)] + [verdict_cell(judged[k][key]) for k, _ in shown]
        row += [judged["break_even"][key]] if "break_even" in judged else []
        rows.append(row + [more_cell(judged[shown[0][0]][key])])
    whys = sorted({r["why"] for k in ["passes"] + [k for k, _ in shown] for r in judged[k].values() if r.get("why")})
    return (md_table(head + [f"more seeds that could call it ({shown[0][1]})"], rows)
            + f"\nratio: the Hodges-Lehmann estimate of {a} / the other; P: P({a} shorter); p: Holm-adjusted one-sided "
              f"p of '{a} shorter' / '{a} longer'." + "".join(f"\nToo few seeds: {w}." for w in whys) + "\n")


def _by_n(rows: dict) -> str:
    return "; ".join(f"N = {n}: {r['verdict']}" for n, r in rows.items())


def _answer(b: Beyond, judged: dict) -> str:
    """Does a remedy reach the target measurably sooner than strong scaling? The verdict under
    the paper's clock, the passes first, the other clocks and each comparison's table beside it."""
    parts = [f"{m}: not exercised: {why}. It is left out of every table, figure and answer below."
             for m, why in b.skipped.items()]
    if not judged:
        return " ".join(parts + ["No remedy was exercised: nothing to compare with strong scaling."])
    won = [f"{m} at N = {n}" for m, j in judged.items() for n, r in j["paper"].items() if r["verdict"] == bv.SHORTER]
    calls = [r["verdict"] for j in judged.values() for r in j["paper"].values()]
    head = ("Yes: " + ", ".join(won) + " reached the target measurably sooner than strong scaling under the paper's "
            "clock." if won else
            "No answer: too few seeds to call any comparison with strong scaling under the paper's clock."
            if all(c in (bv.TOO_FEW, bv.NEITHER) for c in calls) else
            "No: no remedy reached the target measurably sooner than strong scaling under the paper's clock at any N.")
    lines = [head]
    for m, j in judged.items():
        lines.append(f"{m} against strong scaling, on passes: {_by_n(j['passes'])}. Under the paper's clock: "
                     f"{_by_n(j['paper'])}; this host's: {_by_n(j['host'])}; one device per worker: {_by_n(j['device'])}.")
    text = " ".join(lines) + "\n\n" + " ".join(parts)
    return text.rstrip() + "\n\n" + "\n".join(comparison_table(j, lambda n, m=m: f"{m} vs strong, N = {n}", m)
                                              for m, j in judged.items())


# ------------------------------------------------------------------------------------
# the data filter and the batch sweep
# ------------------------------------------------------------------------------------
def _filter_groups(b: Beyond) -> list:
    """[(mode, N, {data: (cells, TimeBase)})]: each data set with its own training-set size."""
    f = b.record["filtering"]
    facts, cells = f["filter"], bv.filter_cells(f["rows"])
    filtered = facts.get("n_train_before", b.base.n_train) - facts.get("n_dropped", 0)
    size = {"full": b.base.n_train, "network": filtered, "random": filtered}
    out = []
    for mode, n in dict.fromkeys((c.mode, c.n) for _, c in cells):
        by_data = {d: ([c for dd, c in cells if dd == d and (c.mode, c.n) == (mode, n)],
                       dataclasses.replace(b.base, n_train=size[d])) for d in against_n.DATA_STYLE}
        out.append((mode, n, {d: v for d, v in by_data.items() if v[0]}))
    return out


def _medians(cells: list, clock, base, digits: int = 1) -> str:
    med = median_time(bv.values(cells, clock, base))
    return "not every seed reached" if med is None else f"{med:.{digits}f}"


def _filtering_md(out: Path, b: Beyond, plt, answers: dict) -> str:
    filtering, groups, paper = b.record["filtering"], _filter_groups(b), b.clocks["paper"]
    facts = filtering["filter"]
    (out / "filtering.json").write_text(without_machine_paths(json.dumps({"filter": facts, "runs": filtering["rows"]},
                                                                         indent=2)))
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
    table = md_table(["mode", "N", "data", "training cubes", "passes to target (per seed)", "passes, median",
                      "time to target (s, the paper's clock), median"], rows)
    return fill("filtering.md", helped=helped, judged=judged, pca=facts.get("pca_components"),
                perplexity=facts.get("tsne_perplexity"), min_samples=facts.get("dbscan_min_samples"),
                eps=f"{float(facts.get('dbscan_eps', float('nan'))):.4g}", clusters=facts.get("clusters"),
                n_dropped=facts.get("n_dropped"), n_before=facts.get("n_train_before"),
                target=f"{b.record['target']:.6g}", table=table, comparisons="\n".join(tables))


def _sweep_md(out: Path, b: Beyond, plt, answers: dict) -> str:
    sweep, paper, host, batch = b.record["batch_sweep"], b.clocks["paper"], b.clocks["host"], b.cfg.batch_size
    (out / "batch_sweep.json").write_text(json.dumps(sweep, indent=2))
    by_rule = {rule: bv.sweep_cells(sweep, rule) for rule in dict.fromkeys(r["lr_rule"] for r in sweep)}
    against_n.sweep_figure(out / "fig9.png", by_rule, batch, paper, b.base, plt)
    rows, said, tables = [], [], []
    lr = {(r["lr_rule"], r["batch"]): r["lr"] for r in sweep}
    for rule, per_batch in by_rule.items():
        for size, cs in per_batch.items():
            listing = ", ".join(f"{v:.4g}" if math.isfinite(v) else f"- ({c.status}, {c.epochs})"
                                for c, v in zip(cs, bv.values(cs, bv.PASSES, b.base)))
            rows.append([size, rule, f"{lr[(rule, size)]:.4g}", len(cs), listing, _medians(cs, bv.PASSES, b.base),
                         _medians(cs, bv.at_batch(paper, size), b.base), _medians(cs, bv.at_batch(host, size), b.base)])
        j = bv.sweep(sweep, rule, batch, b.clocks, b.base)
        answers[rule] = answers_of(j)
        best = bv.shortest_median(sweep, rule, paper, b.base)
        named = (f"batch {best} has the shortest median time under the paper's clock (named, not tested)"
                 if best is not None else "no batch reached the target on every seed")
        calls = {v: [k for k, r in j["paper"].items() if r["verdict"] == v]
                 for v in (bv.SHORTER, bv.LONGER, bv.NO_DIFFERENCE, bv.TOO_FEW, bv.NEITHER)}
        said.append(f"{'At eta' if rule == 'eta' else 'With lr eta x b / ' + str(batch)} ({rule}): {named}; against "
                       f"batch {batch}, under the paper's clock: " + "; ".join(
                           f"{v}: {', '.join(map(str, ks))}" for v, ks in calls.items() if ks) + ".")
        tables.append(comparison_table(j, lambda k, rule=rule: f"{rule}: b = {k} vs {batch}", "b"))
    table = md_table(["global batch", "lr rule", "lr", "seeds", "passes to target (per seed)", "passes, median",
                      "s, the paper's clock, median", "s, this host's clock, median"], rows)
    return fill("batch_sweep.md", eta=f"{b.record['eta']:.6g}", batch=batch, target=f"{b.record['target']:.6g}",
                stopping=b.record.get("sweep_stopping"), answer=" ".join(said), table=table, comparisons="\n".join(tables),
                median=against_n.sweep_caption(by_rule))
