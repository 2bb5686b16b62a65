"""The `beyond` study's reports (issue 'Beyond the paper'): adaptive batches and local SGD
next to the paper's four modes, and the answer to "does either beat strong scaling?"."""
from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path

from deepdensity.scaling import rules
from deepdensity.study.report import MODE_STYLE, _cells, _epochs, _f, _md_table, _runs_minutes, _time_range, _write_csv
from deepdensity.training.runs import read_metrics
from deepdensity.study.tables import (beyond_answer, efficiency_table, failures, filter_answer, filter_table,
                     preferred_batch, sweep_answer)

ORDER = ("strong", "weak", "linear", "warmup", "adaptive", "local")


def write_beyond_reports(out: Path, *, name, study, cfg, cells, earlier, target, cap, eta, timing, runs_root,
                         n_train, n_val, invocation, filtering=None, sweep=None) -> None:
    """REPORT.md, time_to_target.md/.csv, fig2.png (time to target, six modes), fig7.png
    (adaptive's batch per epoch) and cells.json under `out`. `earlier` = (cells, note): the
    default study's weak/linear/warmup cells, or none and why."""
    out.mkdir(parents=True, exist_ok=True)
    earlier_cells, earlier_note = earlier
    every = cells + earlier_cells
    modes = [m for m in ORDER if any(c.mode == m for c in every)]
    workers = study.workers
    eff = efficiency_table(every, modes, workers)

    head = ["N"] + [f"{m}: s (eff %)" for m in modes]
    rows = [[n] + [f"{_time_range(every, m, n)} ({_f(eff[m][n], 0)})" if _cells(every, m, n) else "not run"
                   for m in modes] for n in workers]
    _write_csv(out / "time_to_target.csv", ["N"] + [f"{m} {k}" for m in modes for k in ("time_s", "efficiency")],
               [[n] + [v for m in modes for v in (_time_range(every, m, n), _f(eff[m][n]))] for n in workers])
    (out / "time_to_target.md").write_text(_md_table(head, rows))
    _figures(out, every, modes, workers, runs_root, target, plt=_pyplot())
    (out / "cells.json").write_text(json.dumps([c.__dict__ for c in cells], indent=2))

    comm_rows = _communication_rows(every, modes, workers, cfg, n_train, runs_root)
    fail_rows = [[m, n, s, st, ep, _f(v, 6)] for m, n, s, st, ep, v in failures(every)]
    never_grew = _adaptive_never_grew(cells, runs_root, cfg, study.calibration_epochs)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    steps1 = rules.steps_per_epoch(n_train, rules.plan("strong", 1, cfg.batch_size), cfg.epoch_definition)
    text = f"""# Beyond the paper: adaptive batches and local SGD against strong scaling

Preset `{name}`, `make repro PRESET={name}` (one process emulating N workers; time modelled); generated {when}.
The training runs behind it took {_runs_minutes(runs_root):.1f} min by their own clocks (excluding process
start-up); {invocation}.

## The answer

{beyond_answer(every, [m for m in ("adaptive", "local") if m in modes], workers)}{never_grew}

## What was run

- **adaptive** (De, Yadav, Jacobs and Goldstein, AISTATS 2017, "big batch" SGD; Goldstein 2018, section 4):
  starts as strong scaling (global batch {cfg.batch_size}, {cfg.batch_size}/N per worker, lr eta). Each step
  measures the spread of the N workers' mean gradients g_i around their mean g (one allreduce of ||g_i||^2
  beside the gradients); E||g - grad||^2 is estimated as (mean ||g_i||^2 - ||g||^2) / (N - 1). At the end of
  each epoch, De et al.'s test "noise <= theta^2 ||g||^2" on the epoch's means, with theta = {cfg.adaptive_theta:g};
  where it fails the per-worker batch grows by the factor that makes it hold, up to {cfg.batch_size} per worker
  (weak scaling's batch). The lr stays eta.
- **local** (local SGD; Goldstein 2018, section 4): strong scaling's batches and lr, but every worker steps on its
  own copy of the weights and Adam's moments, and the workers average weights and moments every H = {cfg.local_steps}
  steps and at each epoch's end (one allreduce of 3x the gradient's floats). Averaging the moments too keeps every
  worker on the same optimizer state after each round; with plain SGD and H = 1 this is exactly synchronous data
  parallelism (tested), with Adam it cannot be (Adam's step is not linear in the gradient; a test shows the gap).
- eta = {eta:.6g} ({"the edge of stability found by this study's search" if study.base_lr == "edge" else
  "fixed by the preset"}); target {target:.6g}, the sequential run's validation loss after
  {study.calibration_epochs} epochs (cap {cap} epochs). theta and H were chosen before any run and not tuned.
- {earlier_note}.
- Time: epochs x a modelled epoch as in the default study (step {timing['step_fixed_s'] * 1e3:.2f} ms +
  {timing['per_sample_s'] * 1e3:.3f} ms per sample of the per-worker batch, allreduce
  {timing['allreduce_per_doubling_s'] * 1e3:.2f} ms per doubling of N, evaluation shared); adaptive's epochs
  each at their own batch and step count; local's allreduces every H steps, each counted as
  {rules.LOCAL_ALLREDUCE_SIZE:g} gradient allreduces (cost taken as proportional to the floats: an upper bound
  where latency dominates). N = 1 is the sequential run ({steps1} steps per pass), measured.

## Time to target (s, median and range over seeds) and efficiency (%)

{_md_table(head, rows)}
## Epochs to target, allreduces per epoch and the batches used

{_md_table(["mode", "N", "epochs to target (per seed)", "allreduces / epoch", "global batches",
           "noise / ||g||^2 (adaptive, per epoch)"], comm_rows)}
One epoch is N passes of {n_train} cubes (`{cfg.epoch_definition}`): strong scaling makes {steps1} x N steps
and as many gradient allreduces per epoch. adaptive's test grows the batch when noise / ||g||^2 exceeds
theta^2 = {cfg.adaptive_theta ** 2:g}; the last column shows the range its runs saw.

## Runs that did not reach the target

{_md_table(['mode', 'N', 'seed', 'status', 'epochs run', 'last val_loss'], fail_rows) if fail_rows else 'none'}

## Figures

![fig2](fig2.png) ![fig7](fig7.png)

Fig. 2: time to target against N, the paper's four modes and the two beyond it (missing points: not reached).
Fig. 7: adaptive's global batch per epoch (top) and validation loss (bottom), each N and seed.
"""
    if filtering:
        text += _filtering_md(out, filtering, target)
    if sweep:
        text += _sweep_md(out, sweep, cfg, eta, target)
    (out / "REPORT.md").write_text(text)


