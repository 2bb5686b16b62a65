"""The study's reports: Tables I-II, Figures 1-5 and REPORT.md, each next to the paper's."""
from __future__ import annotations

import csv
import datetime
import json
import math
import platform
import statistics
import subprocess
from pathlib import Path

from deepdensity.scaling.rules import sample_epoch_losses
from deepdensity.training.runs import read_metrics
from deepdensity.study.tables import PAPER_TABLE1, PAPER_TABLE2, efficiency_table, failures, median_time

MODE_STYLE = {"strong": ("tab:blue", "o"), "weak": ("tab:orange", "s"),
              "warmup": ("tab:green", "^"), "linear": ("tab:red", "v"),
              "adaptive": ("tab:purple", "D"), "local": ("tab:brown", "P")}


def _f(x, digits=2, missing="NaN") -> str:
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _md_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, header, rows) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _cells(cells, mode, n):
    return [c for c in cells if c.mode == mode and c.n == n]


def _time_range(cells, mode, n) -> str:
    cs = _cells(cells, mode, n)
    times = [c.time_to_target_s for c in cs if c.time_to_target_s is not None]
    if len(times) < len(cs) or not times:
        return "not reached" if cs else ""
    med = statistics.median(times)
    return f"{med:.1f}" + (f" ({min(times):.1f}-{max(times):.1f})" if len(times) > 1 else "")


def _epochs(cells, mode, n) -> str:
    cs = _cells(cells, mode, n)
    return ", ".join(str(c.epochs_to_target) if c.reached else f"- ({c.status}, {c.epochs})" for c in cs)


def write_reports(out: Path, *, study, cfg, cells, claims, protocol, target, runs_root, seq_run, sweep,
                  runner, **details) -> None:
    """Tables I-II, the figures and REPORT.md from the study's finished cells; `details`
    are the rest of REPORT.md's keywords (see `_report_md`)."""
    out.mkdir(parents=True, exist_ok=True)
    _tables(out, study, cells)
    _figures(out, study, cfg, cells, target, runs_root, seq_run, sweep, runner)
    _report_md(out, study=study, cfg=cfg, cells=cells, claims=claims, protocol=protocol, target=target,
               runs_root=runs_root, seq_run=seq_run, sweep=sweep, runner=runner, **details)
    (out / "cells.json").write_text(json.dumps([c.__dict__ for c in cells], indent=2))
    (out / "claims.json").write_text(json.dumps(claims, indent=2))
    (out / "protocol.json").write_text(json.dumps(protocol, indent=2))


def _tables(out: Path, study, cells) -> None:
    workers = study.workers
    eff = efficiency_table(cells, study.modes, workers)
    src = {(c.mode, c.n): c.time_source for c in cells}

    # Table I: strong scaling
    head1 = ["N", "epochs to target", "s / epoch", "time to target (s)", "time", "efficiency % (ours)",
             "efficiency % (paper)"]
    rows1 = [[n, _epochs(cells, "strong", n), _f(_cells(cells, "strong", n)[0].epoch_seconds),
              _time_range(cells, "strong", n), src[("strong", n)], _f(eff["strong"][n]), _f(PAPER_TABLE1.get(n))]
             for n in workers] if "strong" in study.modes else []
    _write_csv(out / "table1.csv", head1, rows1)
    (out / "table1.md").write_text("Table I: strong-scaling efficiency, T1 / (N TN), ours next to the paper's.\n\n"
                                   + _md_table(head1, rows1))

    # Table II: weak, warmup, linear
    modes2 = [m for m in ("weak", "warmup", "linear") if m in study.modes]
    head2 = ["N"] + [f"{m} {w}" for m in modes2 for w in ("(ours)", "(paper)")] + ["time"]
    rows2 = [[n] + [v for m in modes2 for v in (_f(eff[m][n]) if (m, n) in src else "not run",
                                                 _f(PAPER_TABLE2[m].get(n)))]
             + [src.get((modes2[0], n), "") if modes2 else ""] for n in workers]
    _write_csv(out / "table2.csv", head2, rows2)
    (out / "table2.md").write_text("Table II: efficiency of weak scaling, warmup and the linear scaling rule, "
                                   "T1 / (N TN) on time to target; NaN where the target was not reached.\n\n"
                                   + _md_table(head2, rows2))


