"""The default study's reports: Tables I-II, Figures 1-6 and REPORT.md (templates/report.md),
each next to the paper's, rendered from a StudyRecord."""
from __future__ import annotations

import datetime
import json
import math
import platform
from pathlib import Path

from deepdensity.scaling.rules import sample_epoch_losses
from deepdensity.study.record import StudyRecord
from deepdensity.study.render import (MODE_STYLE, cells_at, epochs_listing, fill, fmt, git_revision, host, md_table,
                                      pyplot, runs_minutes, time_range, write_csv)
from deepdensity.study.tables import PAPER_TABLE1, PAPER_TABLE2, efficiency_table, failures, median_time
from deepdensity.training.runs import read_metrics


def write_reports(out: Path, record: StudyRecord) -> None:
    """Tables I-II, the figures, REPORT.md and the cells, claims and protocol as JSON."""
    out.mkdir(parents=True, exist_ok=True)
    tables = _tables(out, record.study, record.cells)
    _figures(out, record)
    (out / "REPORT.md").write_text(fill("report.md", **_report_fields(record, tables)))
    (out / "cells.json").write_text(json.dumps([c.__dict__ for c in record.cells], indent=2))
    (out / "claims.json").write_text(json.dumps(record.claims, indent=2))
    (out / "protocol.json").write_text(json.dumps(record.protocol, indent=2))


def _tables(out: Path, study, cells) -> tuple:
    """Tables I and II written as .csv and .md; returns their markdown tables for REPORT.md."""
    workers = study.workers
    eff = efficiency_table(cells, study.modes, workers)
    src = {(c.mode, c.n): c.time_source for c in cells}

    # Table I: strong scaling
    head1 = ["N", "epochs to target", "s / epoch", "time to target (s)", "time", "efficiency % (ours)",
             "efficiency % (paper)"]
    rows1 = [[n, epochs_listing(cells, "strong", n), fmt(cells_at(cells, "strong", n)[0].epoch_seconds),
              time_range(cells, "strong", n), src[("strong", n)], fmt(eff["strong"][n]), fmt(PAPER_TABLE1.get(n))]
             for n in workers] if "strong" in study.modes else []
    write_csv(out / "table1.csv", head1, rows1)
    table1 = md_table(head1, rows1)
    (out / "table1.md").write_text("Table I: strong-scaling efficiency, T1 / (N TN), ours next to the paper's.\n\n"
                                   + table1)

    # Table II: weak, warmup, linear
    modes2 = [m for m in ("weak", "warmup", "linear") if m in study.modes]
    head2 = ["N"] + [f"{m} {w}" for m in modes2 for w in ("(ours)", "(paper)")] + ["time"]
    rows2 = [[n] + [v for m in modes2 for v in (fmt(eff[m][n]) if (m, n) in src else "not run",
                                                 fmt(PAPER_TABLE2[m].get(n)))]
             + [src.get((modes2[0], n), "") if modes2 else ""] for n in workers]
    write_csv(out / "table2.csv", head2, rows2)
    table2 = md_table(head2, rows2)
    (out / "table2.md").write_text("Table II: efficiency of weak scaling, warmup and the linear scaling rule, "
                                   "T1 / (N TN) on time to target; NaN where the target was not reached.\n\n"
                                   + table2)
    return table1, table2


def _figures(out: Path, r: StudyRecord) -> None:
    plt = pyplot()
    _time_to_target_figure(out / "fig2.png", r, plt)
    warmup8 = cells_at(r.cells, "warmup", 8)
    if warmup8:
        _warmup_figure(out / "fig3.png", read_metrics(r.runs_root / warmup8[0].run), r.target, plt)
    for fig_name, mode in (("fig4.png", "strong"), ("fig5.png", "weak")):
        if mode in r.study.modes:
            _loss_against_time_figure(out / fig_name, r, mode, plt)
    _figure1(out / "fig1.png", r.cfg, r.seq_run, plt)
    if r.sweep:
        _sweep_figure(out / "fig6.png", r.sweep, plt)


