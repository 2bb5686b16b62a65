"""The checks REPORT.md states beside its claims: when the rules were fixed against when the runs
were trained (`rules_when`), where the runs were trained (`where_runs_ran`), whether the verdicts
hold under another instruction set or stack (`rechecked`; templates/report.md says what was
checked), and strong scaling run for real beside its derivation from the sequential run
(`real_strong`); each from the record and the ledger's entries. And REPORT.md's section on the
clock (`clock_fields`, `host_latency`)."""

from __future__ import annotations

import statistics

from deepdensity.scaling import policies
from deepdensity.study.core import clocks, ledger
from deepdensity.study.core.cells import outcome
from deepdensity.study.core.clocks import clock_controller, describe_allreduce, model_epoch, shared_host_epoch
from deepdensity.study.core.protocol_text import DECISION_RULES_FIXED_UTC, SEQUENTIAL_PROOF, time_phrase
from deepdensity.study.judge.claims import cells_of, claims_of
from deepdensity.study.report.render import fmt, md_table


def _entries_of_cells(record: dict, cells: list, entries: list) -> dict:
    """{run name: the ledger entry of that run}: the entries of this study's eta that were finished
    by the time the record was made, of those with the cell's outcome the last (the record's own
    run where an earlier study had trained the same one)."""
    mine = [
        e
        for e in entries
        if e["config"].get("base_lr") in (record["eta"], 2 * record["eta"])
        and e["finished"] <= record["provenance"]["generated"]
    ]
    found = {}
    for c in cells:
        named = [e for e in mine if e["run"] == c.run and e["seed"] == c.seed]
        same = [e for e in named if (e["result"]["status"], e["result"]["epochs"]) == (c.status, c.epochs)]
        if same or named:
            found[c.run] = max(same or named, key=lambda e: e["finished"])
    return found


def rules_when(record: dict, cells: list, entries: list) -> str:
    """When the rules were fixed against when this report's runs were trained (the ledger's
    entries of its cells); without a ledger, against when the record was made."""
    fixed, made = DECISION_RULES_FIXED_UTC, record["provenance"]["generated"]
    found = _entries_of_cells(record, cells, entries)
    if not found:
        when = "after this record was made" if made < fixed else "before this record was made"
        return (
            f"which were fixed on {fixed} (docs/decision-rules.md), {when} ({made}; no ledger beside it tells "
            f"when each run was trained)"
        )
    before = sum(e["finished"] < fixed for e in found.values())
    unknown = len({c.run for c in cells}) - len(found)
    return (
        f"which were fixed on {fixed} (docs/decision-rules.md): of the {len(found) + unknown} runs behind these "
        f"cells, {len(found) - before} were trained after that and {before} before it (runs of earlier studies "
        f"reused from the ledger, which the rules' authors had seen)"
        + (f"; {unknown} are not in the ledger beside this record" if unknown else "")
    )


def where_runs_ran(record: dict, cells: list, entries: list) -> str:
    """Which machines, instruction sets and revisions trained the runs behind the cells (the ledger)."""
    found = _entries_of_cells(record, cells, entries)
    if not found:
        return "Where each run was trained: no ledger beside this record names it."
    counts, unrecorded = {}, False
    for e in found.values():
        tf, keras, recorded = ledger.stack_of(e)
        unrecorded |= not recorded
        star = "" if recorded else "*"
        key = (
            e["machine"].get("cpu") or "?",
            e["machine"].get("onednn_isa") or "?",
            tf + star,
            keras + star,
            e["revision"],
            e["source"],
        )
        counts[key] = counts.get(key, 0) + 1
    rows = [[*key, n] for key, n in sorted(counts.items())]
    missing = len({c.run for c in cells}) - len(found)
    return (
        "Where the runs behind these cells were trained (the ledger beside this report):\n\n"
        + md_table(["CPU", "oneDNN ISA", "TensorFlow", "Keras", "revision", "how it reached the ledger", "runs"], rows)
        + (
            "\n\\* Not recorded in the ledger then: every revision of the project before it recorded them installed "
            "TensorFlow 2.15.1, whose tf.keras is keras 2.15.0 (setup.py's pin).\n"
            if unrecorded
            else ""
        )
        + (f"\n{missing} run(s) are not in the ledger beside this record.\n" if missing else "")
    )