def _figures(out: Path, study, cfg, cells, target, runs_root, seq_run, sweep, runner) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers = study.workers
    # Figure 2: time to target against N
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for mode in study.modes:
        pts = [(n, median_time(cells, mode, n)) for n in workers]
        pts = [(n, t) for n, t in pts if t is not None]
        if pts:
            color, marker = MODE_STYLE[mode]
            ax.plot(*zip(*pts), marker=marker, color=color, label=mode)
    ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel="time to target (s)",
           title="Time to target (missing points: target not reached)")
    ax.set_xticks(workers, [str(n) for n in workers])
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out / "fig2.png", dpi=110)
    plt.close(fig)

    # Figure 3: warmup at N = 8, loss and lr
    w8 = [c for c in cells if c.mode == "warmup" and c.n == 8]
    if w8:
        m = read_metrics(runs_root / w8[0].run)
        fig, ax = plt.subplots(figsize=(6, 4.2))
        ep = [r["epoch"] for r in m]
        ax.plot(ep, [r["loss"] for r in m], label="training loss", color="tab:blue")
        ax.plot(ep, [r["val_loss"] for r in m], label="validation loss", color="tab:orange")
        ax.axhline(target, color="gray", ls="--", lw=1, label="target")
        ax.set(xlabel="epoch", ylabel="MSLE", yscale="log", title="Warmup, N = 8")
        ax2 = ax.twinx()
        ax2.plot(ep, [r["lr"] for r in m], color="tab:green", lw=1, label="lr (end of epoch)")
        ax2.set_ylabel("learning rate")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "fig3.png", dpi=110)
        plt.close(fig)

    # Figures 4 and 5: loss curves of strong and weak scaling against time
    for fig_name, mode in (("fig4.png", "strong"), ("fig5.png", "weak")):
        if mode not in study.modes:
            continue
        fig, ax = plt.subplots(figsize=(6, 4.2))
        cmap = plt.get_cmap("viridis")
        for i, n in enumerate(workers):
            if not _cells(cells, mode, n):
                continue                          # not run at this N by the preset
            c = _cells(cells, mode, n)[0]
            vals = [r["val_loss"] for r in read_metrics(runs_root / c.run)]
            if mode == "strong" and not runner:   # read off the sequential run at its epoch ends
                vals = sample_epoch_losses(vals, n)[:c.epochs]
            ax.plot([(e + 1) * c.epoch_seconds for e in range(len(vals))], vals,
                    color=cmap(i / max(1, len(workers) - 1)), label=f"N = {n}")
        ax.axhline(target, color="gray", ls="--", lw=1, label="target")
        ax.set(xlabel="time (s; epochs x s/epoch at N)", ylabel="validation MSLE", yscale="log",
               title=f"{mode} scaling: validation loss")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / fig_name, dpi=110)
        plt.close(fig)

    _figure1(out / "fig1.png", cfg, seq_run, plt)
    if sweep:
        _sweep_figure(out / "fig6.png", sweep, plt)


