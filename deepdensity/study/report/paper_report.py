"""The default study's reports, rendered from its record (reports/study.json) alone: Tables
I-II, the figures (paper_figures.py), claims.json and REPORT.md (templates/report.md; its Claims
section claim_sections.py's), each next to the paper's. `render_reports(out, record)` is all
`make repro` and `deepdensity report --from` call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies, rules
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import clocks
from deepdensity.study.core.cells import MISSED, efficiency_table, failure_groups, failure_margins, failures
from deepdensity.study.core.preset import DOUBLE_ETA, Study
from deepdensity.study.core.protocol_text import PAPER_TABLE1, PAPER_TABLE2, protocol_table
from deepdensity.study.judge import claims as claim_rules
from deepdensity.study.judge.claims import cells_of, claims_of, clock_set, evidence_of, record_runner
from deepdensity.study.judge.contrasts import contrasts, warmup_holds_to
from deepdensity.study.plan import study_plan
from deepdensity.study.record import config_of, study_of, without_machine_paths
from deepdensity.study.report import two_looks
from deepdensity.study.report.claim_sections import claim_section
from deepdensity.study.report.paper_figures import draw_figures, fig2_caption
from deepdensity.study.report.render import (
    cells_at,
    cost_line,
    epochs_listing,
    fmt,
    md_table,
    passes_listing,
    target_source,
    time_range,
    wrap_prose,
    write_csv,
)
from deepdensity.study.report.report_checks import (
    clock_fields,
    host_latency,
    real_strong,
    rechecked,
    rules_when,
    where_runs_ran,
)
from deepdensity.utils.templates import fill

# The files render_reports writes; `deepdensity report --check` (rerender.py) compares exactly these.
TEXT_OUTPUTS = ("REPORT.md", "claims.json", "table1.md", "table1.csv", "table2.md", "table2.csv")


def render_reports(out: Path, record: dict, entries: Optional[list] = None) -> list:
    """Every report of the study under `out`, from `record` and the ledger's `entries` (where each
    run came from); returns the claims."""
    out.mkdir(parents=True, exist_ok=True)
    study, cfg, cells = study_of(record), config_of(record), cells_of(record)
    claims = claims_of(record, cells, record["seq_2eta"])
    tables = _tables(out, study, cells)
    drawn = draw_figures(out, record, study, cells)
    fields = {**_report_fields(record, study, cfg, cells, claims, tables), "drawn": drawn}
    fields["fig2_caption"] = fig2_caption(cells, study)
    fields["rules_when"] = rules_when(record, cells, entries or [])
    evidence = evidence_of(record, cells, MISSED)
    fields["contrasts_table"] = md_table(["contrast", "missed / runs", "estimate", "p"], contrasts(evidence))
    fields.update(
        warmup_holds_to=warmup_holds_to(evidence),
        stall_check=record.get("stall_check"),
        where_runs_ran=where_runs_ran(record, cells, entries or []),
        two_looks_stacks=two_looks.stacks_section(record, study, entries or []),
        REACHED=RunStatus.REACHED,
        PER_WORKER=rules.PER_WORKER,
    )
    (out / "REPORT.md").write_text(wrap_prose(fill("report.md", **fields)))
    (out / "claims.json").write_text(json.dumps(claims, indent=2) + "\n")
    return claims


def _tables(out: Path, study: Study, cells: list) -> tuple:
    """Tables I and II written as .csv and .md; returns their markdown tables for REPORT.md."""
    workers = study.workers
    eff = efficiency_table(cells, study.modes, workers)
    clock = "measured" if record_runner(cells) else "modelled"
    head1 = [
        "N",
        "passes to target (per seed)",
        "epochs to target (per seed)",
        f"s / epoch ({clock})",
        f"time to target (s, {clock}), median (range)",
        "efficiency % (ours)",
        "efficiency % (paper)",
    ]
    strong_eff = eff.get(policies.STRONG, {})  # Table I is the paper's strong-scaling table
    rows1 = [
        [
            n,
            passes_listing(cells, policies.STRONG, n),
            epochs_listing(cells, policies.STRONG, n),
            fmt(cells_at(cells, policies.STRONG, n)[0].epoch_seconds),
            time_range(cells, policies.STRONG, n),
            fmt(strong_eff.get(n)),
            fmt(PAPER_TABLE1.get(n)),
        ]
        for n in workers
        if cells_at(cells, policies.STRONG, n)
    ]
    write_csv(out / "table1.csv", head1, rows1)
    table1 = md_table(head1, rows1)
    (out / "table1.md").write_text(
        "Table I: strong-scaling efficiency, T1 / (N TN), ours next to the paper's. "
        + _times_are(clock)
        + "\n\n"
        + table1
    )
    modes2 = [m for m in (policies.WEAK, policies.WARMUP, policies.LINEAR) if m in study.modes]
    head2 = ["N"] + [f"{m} {w}" for m in modes2 for w in ("(ours)", "(paper)")]
    rows2 = [
        [n]
        + [
            v
            for m in modes2
            for v in (fmt(eff[m][n]) if cells_at(cells, m, n) else "not run", fmt(PAPER_TABLE2[m].get(n)))
        ]
        for n in workers
    ]
    write_csv(out / "table2.csv", head2, rows2)
    table2 = md_table(head2, rows2)
    (out / "table2.md").write_text(
        "Table II: efficiency of weak scaling, warmup and the linear scaling rule, "
        "T1 / (N TN) on time to target; NaN where a seed missed the target. " + _times_are(clock) + "\n\n" + table2
    )
    return table1, table2


def _times_are(clock: str) -> str:
    if clock == "measured":
        return "Times are the real runs' own clocks."
    return (
        "Times are modelled: passes to target x the seconds of a pass on this host's calibrated clock "
        "(REPORT.md, 'The clock'), each worker its own device; not wall time."
    )


def _report_fields(record: dict, study: Study, cfg, cells: list, claims: list, tables: tuple) -> dict:
    """The fields of templates/report.md; `tables` are Tables I and II in markdown."""
    return {
        **_header_fields(record, claims),
        **_rules_fields(record, study),
        **_settings_fields(record, study, cfg),
        **clock_fields(record, cfg),
        **_result_fields(record, study, cells, tables),
    }


def _header_fields(record: dict, claims: list) -> dict:
    p, env = record["provenance"], record["environment"]
    isa, stack = record.get("isa_check"), record.get("stack_check")  # a seed run again, or None
    others = [c for c in clocks.JUDGED if c.name != clocks.PAPER]
    study = study_of(record)
    looked = two_looks.has_second_look(record, study)
    first = two_looks.first_look_verdicts(record, study) if looked else {}
    still = two_looks.still_open(record, study) if looked else {}
    claims_md = "\n".join(
        claim_section(c, others, first.get(c["key"], ""), tuple(still.get(c["key"], ()))) for c in claims
    )
    answers = md_table(
        ["claim", "paper", "ours", *(["first look"] if looked else []), "verdict", "the number it rests on"],
        [
            [
                c["claim"],
                c["paper"],
                c["ours_brief"],
                *([first.get(c["key"], "-")] if looked else []),
                f"**{c['verdict']}**",
                c["deciding"],
            ]
            for c in claims
        ],
    )
    return {
        "answers_table": answers,
        "interim": _interim(p),
        "name": record["preset"],
        "runner": without_machine_paths(record["runner"] or ""),
        "when": p["generated"],
        "command": without_machine_paths(p["command"]),
        "revision": p["revision"],
        "env": env,
        "provenance": cost_line(p, "the stall and instruction-set checks"),
        "claims_table": claims_md,
        "protocol_table": _protocol(record),
        "isa_check": isa,
        "stack_check": stack,
        "isa_again": isa and rechecked(record, claims, isa, f"under {isa['isa']}"),
        "stack_again": stack and rechecked(record, claims, stack, f"on TF {stack['stack'].split()[1].rstrip(',')}"),
    }


def _interim(provenance: dict) -> bool:
    """Was the record rendered from the ledger alone (repro --no-train), a study in progress?"""
    return str(provenance.get("more_seeds_stopped_at", "")).startswith("--no-train")


def _protocol(record: dict) -> str:
    return protocol_table(
        study_of(record),
        config_of(record),
        record["n_train"],
        record["n_val"],
        record["target"],
        record["cap"],
        record["eta"],
        record["lr_search"],
        record["runner"],
    )


def _seeds_short(record: dict, study: Study) -> str:
    """The trained cells below the preset's seeds, each with its missing seeds, and what they
    would cost here: passes (study_plan.passes_to_expect of the cell's runs, else its mode's at the
    largest N below, as the plan counts them) at a one-process pass of this host's clock ('' when
    every cell has its seeds)."""
    want = len(study.seeds)  # the design's seeds, as the claims count them
    runs = {}
    for c in record["cells"]:
        if c["n"] > 1 and c["run"].startswith(f"{c['mode']}-n"):
            runs.setdefault((c["mode"], c["n"]), []).append(c)
    for r in record.get("seq_2eta") or []:
        runs.setdefault((DOUBLE_ETA, 1), []).append({**r, "n": 1})
    cells = study.trained_cells() + ([(DOUBLE_ETA, 1)] if study.doubles_eta() else [])
    short = [(m, n, want - len(runs.get((m, n), []))) for m, n in cells if len(runs.get((m, n), [])) < want]
    if not short:
        return ""

    def passes(mode: str, n: int) -> int:
        return study_plan.passes_to_expect([c["epochs"] for c in study_plan.runs_like(runs, mode, n)], n, record["cap"])

    pass_s = record.get("pass_seconds")  # the median seconds a pass of its runs, side by side
    total = sum(k * passes(m, n) for m, n, k in short)
    parallel = record["provenance"]["parallel_runs"]
    cost = (
        f"about {total:.0f} passes, {study_plan.hours_here([(total, pass_s)], parallel):.1f} h here at "
        f"{pass_s:.2f} s a pass (this study's runs' own clocks), {parallel} at a time"
        if pass_s
        else f"about {total:.0f} passes"
    )
    listing = "; ".join(
        f"{'2 x eta' if m == DOUBLE_ETA else f'{m} N = {n}'}: {want - k} of {want} seeds run" for m, n, k in short
    )
    return (
        f". Cells below the design's {want} seeds, which `make repro` adds from where the ledger stops ({cost}): "
        f"{listing}. A claim that they could still change says so in its section"
    )


def _seeds_and_why(reasons: list) -> list:
    """ "seed S: why" for each of `reasons` ({"seed", "why"}, in seed order), consecutive seeds
    with the same reason as one "seeds A-B: why": a second look's 16 seeds are one entry."""
    spans = []  # [first seed, last seed, why]
    for r in reasons:
        if spans and spans[-1][2] == r["why"] and r["seed"] == spans[-1][1] + 1:
            spans[-1][1] = r["seed"]
        else:
            spans.append([r["seed"], r["seed"], r["why"]])
    return [f"seed {a}: {why}" if a == b else f"seeds {a}-{b}: {why}" for a, b, why in spans]