def _communication_rows(every: list, modes: list, workers, cfg, n_train: int, runs_root: Path) -> list:
    """Per mode and N > 1: epochs to target, allreduces per epoch, the global batches used and
    (adaptive, local) the range of noise / ||g||^2 its runs saw."""
    rows = []
    for m in modes:
        for n in workers:
            cs = [c for c in every if c.mode == m and c.n == n and n > 1]
            if not cs:
                continue
            ratio = ""
            if m in rules.BEYOND_MODES:     # what the runs did, epoch by epoch
                metrics = [read_metrics(runs_root / c.run) for c in cs]
                per_epoch = statistics.median(r["allreduces"] for ms in metrics for r in ms)
                batches = sorted({r["global_batch"] for ms in metrics for r in ms})
                ratios = [r["grad_noise"] / r["grad_sq"] for ms in metrics for r in ms if r.get("grad_sq")]
                ratio = f"{min(ratios):.3g}-{max(ratios):.3g}" if ratios else ""
            else:                           # fixed by the policy (strong is read off the sequential run)
                p = rules.plan(m, n, cfg.batch_size)
                per_epoch, batches = rules.steps_per_epoch(n_train, p, cfg.epoch_definition), [p.global_batch]
            rows.append([m, n, _epochs(every, m, n), f"{per_epoch:.0f}", ", ".join(map(str, batches)), ratio])
    return rows


def _adaptive_never_grew(cells: list, runs_root: Path, cfg, calibration_epochs: int) -> str:
    """A paragraph for when adaptive's test never fired in any run (it then ran strong
    scaling's batches throughout), else the empty string."""
    rows = [r for c in cells if c.mode == "adaptive" and c.n > 1 for r in read_metrics(runs_root / c.run)]
    if not rows or any(r["global_batch"] != cfg.batch_size for r in rows):
        return ""
    top = max(r["grad_noise"] / r["grad_sq"] for r in rows if r.get("grad_sq"))
    return (f"\n\nadaptive's test never fired: noise / ||g||^2 stayed at or below {top:.3g}, under "
            f"theta^2 = {cfg.adaptive_theta ** 2:g}, in every epoch of every run, so adaptive ran strong "
            f"scaling's batches throughout. It then differs from strong scaling only in how the workers' "
            f"part gradients are summed (float rounding), which the training amplifies over epochs; "
            f"and strong scaling at N reaches the target, the sequential run's loss after "
            f"{calibration_epochs} passes, exactly at epoch {calibration_epochs}/N by "
            f"construction, so such rounding decides whether adaptive arrives then or an epoch later.")