def rechecked(record: dict, claims: list, check: dict, how: str) -> dict:
    """What a check that ran one seed again (under another instruction set, on another stack) found:
    how the re-run cells' outcomes compare with the study's, and every claim judged again."""
    return {
        "outcomes": _rerun_outcomes(record["cells"], check, record["collapse_loss"]),
        "verdicts": _verdicts_again(record, claims, check, how),
    }


def _verdicts_again(record: dict, claims: list, check: dict, how: str) -> str:
    """Every claim's verdicts (both clocks) against the same claim judged with a check's runs."""
    seed = check["seed"]
    again = {a["key"]: a for a in claims_of(record, cells_of({**record, "cells": check["cells"]}), check["seq_2eta"])}
    rows = [
        [
            c["claim"],
            c["verdict"],
            a["verdict"],
            c["verdicts"][clocks.HOST],
            a["verdicts"][clocks.HOST],
            "the same"
            if (c["verdict"], c["verdicts"][clocks.HOST]) == (a["verdict"], a["verdicts"][clocks.HOST])
            else "**changed**",
        ]
        for c, a in ((c, again[c["key"]]) for c in claims)
    ]
    return md_table(
        [
            "claim",
            "verdict (paper's clock)",
            f"with seed {seed} {how}",
            "this host's clock",
            f"with seed {seed} {how}",
            "verdicts",
        ],
        rows,
    )


def _rerun_outcomes(cells: list, check: dict, collapse_loss: float) -> str:
    """How the re-run cells compare with the originals: outcomes and passes to target."""

    def rerun(c: dict) -> bool:  # the seed the check re-ran in this cell
        sequential = c["n"] == 1 or c["mode"] not in policies.names() or policies.get(c["mode"]).follows_sequential_path
        return c["seed"] == (check.get("sequential_seed", check["seed"]) if sequential else check["seed"])

    before = {(c["mode"], c["n"]): c for c in cells if rerun(c)}
    pairs = [(before[(c["mode"], c["n"])], c) for c in check["cells"] if rerun(c) and (c["mode"], c["n"]) in before]
    outcome_of = lambda c: outcome(c["status"], c.get("final_val_loss"), collapse_loss)  # noqa: E731
    same = sum(outcome_of(a) == outcome_of(b) for a, b in pairs)
    moved = [
        abs(a["passes_to_target"] - b["passes_to_target"])
        for a, b in pairs
        if a.get("passes_to_target") is not None and b.get("passes_to_target") is not None
    ]
    return (
        f"{same} of {len(pairs)} cells had the same outcome (reached, slow or failed)"
        + (
            f"; passes to target moved by {max(moved):.3g} at the most (median {statistics.median(moved):.3g})"
            if moved
            else ""
        )
        + "."
    )


def _margin(record: dict, seed: int, real: float, sequential: float) -> str:
    """How near the target the sequential run was where the two part (its per-pass losses are
    the record's curve of seq-sSEED); '' where the record does not have them."""
    losses = (record.get("curves") or {}).get(f"seq-s{seed}", {}).get("val_loss") or []
    at = int(min(real, sequential))
    if real != int(real) or sequential != int(sequential) or not 0 < at <= len(losses) or losses[at - 1] is None:
        return ""
    gap = losses[at - 1] / record["target"] - 1
    return (
        f"; at pass {at} the sequential run was {gap:+.2%} from the target"
        if real < sequential
        else f"; the sequential run crossed it at pass {at} by {-gap:.2%}"
    )