def _rules_fields(record: dict, study: Study) -> dict:
    by_unit = {}
    for r in record["seed_reasons"]:
        by_unit.setdefault(r["unit"], []).append(r)
    rows = [
        [
            _unit_label(u),
            ", ".join(str(r["seed"]) for r in rs),
            "; ".join(_seeds_and_why([r for r in rs if r["why"] != "first seeds of the preset"])) or "-",
        ]
        for u, rs in by_unit.items()
    ]
    clock = clock_set(record)
    clocks_line = (
        f"clocks: every time claim is judged under the paper's clock (its cluster fitted to Table I: "
        f"serial share s = {clocks.fit_table1(PAPER_TABLE1)[0]:.3g}, communication rho = "
        f"{clock['paper'].rho:.3g}), this host's (rho = {clock['host'].rho:.3g}{host_latency(clock['host'])}) "
        f"and one device per "
        f"worker with free communication (rho = 0); rho is an allreduce's seconds per doubling of N "
        f"over one worker's step at the base batch; the break-even is the rho at which a verdict "
        f"changes (searched from {clocks.RHO_GRID[0]:g} to {clocks.RHO_GRID[-1]:g})"
    )
    return {
        "rules": claim_rules.RULES + [("clocks", clocks_line[len("clocks: ") :])],
        "study": study,
        "stopped": record["provenance"]["more_seeds_stopped_at"] + _seeds_short(record, study),
        "seeds_table": md_table(["cell", "seeds", "why the seeds after the first set"], rows),
    }