def _report_md(out: Path, *, name, study, cfg, cells, claims, protocol, target, cap, timing, strong_model,
               seq_epoch_s, modelled_seq_epoch_s, runs_root, seq_run, seq_2eta, n_train, n_val, runner,
               sweep, invocation, collapse_loss) -> None:
    workers = study.workers
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parents[2]).stdout.strip() or "unknown"
    except OSError:
        rev = "unknown"
    versions = json.loads((seq_run / "config.json").read_text()).get("versions", {})
    claims_md = _md_table(["claim", "paper", "ours", "verdict"],
                          [[c["claim"], c["paper"], c["ours"], f"**{c['verdict']}**"] for c in claims])
    conv_rows = [[m] + [_epochs(cells, m, n) or "not run" for n in workers] for m in study.modes]
    fail_rows = [[m, n, s, st, ep, _f(v, 6)] for m, n, s, st, ep, v in failures(cells)]
    timing_rows = [[b, f"{s * 1e3:.1f}"] for b, s in timing["step_seconds"].items()]
    ar_rows = [[n, f"{s * 1e3:.2f}"] for n, s in timing["allreduce_seconds"].items()]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"""# Scaling study: ours next to Cunha et al. (HPML 2018)

Preset `{name}` ({'real runs: ' + runner if runner else 'emulated workers, modelled time'}); generated {when}
by `make repro{'' if name == 'default' else ' PRESET=' + name}` at git revision `{rev}`. The training runs behind it
took {_runs_minutes(runs_root):.1f} min by their own clocks (excluding process start-up); {invocation}.

## Claims

{claims_md}
Evidence: each verdict comes from the cells below (epochs to target per mode, N and seed); a cell
counts as reached only if every seed reached the target. Runs that did not are listed with their status
and last validation loss.

## Protocol: paper vs ours

{_md_table(["point", "paper", "ours", "difference and why"], protocol)}
## Settings

- Data: {n_train} training and {n_val} validation synthetic LUNA-like cubes of 16^3 (`python -m deepdensity.data synth`),
  not LUNA16: the paper's absolute target belongs to its data, so the target is calibrated as the paper describes it.
- Epochs: `{cfg.epoch_definition}` ({'every worker walks one whole pass of the training set per epoch' if cfg.epoch_definition == 'per_worker' else 'the workers share one pass per epoch'}).
- Target: validation MSLE **{target:.6g}**, what the sequential run reaches after {study.calibration_epochs} epochs
  (paper: 0.0016384, about 100 epochs); cap {cap} epochs (paper: 400). Stop at the first non-finite loss{
  f"; a run with no new best validation loss in {cfg.stall_patience} epochs stops as `stalled`" if cfg.stall_patience else ""}.
- Model: K = {cfg.n_components}, conv filters {list(cfg.conv_filters)} of {list(cfg.conv_kernels)}^3, stride
  {list(cfg.conv_strides)}, latent {cfg.latent_dim}; Adam lr {cfg.base_lr:g}, beta {cfg.beta_1}/{cfg.beta_2},
  eps {cfg.epsilon:g}; batch {cfg.batch_size}; warmup {cfg.warmup_epochs} epochs. Seeds: {study.seeds}.
- Base lr: eta = {cfg.base_lr:.6g}; the sequential run at 2 x eta {'reached' if seq_2eta['status'] == 'reached_target' else 'did not reach'}
  the target ({seq_2eta['status']} after {seq_2eta['epochs']} epochs, final val_loss {_f(seq_2eta['final_val_loss'], 6)}).
  {_lr_edge(sweep)}
- Environment: Python {versions.get('python')}, TensorFlow {versions.get('tensorflow')}, Horovod {versions.get('horovod')},
  NumPy {versions.get('numpy')}; {platform.machine()} CPU, {versions.get('gpus', 0)} GPU(s); {platform.platform()}.

## How each cell was obtained

- Convergence (epochs to target): {'real multi-worker runs' if runner else 'one process following N workers (`train.py --emulate-workers N`: same global batch, lr schedule and data order as N Horovod workers; checked against real `horovodrun -np 2` by the tests). Strong scaling at every N takes the sequential run'}{'' if runner else "'s path, which a test shows `horovodrun -np 2` follows"}.
- Time: every cell is epochs to target x seconds per epoch. N = 1: **measured** here, median epoch
  {seq_epoch_s:.2f} s. N > 1: **modelled** with the paper's T_S + T_P / n + c log2 n built from parts measured here
  (the model predicts {modelled_seq_epoch_s:.2f} s at N = 1 against the measured {seq_epoch_s:.2f} s):
  a step costs {timing['step_fixed_s'] * 1e3:.2f} ms + {timing['per_sample_s'] * 1e3:.3f} ms per sample of the
  per-worker batch + {timing['allreduce_per_doubling_s'] * 1e3:.2f} ms of allreduce per doubling of N; evaluation
  {timing['eval_per_sample_s'] * 1e3:.3f} ms per validation cube, shared by the workers. For strong scaling this is
  T_S = {strong_model.t_serial:.2f} s, T_P = {strong_model.t_parallel:.2f} s, c = {strong_model.c_comm:.3f} s per epoch.
  Every worker is assumed to be a device like this 2-core CPU, as each K80 was one device in the paper.

Step time per batch (ms), measured: {', '.join(f'{b}: {s}' for b, s in timing_rows)}.
Gloo allreduce of {timing['n_weights']:,} float32 gradients (ms), measured on this host: {', '.join(f'N={n}: {s}' for n, s in ar_rows)}.

## Table I: strong scaling

{(out / 'table1.md').read_text().split(chr(10), 2)[2]}
## Table II: weak scaling, warmup, linear scaling rule

{(out / 'table2.md').read_text().split(chr(10), 2)[2]}
## Epochs to target (or status and epochs run)

{_md_table(['mode'] + [f'N={n}' for n in workers], conv_rows)}
Runs that did not reach the target (the paper's NaN cells). For scale: the target is {_f(target, 6)}; the
collapse level, the loss of rendering the training set's mean cube for every input, is {_f(collapse_loss, 6)}.

{_md_table(['mode', 'N', 'seed', 'status', 'epochs run', 'last val_loss'], fail_rows) if fail_rows else 'none'}
## Figures

![fig2](fig2.png) ![fig3](fig3.png)

![fig4](fig4.png) ![fig5](fig5.png)

![fig1](fig1.png) {'![fig6](fig6.png)' if sweep else ''}

Fig. 1: central slices of validation cubes (top) and the densities the sequential model renders for them (bottom).
Fig. 2: time to target against N. Fig. 3: warmup at N = 8, loss and lr. Fig. 4/5: validation loss of strong and
weak scaling against (modelled) time. Fig. 6: the search for the edge of stability, validation loss per epoch
for each lr tried.
"""
    (out / "REPORT.md").write_text(text)


