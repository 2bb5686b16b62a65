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
    mine = [e for e in entries if e["config"].get("base_lr") in (record["eta"], 2 * record["eta"])
            and e["finished"] <= record["provenance"]["generated"]]
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
        return (f"which were fixed on {fixed} (docs/decision-rules.md), {when} ({made}; no ledger beside it tells "
                f"when each run was trained)")
    before = sum(e["finished"] < fixed for e in found.values())
    unknown = len({c.run for c in cells}) - len(found)
    return (f"which were fixed on {fixed} (docs/decision-rules.md): of the {len(found) + unknown} runs behind these "
            f"cells, {len(found) - before} were trained after that and {before} before it (runs of earlier studies "
            f"reused from the ledger, which the rules' authors had seen)"
            + (f"; {unknown} are not in the ledger beside this record" if unknown else ""))


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
        key = (e["machine"].get("cpu") or "?", e["machine"].get("onednn_isa") or "?", tf + star, keras + star,
               e["revision"], e["source"])
        counts[key] = counts.get(key, 0) + 1
    rows = [[*key, n] for key, n in sorted(counts.items())]
    missing = len({c.run for c in cells}) - len(found)
    return "Where the runs behind these cells were trained (the ledger beside this report):\n\n" + \
        md_table(["CPU", "oneDNN ISA", "TensorFlow", "Keras", "revision", "how it reached the ledger", "runs"],
                 rows) + \
        ("\n\\* Not recorded in the ledger then: every revision of the project before it recorded them installed "
         "TensorFlow 2.15.1, whose tf.keras is keras 2.15.0 (setup.py's pin).\n" if unrecorded else "") + \
        (f"\n{missing} run(s) are not in the ledger beside this record.\n" if missing else "")


def rechecked(record: dict, claims: list, check: dict, how: str) -> dict:
    """What a check that ran one seed again (under another instruction set, on another stack) found:
    how the re-run cells' outcomes compare with the study's, and every claim judged again."""
    return {"outcomes": _rerun_outcomes(record["cells"], check, record["collapse_loss"]),
            "verdicts": _verdicts_again(record, claims, check, how)}


def _verdicts_again(record: dict, claims: list, check: dict, how: str) -> str:
    """Every claim's verdicts (both clocks) against the same claim judged with a check's runs."""
    seed = check["seed"]
    again = {a["key"]: a for a in claims_of(record, cells_of({**record, "cells": check["cells"]}), check["seq_2eta"])}
    rows = [[c["claim"], c["verdict"], a["verdict"], c["verdicts"][clocks.HOST], a["verdicts"][clocks.HOST],
             "the same" if (c["verdict"], c["verdicts"][clocks.HOST]) == (a["verdict"], a["verdicts"][clocks.HOST])
             else "**changed**"]
            for c, a in ((c, again[c["key"]]) for c in claims)]
    return md_table(["claim", "verdict (paper's clock)", f"with seed {seed} {how}", "this host's clock",
                     f"with seed {seed} {how}", "verdicts"], rows)


def _rerun_outcomes(cells: list, check: dict, collapse_loss: float) -> str:
    """How the re-run cells compare with the originals: outcomes and passes to target."""
    def rerun(c: dict) -> bool:       # the seed the check re-ran in this cell
        sequential = c["n"] == 1 or c["mode"] not in policies.names() or policies.get(c["mode"]).follows_sequential_path
        return c["seed"] == (check.get("sequential_seed", check["seed"]) if sequential else check["seed"])

    before = {(c["mode"], c["n"]): c for c in cells if rerun(c)}
    pairs = [(before[(c["mode"], c["n"])], c) for c in check["cells"] if rerun(c) and (c["mode"], c["n"]) in before]
    outcome_of = lambda c: outcome(c["status"], c.get("final_val_loss"), collapse_loss)  # noqa: E731
    same = sum(outcome_of(a) == outcome_of(b) for a, b in pairs)
    moved = [abs(a["passes_to_target"] - b["passes_to_target"]) for a, b in pairs
             if a.get("passes_to_target") is not None and b.get("passes_to_target") is not None]
    return (f"{same} of {len(pairs)} cells had the same outcome (reached, slow or failed)"
            + (f"; passes to target moved by {max(moved):.3g} at the most (median {statistics.median(moved):.3g})"
               if moved else "") + ".")