def _unit_label(unit: str) -> str:
    if unit == policies.SEQUENTIAL:
        return "sequential runs (strong scaling at every N, N = 1 of every mode)"
    if unit == DOUBLE_ETA:
        return "sequential runs at 2 x eta"
    mode, n = unit.split()
    return f"{mode} N = {n}"


def _settings_fields(record: dict, study: Study, cfg) -> dict:
    return {
        "n_train": record["n_train"],
        "n_val": record["n_val"],
        "cfg": cfg,
        "env": record["environment"],
        "target": f"{record['target']:.6g}",
        "target_source": target_source(record, study.calibration_epochs),
        "real_strong": real_strong(record),
        "max_epochs": record["cap"],
        "collapse_loss": record["collapse_loss"],
        "eta": record["eta"],
        "lr_search": record["lr_search"],
        "parallel_runs": record["provenance"]["parallel_runs"],
    }


def _result_fields(record: dict, study: Study, cells: list, tables: tuple) -> dict:
    workers = study.workers
    conv_rows = [[m, n, epochs_listing(cells, m, n, short=True) or "not run"] for m in study.modes for n in workers]
    fail_rows = [[m, n, s, st, ep, fmt(v, 6)] for m, n, s, st, ep, v in failures(cells)]
    groups = failure_groups(cells, record["seq_2eta"], record["settings"]["batch_size"])
    eta = record["eta"]
    collapse = md_table(
        ["global batch", "(peak) lr", "schedule", "modes", "runs", "missed the target", "share"],
        [
            [b, f"{lr:g} x eta = {lr * eta:.4g}", sched, ", ".join(modes), runs, missed, f"{missed / runs:.0%}"]
            for b, lr, sched, modes, runs, missed in groups
        ],
    )
    return {
        "table1": tables[0],
        "table2": tables[1],
        "convergence_table": md_table(["mode", "N", "epochs to target per seed"], conv_rows),
        "target_6": fmt(record["target"], 6),
        "collapse_6": fmt(record["collapse_loss"], 6),
        "failures_table": md_table(["mode", "N", "seed", "status", "epochs run", "last val_loss"], fail_rows)
        if fail_rows
        else "none\n",
        "batch": record["settings"]["batch_size"],
        "collapse_table": collapse,
        "by_batch": failure_margins(groups, 0),
        "by_lr": failure_margins(groups, 1),
    }
