"""The `beyond` study's reports: local SGD (and adaptive batches, when exercised) against strong
scaling with the paper's four modes beside them, the data filter and the batch sweep, each
answer by the rules of docs/beyond.md (beyond_answers.py); rendered from the study's record
(study.json, record.beyond_keys, read by beyond_read.py) alone, with templates/beyond.md, the
filter's and the sweep's sections (beyond_filter_sweep.py) and the figures of against_n.py."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies, rules
from deepdensity.study.core import clocks
from deepdensity.study.core.cells import efficiency_table, failures, timed_under
from deepdensity.study.core.clocks import describe_allreduce
from deepdensity.study.core.protocol_text import PAPER_TABLE1
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.record import without_machine_paths
from deepdensity.study.report import against_n
from deepdensity.study.report.beyond_answers import answers_of, remedies_answer
from deepdensity.study.report.beyond_filter_sweep import filtering_md, sweep_md
from deepdensity.study.report.beyond_read import Beyond, read
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

# The text files render_reports writes; `deepdensity report --check` compares exactly these.
TEXT_OUTPUTS = (
    "REPORT.md",
    "answers.json",
    "time_to_target.md",
    "time_to_target.csv",
    "filtering.json",
    "batch_sweep.json",
)


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
    answers = {
        "rules_fixed": bv.BEYOND_RULES_FIXED_UTC,
        "not_exercised": b.skipped,
        "remedies": {m: answers_of(j) for m, j in judged.items()},
        "filter": {},
        "sweep": {},
    }
    sections = (filtering_md(out, b, plt, answers["filter"]) if record["filtering"] else "") + (
        sweep_md(out, b, plt, answers["sweep"]) if record["batch_sweep"] else ""
    )
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


def _time_tables(out: Path, b: Beyond) -> str:
    """Passes to target, and time to target under the paper's clock with the efficiency, per mode
    and N: written as time_to_target.md/.csv, returned as markdown."""
    workers, modes = b.study.workers, b.modes
    passes, paper = timed_under(b.every, bv.PASSES, b.base), timed_under(b.every, b.clocks["paper"], b.base)
    eff = efficiency_table(paper, modes, workers)
    row = {n: [n] for n in workers}
    for n in workers:
        row[n] += [time_range(passes, m, n) or "not run" for m in modes]
        row[n] += [
            f"{time_range(paper, m, n)} ({fmt(eff[m][n], 0)})" if cells_at(paper, m, n) else "not run" for m in modes
        ]
    head = ["N"] + [f"{m}: passes" for m in modes] + [f"{m}: s (eff %)" for m in modes]
    write_csv(
        out / "time_to_target.csv",
        ["N"] + [f"{m} {k}" for m in modes for k in ("passes", "time_s", "efficiency")],
        [
            [n] + [v for m in modes for v in (time_range(passes, m, n), time_range(paper, m, n), fmt(eff[m][n]))]
            for n in workers
        ],
    )
    table = md_table(head, [row[n] for n in workers])
    (out / "time_to_target.md").write_text(
        "Passes to target and time to target under the paper's clock (passes x s/pass), median (range) over seeds, "
        "with the efficiency T1 / (N TN) on the medians.\n\n" + table
    )
    return table


def _fields(b: Beyond, judged: dict) -> dict:
    """The fields of templates/beyond.md but the time table."""
    r, cfg, p, env = b.record, b.cfg, b.record["provenance"], b.record["environment"]
    steps1 = rules.steps_per_epoch(
        r["n_train"], policies.plan(policies.SEQUENTIAL, 1, cfg.batch_size), cfg.epoch_definition
    )
    fail_rows = [[m, n, sd, st, ep, fmt(v, 6)] for m, n, sd, st, ep, v in failures(b.every)]
    # the seeds the record's sequential runs used (a preset of another version may pick others)
    seq = sorted({c["seed"] for c in r["cells"] if c["mode"] == policies.SEQUENTIAL})
    return {
        "name": r["preset"],
        "when": p["generated"],
        "revision": p["revision"],
        "env": env,
        "study": b.study,
        "provenance": cost_line(p, "the filter's and the batch sweep's runs"),
        "rules_fixed": bv.BEYOND_RULES_FIXED_UTC,
        "rules_summary": bv.RULES_SUMMARY,
        "strong_seeds": seq,
        "edge_seeds_among_strong": bool(set(seq) & set(b.study.edge_seeds)),
        "answer": remedies_answer(b, judged),
        "batch": cfg.batch_size,
        "theta": f"{cfg.adaptive_theta:g}",
        "local_steps": cfg.local_steps,
        "eta": f"{r['eta']:.6g}",
        "target": f"{r['target']:.6g}",
        "target_source": target_source(r, b.study.calibration_epochs),
        "max_epochs": r["cap"],
        "earlier_note": without_machine_paths(r["earlier"]["note"]),
        **_clock_fields(b),
        "steps1": steps1,
        "n_train": r["n_train"],
        "epoch_definition": cfg.epoch_definition,
        "communication_table": md_table(
            [
                "mode",
                "N",
                "passes to target (per seed)",
                "epochs to target (per seed)",
                "allreduces / epoch",
                "global batches",
            ],
            _communication_rows(b),
        ),
        "failures_table": md_table(["mode", "N", "seed", "status", "epochs run", "last val_loss"], fail_rows)
        if fail_rows
        else "none",
        "against_n_caption": against_n.against_n_caption(b.every, b.modes),
        "skipped": b.skipped,
        "grows_batch": any(policies.get(m).grows_batch for m in b.modes),
    }


def _clock_fields(b: Beyond) -> dict:
    """The fields of templates/beyond.md's clocks: this host's (its step, its allreduce), the
    paper's fitted to Table I, and how many gradient allreduces one of local SGD's counts as."""
    host = b.clocks["host"].clock
    s, rho = clocks.fit_table1(PAPER_TABLE1)
    return {
        "step_fixed_ms": f"{host.step_fixed_s * 1e3:.2f}",
        "per_sample_ms": f"{host.per_sample_s * 1e3:.3f}",
        "allreduce": describe_allreduce(b.record["timing"]),
        "serial_share": f"{s:.3f}",
        "paper_rho": f"{rho:.3f}",
        "host_rho": f"{host.rho:.3f}",
        "local_allreduce_size": f"{policies.get('local').allreduce_size:g}",
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
            else:  # fixed by the policy (strong is read off the sequential run)
                plan = policies.plan(m, n, b.cfg.batch_size)
                per_epoch, batches = (
                    rules.steps_per_epoch(b.record["n_train"], plan, b.cfg.epoch_definition),
                    [plan.global_batch],
                )
            passes = ", ".join(f"{v:.4g}" if math.isfinite(v) else "-" for v in bv.values(cs, bv.PASSES, b.base))
            rows.append([m, n, passes, epochs_listing(b.every, m, n), f"{per_epoch:.0f}", ", ".join(map(str, batches))])
    return rows