def _margin(record: dict, seed: int, real: float, sequential: float) -> str:
    """How near the target the sequential run was where the two part (its per-pass losses are
    the record's curve of seq-sSEED); '' where the record does not have them."""
    losses = (record.get("curves") or {}).get(f"seq-s{seed}", {}).get("val_loss") or []
    at = int(min(real, sequential))
    if real != int(real) or sequential != int(sequential) or not 0 < at <= len(losses) or losses[at - 1] is None:
        return ""
    gap = losses[at - 1] / record["target"] - 1
    return (f"; at pass {at} the sequential run was {gap:+.2%} from the target" if real < sequential else
            f"; the sequential run crossed it at pass {at} by {-gap:.2%}")


def real_strong(record: dict) -> str:
    """The section on strong scaling run for real beside its derivation."""
    rows = record.get("real_strong") or []
    if not rows:
        return f"Not run: the preset lists no `real_strong` N. {SEQUENTIAL_PROOF[0].upper()}{SEQUENTIAL_PROOF[1:]}."

    def same(r) -> str:
        a, b = r["passes_to_target"], r["sequential_passes"]
        if a is None or b is None:
            return "-"
        return "the same" if a == b else (f"{a - b:+g} passes: the workers' part gradients are summed in another "
                                          f"order (allreduce), rounding the training amplifies"
                                          + _margin(record, r["seed"], a, b))
    table = md_table(["N", "status", "epochs", "passes to target", "the sequential run's", "difference",
                      "time to target (s, its own clock)", "controller (transport)"],
                     [[r["n"], r["status"], r["epochs"], fmt(r["passes_to_target"], 3, "-"),
                       fmt(r["sequential_passes"], 3, "-"), same(r), fmt(r["time_to_target_s"], 1, "-"),
                       _controller_cell(r)]
                      for r in rows])
    return (f"{SEQUENTIAL_PROOF[0].upper()}{SEQUENTIAL_PROOF[1:]}. Here strong scaling also ran for real, "
            f"`horovodrun -np N` on this host, seed {rows[0]['seed']}, validated every pass, one run at a time "
            f"after the others:\n\n{table}")


def _controller_cell(row: dict) -> str:
    """A real run's controller and transport, as far as its record knows them."""
    if not row.get("controller"):
        return "not recorded"
    return f"{row['controller']} ({row['transport'] or 'transport not recorded'})"


# REPORT.md's section on the clock: how the model of an epoch was built from the parts measured
# on this host (a step, the allreduce as a step pays it and alone, under the clock's controller, evaluation, the
# per-epoch work, the rounds they were taken in) and its table beside real strong-scaling epochs
# (`clock_fields`); and the host clock's latency as the rules' clocks line states it
# (`host_latency`).
def clock_fields(record: dict, cfg) -> dict:
    t, n_train, n_val = record["timing"], record["n_train"], record["n_val"]
    k, host = t["compute_scale"], clocks.host_clock(t, cfg.batch_size)    # the calibrated model's parts
    # the fit is non-negative: a latency of 0 where c log2 n alone passes through the allreduces measured
    latency = ("" if not t["allreduce_latency_s"] else
               ", its communication a latency a beside c log2 n (a + c log2 n through the allreduces measured at "
               "N = 2 and 4; the paper's c log2 n alone cannot pass through both on this host)")
    model = (f"every cell is {time_phrase(cfg)} of one model, the paper's T_S + T_P / n + "
             f"c log2 n{latency} built from parts measured here: a step costs {host.step_fixed_s * 1e3:.2f} ms + "
             f"{host.per_sample_s * 1e3:.3f} ms per sample of the per-worker batch + "
             + f"an allreduce of {describe_allreduce(t)}" + "; evaluation "
             f"{host.eval_per_sample_s * 1e3:.3f} ms per validation cube, shared by the workers" + _scaled(t, k)
             + " T(1) and T(N) come from the same model. Each worker is taken to be "
             "a device like this host, as each K80 was one device in the paper. The table sets the model beside "
             f"real strong-scaling epochs (`horovodrun -np N` under {clock_controller(t)}, "
             "workers sharing this host's cores, epochs after the "
             "first, median)" + _shared_model(t) + "." + _rounds(t))
    rows = ""
    for n, real in sorted(t["real_epoch_seconds"].items(), key=lambda kv: int(kv[0])):
        n = int(n)
        shared = shared_host_epoch(t, n, n_train, n_val, cfg.batch_size, cfg.epoch_definition)
        device = model_epoch(t, policies.STRONG, n, n_train, n_val, cfg.batch_size, cfg.epoch_definition)
        rows += f"| {n} | {real:.2f} | {shared:.2f} | {shared / real - 1:+.1%} | {device:.2f} |\n"
    return {"time_model": model,
            "clock_rows": rows, "step_times": ", ".join(f"{b}: {s * 1e3:.1f}" for b, s in t["step_seconds"].items()),
            "n_weights": f"{t['n_weights']:,}",
            "allreduce_times": _allreduce_times(t)}