def _runs_minutes(runs_root: Path) -> float:
    """Sum of the study's runs' own training clocks."""
    return sum(json.loads(r.read_text()).get("seconds") or 0.0 for r in runs_root.glob("*/result.json")) / 60


def _lr_edge(sweep) -> str:
    """One sentence on how eta was chosen."""
    if not sweep:
        return "eta is fixed by the preset, not searched on this data."
    tried = ", ".join(f"{r['lr']:.4g} seed {r.get('seed', 0)} {'diverges' if r['diverges'] else 'converges'}"
                      for r in sweep["probes"])
    collapse = (f", ending below the collapse level {sweep['collapse_loss']:.4g} (the training set's mean cube "
                f"for every input)" if sweep.get("collapse_loss") is not None else "")
    return (f"eta is the edge of stability on this data: the largest lr on the grid {sweep['grid_base_lr']:g} x "
            f"sqrt(2)^k that converges over {sweep['epochs']} sequential epochs for every seed{collapse} "
            f"(tried: {tried}; Fig. 6).")


def _sweep_figure(path: Path, sweep: dict, plt) -> None:
    """Validation loss per epoch of every lr (and seed) the edge search tried, the edge in
    bold, the collapse level dashed."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    cmap = plt.get_cmap("plasma")
    probes = sweep["probes"]
    ks = sorted({r["k"] for r in probes})
    styles = ["-", "--", ":", "-."]
    for r in probes:
        vals = [math.nan if v is None else v for v in r["val_losses"]]
        edge = math.isclose(r["lr"], sweep["edge_lr"])
        seed = r.get("seed", 0)
        ax.plot(range(1, len(vals) + 1), vals, color=cmap(ks.index(r["k"]) / max(1, len(ks))),
                ls=styles[sweep.get("seeds", [seed]).index(seed) % len(styles)], lw=2.5 if edge else 1,
                label=f"lr {r['lr']:.3g} s{seed}" + (" (edge)" if edge else " diverges" if r["diverges"] else ""))
    if sweep.get("collapse_loss") is not None:
        ax.axhline(sweep["collapse_loss"], color="k", ls="--", lw=0.8, label="collapse level (mean cube)")
    ax.set(xlabel="epoch", ylabel="validation MSLE", yscale="log",
           title="Edge of stability: the largest lr that converges on every seed")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _figure1(path: Path, cfg, seq_run: Path, plt) -> None:
    """Central slices of a few validation cubes next to the density the trained model renders."""

    from deepdensity.data.cubes import load_cubes, to_density
    from deepdensity.model.autoencoder import build_model
    cubes = load_cubes(cfg.data_path)
    x, _ = to_density(cubes.val[:4])
    model = build_model(cfg, cubes.grid_size, cubes.ndim)
    model.load_weights(str(seq_run / "weights.h5"))
    pred = model.predict(x[..., None], verbose=0)[..., 0]
    g = cubes.grid_size // 2
    fig, axes = plt.subplots(2, len(x), figsize=(2.2 * len(x), 4.6))
    for i in range(len(x)):
        vmax = float(max(x[i, g].max(), pred[i, g].max()))
        axes[0, i].imshow(x[i, g], cmap="gray", vmin=0, vmax=vmax)
        axes[1, i].imshow(pred[i, g], cmap="gray", vmin=0, vmax=vmax)
        for a in axes[:, i]:
            a.set_xticks([])
            a.set_yticks([])
    axes[0, 0].set_ylabel("input")
    axes[1, 0].set_ylabel("DeepDensity")
    fig.suptitle("Central slices: input cubes and rendered mixtures")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