def _time_to_target_figure(path: Path, r: StudyRecord, plt) -> None:
    """Fig. 2: time to target against N, one line per mode."""
    workers = r.study.workers
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for mode in r.study.modes:
        pts = [(n, median_time(r.cells, mode, n)) for n in workers]
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _warmup_figure(path: Path, m: list, target: float, plt) -> None:
    """Fig. 3: warmup at N = 8, training and validation loss and the lr per epoch."""
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _loss_against_time_figure(path: Path, r: StudyRecord, mode: str, plt) -> None:
    """Figs. 4 and 5: validation loss of strong or weak scaling against (modelled) time."""
    workers = r.study.workers
    fig, ax = plt.subplots(figsize=(6, 4.2))
    cmap = plt.get_cmap("viridis")
    for i, n in enumerate(workers):
        if not cells_at(r.cells, mode, n):
            continue                          # not run at this N by the preset
        c = cells_at(r.cells, mode, n)[0]
        vals = [row["val_loss"] for row in read_metrics(r.runs_root / c.run)]
        if mode == "strong" and not r.runner:   # read off the sequential run at its epoch ends
            vals = sample_epoch_losses(vals, n)[:c.epochs]
        ax.plot([(e + 1) * c.epoch_seconds for e in range(len(vals))], vals,
                color=cmap(i / max(1, len(workers) - 1)), label=f"N = {n}")
    ax.axhline(r.target, color="gray", ls="--", lw=1, label="target")
    ax.set(xlabel="time (s; epochs x s/epoch at N)", ylabel="validation MSLE", yscale="log",
           title=f"{mode} scaling: validation loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _report_fields(r: StudyRecord, tables: tuple) -> dict:
    """The $fields of templates/report.md; `tables` are Tables I and II in markdown."""
    return {**_header_fields(r), **_settings_fields(r), **_timing_fields(r), **_result_fields(r, tables)}


def _header_fields(r: StudyRecord) -> dict:
    claims = md_table(["claim", "paper", "ours", "verdict"],
                      [[c["claim"], c["paper"], c["ours"], f"**{c['verdict']}**"] for c in r.claims])
    return {"name": r.name, "how_run": "real runs: " + r.runner if r.runner else "emulated workers, modelled time",
            "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "make_command": "make repro" + ("" if r.name == "default" else " PRESET=" + r.name),
            "revision": git_revision(), "runs_minutes": f"{runs_minutes(r.runs_root):.1f}",
            "invocation": r.invocation, "claims_table": claims,
            "protocol_table": md_table(["point", "paper", "ours", "difference and why"], r.protocol)}


def _settings_fields(r: StudyRecord) -> dict:
    cfg, s2 = r.cfg, r.seq_2eta
    versions = json.loads((r.seq_run / "config.json").read_text()).get("versions", {})
    per_worker = cfg.epoch_definition == "per_worker"
    return {
        "n_train": r.n_train, "n_val": r.n_val, "epoch_definition": cfg.epoch_definition,
        "epoch_meaning": "every worker walks one whole pass of the training set per epoch" if per_worker
        else "the workers share one pass per epoch",
        "target": f"{r.target:.6g}", "calibration_epochs": r.study.calibration_epochs, "cap": r.cap,
        "stall_rule": f"; a run with no new best validation loss in {cfg.stall_patience} epochs stops as "
                      f"`stalled`" if cfg.stall_patience else "",
        "model_line": f"K = {cfg.n_components}, conv filters {list(cfg.conv_filters)} of {list(cfg.conv_kernels)}^3, "
                      f"stride\n  {list(cfg.conv_strides)}, latent {cfg.latent_dim}; Adam lr {cfg.base_lr:g}, beta "
                      f"{cfg.beta_1}/{cfg.beta_2},\n  eps {cfg.epsilon:g}; batch {cfg.batch_size}; warmup "
                      f"{cfg.warmup_epochs} epochs. Seeds: {r.study.seeds}.",
        "eta": f"{cfg.base_lr:.6g}",
        "double_eta_outcome": "(not run)" if s2 is None else
        f"{'reached' if s2['status'] == 'reached_target' else 'did not reach'}\n  the target ({s2['status']} after "
        f"{s2['epochs']} epochs, final val_loss {fmt(s2['final_val_loss'], 6)})",
        "lr_edge": _lr_edge(r.sweep),
        "environment": f"Python {versions.get('python')}, TensorFlow {versions.get('tensorflow')}, Horovod "
                       f"{versions.get('horovod')},\n  NumPy {versions.get('numpy')}; {host()}, "
                       f"{versions.get('gpus', 0)} GPU(s); {platform.platform()}.",
    }


def _timing_fields(r: StudyRecord) -> dict:
    t, m = r.timing, r.strong_model
    emulated = ("one process following N workers (`train.py --emulate-workers N`: same global batch, lr "
                "schedule and data order as N Horovod workers; checked against real `horovodrun -np 2` by the "
                "tests). Strong scaling at every N takes the sequential run's path, which a test shows "
                "`horovodrun -np 2` follows")
    model = (f"N = 1: **measured** here, median epoch\n  {r.seq_epoch_s:.2f} s. N > 1: **modelled** with the "
             f"paper's T_S + T_P / n + c log2 n built from parts measured here\n  (the model predicts "
             f"{r.modelled_seq_epoch_s:.2f} s at N = 1 against the measured {r.seq_epoch_s:.2f} s):\n  a step costs "
             f"{t['step_fixed_s'] * 1e3:.2f} ms + {t['per_sample_s'] * 1e3:.3f} ms per sample of the\n  per-worker "
             f"batch + {t['allreduce_per_doubling_s'] * 1e3:.2f} ms of allreduce per doubling of N; evaluation\n  "
             f"{t['eval_per_sample_s'] * 1e3:.3f} ms per validation cube, shared by the workers. For strong scaling "
             f"this is\n  T_S = {m.t_serial:.2f} s, T_P = {m.t_parallel:.2f} s, c = {m.c_comm:.3f} s per epoch.\n  "
             f"Every worker is assumed to be a device like this host ({host()}), as each K80 was one device in the "
             f"paper.")
    return {"convergence_source": "real multi-worker runs" if r.runner else emulated, "time_model": model,
            "step_times": ", ".join(f"{b}: {s * 1e3:.1f}" for b, s in t["step_seconds"].items()),
            "n_weights": f"{t['n_weights']:,}",
            "allreduce_times": ", ".join(f"N={n}: {s * 1e3:.2f}" for n, s in t["allreduce_seconds"].items())}


def _result_fields(r: StudyRecord, tables: tuple) -> dict:
    workers = r.study.workers
    conv_rows = [[m] + [epochs_listing(r.cells, m, n) or "not run" for n in workers] for m in r.study.modes]
    fail_rows = [[m, n, s, st, ep, fmt(v, 6)] for m, n, s, st, ep, v in failures(r.cells)]
    return {"table1": tables[0], "table2": tables[1],
            "convergence_table": md_table(["mode"] + [f"N={n}" for n in workers], conv_rows),
            "target_6": fmt(r.target, 6), "collapse_6": fmt(r.collapse_loss, 6),
            "failures_table": md_table(["mode", "N", "seed", "status", "epochs run", "last val_loss"], fail_rows)
            if fail_rows else "none",
            "fig6": "![fig6](fig6.png)" if r.sweep else ""}


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