def _filtering_md(out: Path, filtering: dict, target: float) -> str:
    import shutil
    rows, facts = filtering["rows"], filtering["filter"]
    for fig in filtering["figures"]:
        if Path(fig).exists():
            shutil.copy(fig, out / f"filter.{Path(fig).name.split('.', 2)[-1]}")
    table = filter_table(rows)
    (out / "filtering.json").write_text(json.dumps({"filter": facts, "runs": rows}, indent=2))
    _filter_figure(out / "fig8.png", table)
    md = _md_table(["mode", "N", "data", "epochs to target (per seed)", "time to target (s, median)"],
                   [[m, n, d, ", ".join("-" if e is None else str(e) for e in eps), _f(t, 1, "not every seed reached")]
                    for m, n, d, eps, t in table])
    return f"""
## Filtering the data for large batches (Gahlot et al. 2020)

{filter_answer(rows)}

The sequential run of the first seed encoded every training cube (latent y, eq. 9); PCA to
{facts.get('pca_components')} dimensions, t-SNE to 2-D (perplexity {facts.get('tsne_perplexity')}), DBSCAN with
min_samples {facts.get('dbscan_min_samples')} and eps {float(facts.get('dbscan_eps', float('nan'))):.4g} (the knee of the
k-distance curve) found {facts.get('clusters')} clusters and called **{facts.get('n_dropped')} of
{facts.get('n_train_before')}** training cubes noise; they were dropped (`network`), and as many cubes at random
for the control (`random`). The validation split, the target ({target:.6g}), eta and the seeds are the study's.
Each mode runs at the N where the default study found it slowest or failing (tables.filter_n). Time is
modelled epoch by epoch from each run's own steps (fewer cubes, fewer steps per epoch).

{md}
![fig8](fig8.png) ![embedding](filter.embedding.png)

Fig. 8: time to target per data set (missing bars: not reached by every seed). The embedding with DBSCAN's
clusters and its noise in black (their Fig. 3); `filter.dropped.png` shows the dropped cubes' central slices.
"""


def _sweep_md(out: Path, sweep: list, cfg, eta: float, target: float) -> str:
    (out / "batch_sweep.json").write_text(json.dumps(sweep, indent=2))
    _sweep_figure(out / "fig9.png", sweep)
    best = {rule: preferred_batch(sweep, rule) for rule in ("eta", "linear")}
    md = _md_table(["global batch", "lr rule", "lr", "status", "epochs (passes)", "s / pass", "time to target (s)"],
                   [[r["batch"], r["lr_rule"], f"{r['lr']:.4g}", r["status"], r["epochs"], _f(r["epoch_seconds"]),
                     _f(r["time_to_target_s"], 1, "not reached")] for r in sweep])
    return f"""
## The preferred batch size (Gahlot et al.'s Fig. 4 and 5, for this model)

The sequential model (one worker) at each global batch b, at eta = {eta:.6g} (weak scaling's lr) and at the
linear rule's eta x b / {cfg.batch_size}; an epoch is one pass (floor(n / b) x b cubes), cap and stopping
rules as the study's, target {target:.6g}; time modelled for one device from each epoch's steps.
Preferred batch (shortest time to target): **{best['eta'] or 'none reached'}** at eta,
**{best['linear'] or 'none reached'}** with the linear rule.

{sweep_answer(sweep)} One seed per batch: a pass or two either way is within the seed-to-seed
spread the study's own runs show, so neighbouring batches within a few seconds of each other are a tie.

{md}
![fig9](fig9.png)

Fig. 9: epochs and time to target against the global batch, both lr rules; the preferred batch is circled.
"""


def _filter_figure(path: Path, table: list) -> None:
    plt = _pyplot()
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
    ax.legend(handles=[Patch(color=c, label=d) for d, c in colors.items()], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _sweep_figure(path: Path, sweep: list) -> None:
    plt = _pyplot()
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
        best = preferred_batch(sweep, rule)
        if best is not None:
            t = next(r["time_to_target_s"] for r in reached if r["batch"] == best)
            bottom.plot([best], [t], "o", ms=14, mfc="none", color=color)
    top.set(ylabel="epochs (passes) to target", xscale="log", yscale="log",
            title="Sequential model: batch size against epochs and time to target")
    bottom.set(xlabel="global batch", ylabel="time to target (s)", xscale="log", yscale="log")
    top.legend(fontsize=8)
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _figures(out: Path, cells, modes, workers, runs_root: Path, target: float, plt) -> None:
    from deepdensity.study.tables import median_time
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for mode in modes:
        pts = [(n, median_time(cells, mode, n)) for n in workers]
        pts = [(n, t) for n, t in pts if t is not None]
        if pts:
            color, marker = MODE_STYLE[mode]
            ax.plot(*zip(*pts), marker=marker, color=color, label=mode,
                    ls="--" if mode in rules.BEYOND_MODES else "-")
    ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel="time to target (s)",
           title="Time to target (missing points: target not reached)")
    ax.set_xticks(workers, [str(n) for n in workers])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out / "fig2.png", dpi=110)
    plt.close(fig)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6), sharex=True)
    cmap = plt.get_cmap("viridis")
    runs = sorted({(c.n, c.seed, c.run) for c in cells if c.mode == "adaptive" and c.n > 1})
    for i, (n, seed, run) in enumerate(runs):
        rows = read_metrics(runs_root / run)
        ep = [r["epoch"] for r in rows]
        style = dict(color=cmap(i / max(1, len(runs) - 1)), ls="-" if seed == runs[0][1] else ":",
                     marker="o", markersize=3, label=f"N = {n}, seed {seed}")
        top.step(ep, [r["global_batch"] for r in rows], where="mid", **style)
        bottom.plot(ep, [r["val_loss"] for r in rows], **style)
    bottom.axhline(target, color="gray", ls="--", lw=1, label="target")
    top.set(ylabel="global batch", yscale="log", title="adaptive: batch and validation loss per epoch")
    bottom.set(xlabel="epoch", ylabel="validation MSLE", yscale="log")
    if runs:
        top.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig7.png", dpi=110)
    plt.close(fig)
