"""The `beyond` study's reports: adaptive batches and local SGD next to the paper's four
modes and the answer to "does either beat strong scaling?", the data filter and the batch
sweep; rendered from the study's record (study.json, record.beyond_record) alone, with
templates/beyond.md, filtering.md and batch_sweep.md."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from deepdensity.scaling import policies, rules
from deepdensity.study import clocks
from deepdensity.study.figures import LEGEND_OUTSIDE, line_stretches, plain_ticks, plain_y
from deepdensity.study.record import config_of, study_of
from deepdensity.study.render import (cells_at, epochs_listing, fill, fmt, md_table, pyplot, target_source,
                                      time_range, write_csv)
from deepdensity.study.tables import (beyond_answer, efficiency_table, failures, filter_answer, filter_table,
                                      median_time, preferred_batch, sweep_answer)
from deepdensity.study.tables import Cell
from deepdensity.study.timing import describe_allreduce

ORDER = ("strong", "weak", "linear", "warmup", "adaptive", "local")


# The text files write_beyond_reports writes; `deepdensity report --check` compares exactly these.
TEXT_OUTPUTS = ("REPORT.md", "time_to_target.md", "time_to_target.csv", "filtering.json", "batch_sweep.json")


def write_beyond_reports(out: Path, record: dict) -> None:
    """REPORT.md, time_to_target.md/.csv, fig2.png (time to target, six modes) and fig7.png
    (adaptive's batch per epoch) under `out`; the filter's and the batch sweep's sections,
    figures and JSON where the study ran them. From `record` alone."""
    out.mkdir(parents=True, exist_ok=True)
    study, cfg = study_of(record), config_of(record)
    cells = [Cell(**c) for c in record["cells"]]
    every = cells + [Cell(**c) for c in record["earlier"]["cells"]]
    modes = [m for m in ORDER if any(c.mode == m for c in every)]
    time_table = _time_table(out, every, modes, study.workers)
    _figures(out, every, modes, study.workers, record["run_rows"], record["target"], plt=pyplot())
    text = fill("beyond.md", **_beyond_fields(record, study, cfg, cells, every, modes), time_table=time_table)
    if record["filtering"]:
        text += _filtering_md(out, record["filtering"], record["target"])
    if record["sweep"]:
        text += _sweep_md(out, record["sweep"], cfg, record["eta"], record["target"])
    (out / "REPORT.md").write_text(text)


def _time_table(out: Path, every: list, modes: list, workers) -> str:
    """Time to target and efficiency per mode and N: written as time_to_target.csv/.md, returned as markdown."""
    eff = efficiency_table(every, modes, workers)
    head = ["N"] + [f"{m}: s (eff %)" for m in modes]
    rows = [[n] + [f"{time_range(every, m, n)} ({fmt(eff[m][n], 0)})" if cells_at(every, m, n) else "not run"
                   for m in modes] for n in workers]
    write_csv(out / "time_to_target.csv", ["N"] + [f"{m} {k}" for m in modes for k in ("time_s", "efficiency")],
              [[n] + [v for m in modes for v in (time_range(every, m, n), fmt(eff[m][n]))] for n in workers])
    (out / "time_to_target.md").write_text(md_table(head, rows))
    return md_table(head, rows)


def _beyond_fields(r: dict, study, cfg, cells: list, every: list, modes: list) -> dict:
    """The $fields of templates/beyond.md but the time table."""
    t, workers, p = r["timing"], study.workers, r["provenance"]
    host = clocks.host_clock(t, cfg.batch_size)        # the calibrated model's parts, scaled
    steps1 = rules.steps_per_epoch(r["n_train"], policies.plan(policies.SEQUENTIAL, 1, cfg.batch_size), cfg.epoch_definition)
    fail_rows = [[m, n, s, st, ep, fmt(v, 6)] for m, n, s, st, ep, v in failures(every)]
    comm = md_table(["mode", "N", "epochs to target (per seed)", "allreduces / epoch", "global batches",
                     "noise / ||g||^2 (adaptive, per epoch)"],
                    _communication_rows(every, modes, workers, cfg, r["n_train"], r["run_rows"]))
    return {
        "name": r["preset"], "when": p["generated"], "revision": p["revision"],
        "machine": f"{r['environment']['cpu']} ({r['environment']['cores']} cores, oneDNN ISA: "
                   f"{r['environment']['onednn_isa']}"
                   + (f"; rendering: {r['environment']['rendering']}" if r["environment"].get("rendering") else "")
                   + ")",
        "provenance": f"The study took {p['wall_minutes']} min, trained {p['trained']} run(s) and reused {p['reused']} "
                      f"finished earlier, {p['parallel_runs']} at a time; its runs' own clocks add up to "
                      f"{p['runs_minutes']} min.",
        "answer": beyond_answer(every, [m for m in policies.beyond() if m in modes], workers,
                                not_exercised=_not_exercised(cells, r["run_rows"], cfg)),
        "never_grew": _adaptive_never_grew(cells, r["run_rows"], cfg),
        "batch": cfg.batch_size, "theta": f"{cfg.adaptive_theta:g}", "theta_sq": f"{cfg.adaptive_theta ** 2:g}",
        "local_steps": cfg.local_steps, "eta": f"{r['eta']:.6g}",
        "eta_source": _eta_source(study.base_lr),
        "target": f"{r['target']:.6g}", "target_source": target_source(r, study.calibration_epochs), "cap": r["cap"],
        "earlier_note": r["earlier"]["note"], "step_fixed_ms": f"{host.step_fixed_s * 1e3:.2f}",
        "per_sample_ms": f"{host.per_sample_s * 1e3:.3f}", "allreduce": describe_allreduce(t),
        "local_allreduce_size": f"{policies.get('local').allreduce_size:g}", "steps1": steps1, "n_train": r["n_train"],
        "epoch_definition": cfg.epoch_definition, "communication_table": comm,
        "failures_table": md_table(["mode", "N", "seed", "status", "epochs run", "last val_loss"], fail_rows)
        if fail_rows else "none",
    }


def _eta_source(base_lr) -> str:
    if base_lr == "edge":
        return "the edge of stability found by this study's search"
    if base_lr == "default_study":
        return "the default study's eta, read from its study.json"
    return "fixed by the preset"


def _communication_rows(every: list, modes: list, workers, cfg, n_train: int, run_rows: dict) -> list:
    """Per mode and N > 1: epochs to target, allreduces per epoch, the global batches used and
    (adaptive, local) the range of noise / ||g||^2 its runs saw."""
    rows = []
    for m in modes:
        for n in workers:
            cs = [c for c in every if c.mode == m and c.n == n and n > 1]
            if not cs:
                continue
            ratio = ""
            if policies.get(m).varies_by_epoch:     # what the runs did, epoch by epoch
                metrics = [run_rows[c.run] for c in cs]
                per_epoch = statistics.median(r["allreduces"] for ms in metrics for r in ms)
                batches = sorted({r["global_batch"] for ms in metrics for r in ms})
                ratios = [r["grad_noise"] / r["grad_sq"] for ms in metrics for r in ms if r.get("grad_sq")]
                ratio = f"{min(ratios):.3g}-{max(ratios):.3g}" if ratios else ""
            else:                           # fixed by the policy (strong is read off the sequential run)
                p = policies.plan(m, n, cfg.batch_size)
                per_epoch, batches = rules.steps_per_epoch(n_train, p, cfg.epoch_definition), [p.global_batch]
            rows.append([m, n, epochs_listing(every, m, n), f"{per_epoch:.0f}", ", ".join(map(str, batches)), ratio])
    return rows


def _not_exercised(cells: list, run_rows: dict, cfg) -> dict:
    """{mode: why} for a policy whose mechanism never engaged in any of its runs: a batch that
    grows (adaptive) and never grew ran strong scaling throughout, and measures nothing of its own."""
    out = {}
    for mode in sorted({c.mode for c in cells if policies.get(c.mode).grows_batch and c.n > 1}):
        rows = [r for c in cells if c.mode == mode and c.n > 1 for r in run_rows[c.run]]
        if rows and all(r["global_batch"] == cfg.batch_size for r in rows):
            out[mode] = "its batch never grew in any epoch of any run, so it ran strong scaling's batches throughout"
    return out


def _adaptive_never_grew(cells: list, run_rows: dict, cfg) -> str:
    """A paragraph for when adaptive's test never fired in any run (it then ran strong
    scaling's batches throughout), else the empty string."""
    rows = [r for c in cells if policies.get(c.mode).grows_batch and c.n > 1 for r in run_rows[c.run]]
    if not rows or any(r["global_batch"] != cfg.batch_size for r in rows):
        return ""
    top = max(r["grad_noise"] / r["grad_sq"] for r in rows if r.get("grad_sq"))
    return (f"\n\nadaptive's test never fired: noise / ||g||^2 stayed at or below {top:.3g}, under "
            f"theta^2 = {cfg.adaptive_theta ** 2:g}, in every epoch of every run, so adaptive ran strong "
            f"scaling's batches throughout. It then differs from strong scaling only in how the workers' "
            f"part gradients are summed (float rounding), which the training amplifies over epochs: where the "
            f"two differ below, by an epoch or two for a seed, it is that rounding, not adaptive's mechanism.")


def _filtering_md(out: Path, filtering: dict, target: float) -> str:
    rows, facts = filtering["rows"], filtering["filter"]
    table = filter_table(rows)
    (out / "filtering.json").write_text(json.dumps({"filter": facts, "runs": rows}, indent=2))
    _filter_figure(out / "fig8.png", table)
    md = md_table(["mode", "N", "data", "epochs to target (per seed)", "time to target (s, median)"],
                  [[m, n, d, ", ".join("-" if e is None else str(e) for e in eps), fmt(t, 1, "not every seed reached")]
                   for m, n, d, eps, t in table])
    return fill("filtering.md", answer=filter_answer(rows), pca=facts.get("pca_components"),
                perplexity=facts.get("tsne_perplexity"), min_samples=facts.get("dbscan_min_samples"),
                eps=f"{float(facts.get('dbscan_eps', float('nan'))):.4g}", clusters=facts.get("clusters"),
                n_dropped=facts.get("n_dropped"), n_before=facts.get("n_train_before"), target=f"{target:.6g}",
                table=md)


def _sweep_md(out: Path, sweep: list, cfg, eta: float, target: float) -> str:
    (out / "batch_sweep.json").write_text(json.dumps(sweep, indent=2))
    _sweep_figure(out / "fig9.png", sweep)
    md = md_table(["global batch", "lr rule", "lr", "status", "epochs (passes)", "s / pass", "time to target (s)"],
                  [[r["batch"], r["lr_rule"], f"{r['lr']:.4g}", r["status"], r["epochs"], fmt(r["epoch_seconds"]),
                    fmt(r["time_to_target_s"], 1, "not reached")] for r in sweep])
    return fill("batch_sweep.md", eta=f"{eta:.6g}", batch=cfg.batch_size, target=f"{target:.6g}",
                answer=sweep_answer(sweep), table=md)


def _filter_figure(path: Path, table: list) -> None:
    plt = pyplot()
    groups = list(dict.fromkeys((m, n) for m, n, *_ in table))
    fig, ax = plt.subplots(figsize=(6.4, 4))
    colors = {"full": "tab:gray", "network": "tab:blue", "random": "tab:orange"}
    from matplotlib.patches import Patch
    for gi, (mode, n) in enumerate(groups):
        for di, data in enumerate(("full", "network", "random")):
            x = gi + (di - 1) * 0.27
            t = next((tm for m, nn, d, _, tm in table if (m, nn, d) == (mode, n, data)), None)
            if t is not None:
                ax.bar(x, t, width=0.25, color=colors[data])
            elif any((m, nn, d) == (mode, n, data) for m, nn, d, *_ in table):
                ax.text(x, 0, "not\nreached", ha="center", va="bottom", fontsize=7, color=colors[data])
    ax.set_xticks(range(len(groups)), [f"{m} N = {n}" for m, n in groups])
    ax.set(ylabel="time to target (s, median over seeds)", title="Full, network-filtered and random-filtered data")
    ax.legend(handles=[Patch(color=c, label=d) for d, c in colors.items()], **LEGEND_OUTSIDE)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _sweep_figure(path: Path, sweep: list) -> None:
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6), sharex=True)
    for rule, color in (("eta", "tab:blue"), ("linear", "tab:red")):
        rows = [r for r in sweep if r["lr_rule"] == rule]
        reached = [r for r in rows if r["time_to_target_s"] is not None]
        top.plot([r["batch"] for r in reached], [r["epochs"] for r in reached], "o-", color=color,
                 label=f"lr {'eta' if rule == 'eta' else 'eta x b / B'}")
        bottom.plot([r["batch"] for r in reached], [r["time_to_target_s"] for r in reached], "o-", color=color)
        missed = [r["batch"] for r in rows if r["time_to_target_s"] is None]
        if missed:
            bottom.plot(missed, [bottom.get_ylim()[1]] * len(missed), "x", color=color, label=f"{rule}: not reached")
        best = preferred_batch(sweep, rule)[0]
        if best is not None:
            t = next(r["time_to_target_s"] for r in reached if r["batch"] == best)
            bottom.plot([best], [t], "o", ms=14, mfc="none", color=color)
    top.set(ylabel="epochs (passes) to target", xscale="log", yscale="log",
            title="Sequential model: batch size against epochs and time to target")
    bottom.set(xlabel="global batch", ylabel="time to target (s)", xscale="log", yscale="log")
    top.legend(**LEGEND_OUTSIDE)
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(**LEGEND_OUTSIDE)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _figures(out: Path, cells, modes, workers, run_rows: dict, target: float, plt) -> None:
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    for mode in modes:
        color, marker = policies.get(mode).style
        ran = [n for n in workers if cells_at(cells, mode, n)]
        # a cell not reached on every seed breaks the line: no segment bridges it
        for k, stretch in enumerate(line_stretches([(n, median_time(cells, mode, n)) for n in ran])):
            ax.plot(*zip(*stretch), marker=marker, color=color, label=mode if k == 0 else None,
                    ls="-" if policies.get(mode).in_paper else "--")
        missed = [n for n in ran if median_time(cells, mode, n) is None]
        ax.scatter(missed, [0.0] * len(missed), marker="x", color=color, transform=ax.get_xaxis_transform(),
                   clip_on=False, zorder=3)
    ax.scatter([], [], marker="x", color="gray", label="a seed missed the target")
    ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel="time to target (s, median over seeds)",
           title="Time to target (a gap and a cross: not reached on every seed)")
    plain_ticks(ax.xaxis, workers)
    plain_y(ax)
    ax.legend(**LEGEND_OUTSIDE)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out / "fig2.png", dpi=110)
    plt.close(fig)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6), sharex=True)
    cmap = plt.get_cmap("viridis")
    runs = sorted({(c.n, c.seed, c.run) for c in cells if policies.get(c.mode).grows_batch and c.n > 1})
    for i, (n, seed, run) in enumerate(runs):
        rows = run_rows[run]
        ep = [r["epoch"] for r in rows]
        style = dict(color=cmap(i / max(1, len(runs) - 1)), ls="-" if seed == runs[0][1] else ":",
                     marker="o", markersize=3, label=f"N = {n}, seed {seed}")
        top.step(ep, [r["global_batch"] for r in rows], where="mid", **style)
        bottom.plot(ep, [r["val_loss"] for r in rows], **style)
    bottom.axhline(target, color="gray", ls="--", lw=1, label="target")
    top.set(ylabel="global batch", yscale="log", title="adaptive: batch and validation loss per epoch")
    bottom.set(xlabel="epoch", ylabel="validation MSLE", yscale="log")
    if runs:
        top.legend(**{**LEGEND_OUTSIDE, "fontsize": 7})
    fig.tight_layout()
    fig.savefig(out / "fig7.png", dpi=110)
    plt.close(fig)