def real_strong(record: dict) -> str:
    """The section on strong scaling run for real beside its derivation."""
    rows = record.get("real_strong") or []
    if not rows:
        return f"Not run: the preset lists no `real_strong` N. {SEQUENTIAL_PROOF[0].upper()}{SEQUENTIAL_PROOF[1:]}."

    def same(r) -> str:
        a, b = r["passes_to_target"], r["sequential_passes"]
        if a is None or b is None:
            return "-"
        return (
            "the same"
            if a == b
            else (
                f"{a - b:+g} passes: the workers' part gradients are summed in another "
                f"order (allreduce), rounding the training amplifies" + _margin(record, r["seed"], a, b)
            )
        )

    table = md_table(
        [
            "N",
            "status",
            "epochs",
            "passes to target",
            "the sequential run's",
            "difference",
            "time to target (s, its own clock)",
            "controller (transport)",
        ],
        [
            [
                r["n"],
                r["status"],
                r["epochs"],
                fmt(r["passes_to_target"], 3, "-"),
                fmt(r["sequential_passes"], 3, "-"),
                same(r),
                fmt(r["time_to_target_s"], 1, "-"),
                _controller_cell(r),
            ]
            for r in rows
        ],
    )
    return (
        f"{SEQUENTIAL_PROOF[0].upper()}{SEQUENTIAL_PROOF[1:]}. Here strong scaling also ran for real, "
        f"`horovodrun -np N` on this host, seed {rows[0]['seed']}, validated every pass, one run at a time "
        f"after the others:\n\n{table}"
    )


def _controller_cell(row: dict) -> str:
    """A real run's controller and transport, as far as its record knows them."""
    if not row.get("controller"):
        return "not recorded"
    return f"{row['controller']} ({row['transport'] or 'transport not recorded'})"


def clock_fields(record: dict, cfg) -> dict:
    """The fields of REPORT.md's section on the clock (templates/clock.md): the parts of the model
    of an epoch as measured on this host, and its rows beside real strong-scaling epochs."""
    t, n_train, n_val = record["timing"], record["n_train"], record["n_val"]
    rows = ""
    for n, real in sorted(t["real_epoch_seconds"].items(), key=lambda kv: int(kv[0])):
        n = int(n)
        shared = shared_host_epoch(t, n, n_train, n_val, cfg.batch_size, cfg.epoch_definition)
        device = model_epoch(t, policies.STRONG, n, n_train, n_val, cfg.batch_size, cfg.epoch_definition)
        rows += f"| {n} | {real:.2f} | {shared:.2f} | {shared / real - 1:+.1%} | {device:.2f} |\n"
    rounds, ms = t["rounds"], lambda n, s: f"{s * 1e3:.2f}"  # noqa: E731
    return {
        "clock": t,
        "host": clocks.host_clock(t, cfg.batch_size),
        "time_phrase": time_phrase(cfg),
        "allreduce": describe_allreduce(t),
        "controller": clock_controller(t),
        "clock_rows": rows,
        "step_times": ", ".join(f"{b}: {s * 1e3:.1f}" for b, s in t["step_seconds"].items()),
        "n_weights": f"{t['n_weights']:,}",
        "shared_steps": _by_n(t["shared_step_seconds"], lambda n, s: f"{s * 1e3:.1f}"),
        "spread": _by_n(
            rounds[0]["real"],
            lambda n, _: f"{min(r['real'][n] for r in rounds):.2f}-{max(r['real'][n] for r in rounds):.2f}",
        ),
        "real_steps": _by_n(t["real_steps_seconds"], lambda n, s: f"{s:.2f} of {t['real_epoch_seconds'][n]:.2f}"),
        "allreduce_step": _by_n({n: s for n, s in t["allreduce_seconds"].items() if n != "1"}, ms),
        "allreduce_alone": _by_n(t["allreduce_alone_seconds"], ms),
    }


def _by_n(values: dict, say) -> str:
    """'N=1: ..., N=2: ...': `say(n, value)` for each N of a clock's figures, in N's order."""
    return ", ".join(f"N={n}: {say(n, v)}" for n, v in sorted(values.items(), key=lambda kv: int(kv[0])))


def host_latency(host: clocks.Clock) -> str:
    """', plus a latency of L ms an allreduce' for a host clock that has one (the paper's and
    one device per worker have none)."""
    return (
        f", plus a latency of {host.allreduce_latency_s * 1e3:.2f} ms an allreduce" if host.allreduce_latency_s else ""
    )