def _scaled(t: dict, k: float) -> str:
    """How the model's compute parts were scaled to the real one-process epoch: its steps, with the
    rest of it a per-epoch cost."""
    return (f"; and {t['epoch_overhead_s']:.3f} s an epoch of the callbacks' epoch-end work (a checkpoint, the "
            f"logs), at every N. The compute parts are the probe's times x {k:.3f}, so that the model's steps of "
            f"a one-process epoch take the real one's steps' time (measured in the same invocation), and the "
            f"per-epoch work is the rest of that real epoch less its evaluation:")


def _rounds(t: dict) -> str:
    """How the clock's figures were taken in rounds, and how far the real epochs moved between them."""
    rounds = t["rounds"]
    spread = ", ".join(f"N={n}: {min(r['real'][n] for r in rounds):.2f}-{max(r['real'][n] for r in rounds):.2f}"
                       for n in sorted(rounds[0]["real"], key=int))
    steps = t["real_steps_seconds"]
    outside = (
        " Of each real epoch (median), its steps took (s): " + ", ".join(
            f"N={n}: {steps[n]:.2f} of {t['real_epoch_seconds'][n]:.2f}" for n in sorted(steps, key=int))
        + "; the rest is its validation and the callbacks' epoch-end work.")
    return (f" The probes and the real epochs were taken in turn, {len(rounds)} rounds, and every figure is the "
            f"median over the rounds; the real epochs over the rounds (s): {spread}." + outside)


def host_latency(host: clocks.Clock) -> str:
    """', plus a latency of L ms an allreduce' for a host clock that has one (the paper's and
    one device per worker have none)."""
    return f", plus a latency of {host.allreduce_latency_s * 1e3:.2f} ms an allreduce" if host.allreduce_latency_s else ""


def _allreduce_times(t: dict) -> str:
    """The allreduce parts of the clock: as a step pays it and the controller's alone."""
    times = lambda seconds: ", ".join(f"N={n}: {s * 1e3:.2f}" for n, s in seconds.items() if n != "1")  # noqa: E731
    controller = clock_controller(t)
    return (f"as a training step pays it (the step with Horovod's allreduce less the step without, ranks stepping "
            f"together under {controller}; the clock's {'a + c log2 n' if t['allreduce_latency_s'] else 'c log2 n'}): "
            f"{times(t['allreduce_seconds'])}; {controller}'s allreduce alone: {times(t['allreduce_alone_seconds'])}")


def _shared_model(t: dict) -> str:
    """How the clock's model for N workers sharing this host was built (clocks.shared_host_epoch)."""
    steps = ", ".join(f"N={n}: {s * 1e3:.1f}" for n, s in sorted(t["shared_step_seconds"].items(),
                                                                key=lambda kv: int(kv[0])))
    unscaled = (", taken as measured at N > 1 (the factor above is fitted on the one-process run and is not carried "
                "into the ranks' configuration),")
    return ("; every part was measured in the real runs' thread configuration, each in a process of its own, and "
            "for workers sharing this host a step is a rank's step measured while all N ranks step at once on "
            f"their share of the cores (ms, at strong scaling's per-worker batch: {steps}){unscaled} plus the "
            "allreduce")
