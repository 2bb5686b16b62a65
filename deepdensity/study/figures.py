"""The default study's figures, drawn from its record alone. Every figure shows every seed (or
says which it shows), marks a cell that missed the target instead of drawing through it, and
keeps its legend outside the axes so that no line crosses it."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from deepdensity.scaling.rules import sample_epoch_losses
from deepdensity.scaling import policies
from deepdensity.study.render import cells_at
from deepdensity.study.tables import PAPER_TABLE1, PAPER_TABLE2, efficiency_table

LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "fontsize": 8, "borderaxespad": 0.0}


def _save(fig, path: Path, plt) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plain_ticks(axis, ticks) -> None:
    """Log axis labelled at `ticks` in plain numbers, with no minor labels ("9 x 10^-1")."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, ScalarFormatter
    axis.set_major_locator(FixedLocator(list(ticks)))
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def plain_y(ax) -> None:
    """A log y axis labelled in plain numbers ("40", not "4 x 10^1"), minor ticks unlabelled."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))   # labels within one decade too
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def line_stretches(segments: list) -> list:
    """Consecutive stretches of points with a value: a gap (None) breaks the line."""
    out, cur = [], []
    for x, y in segments:
        if y is None:
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append((x, y))
    return out + ([cur] if cur else [])


def time_to_target_figure(path: Path, cells: list, modes, workers, plt) -> None:
    """Fig. 2: time to target against N: median over seeds where every seed reached the target
    (line) and every seed that reached it (dots); above, in a panel of its own, how many seeds
    of each cell missed the target (a row per mode), so that no miss is drawn as a time."""
    fig, (top, ax) = plt.subplots(2, 1, figsize=(7.4, 5.2), sharex=True, gridspec_kw={"height_ratios": [1, 4]})
    for i, mode in enumerate(modes):
        color, marker = policies.get(mode).style
        medians = []
        for n in workers:
            cs = cells_at(cells, mode, n)
            ts = [c.time_to_target_s for c in cs if c.time_to_target_s is not None]
            jitter = n * (1 + 0.04 * (i - len(modes) / 2))
            ax.scatter([jitter] * len(ts), ts, color=color, marker=marker, s=14, alpha=0.45, zorder=2)
            if cs and len(ts) < len(cs):
                top.scatter([n], [i], color=color, marker="x", s=40, zorder=3)
                top.annotate(f"{len(cs) - len(ts)}/{len(cs)}", (n, i), textcoords="offset points", xytext=(7, -3),
                             fontsize=7, color=color)
            medians.append((n, statistics.median(ts) if cs and len(ts) == len(cs) else None))
        for k, stretch in enumerate(line_stretches(medians)):
            ax.plot(*zip(*stretch), color=color, marker=marker, label=mode if k == 0 else None, zorder=4)
        if not line_stretches(medians):
            ax.plot([], [], color=color, marker=marker, label=f"{mode} (no cell reached on every seed)")
    top.set_yticks(range(len(modes)), list(modes), fontsize=7)
    top.set_ylim(-0.7, len(modes) - 0.3)
    top.set_title("Time to target: median (line), every seed (dots); above: seeds that missed it (missed / seeds)",
                  fontsize=9)
    top.grid(alpha=0.3, axis="x")
    ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel="time to target (s, this host's clock)")
    plain_ticks(ax.xaxis, workers)
    plain_y(ax)
    ax.grid(alpha=0.3, which="both")
    ax.legend(**LEGEND_OUTSIDE)
    _save(fig, path, plt)


def efficiency_figure(path: Path, cells: list, modes, workers, plt) -> None:
    """Efficiency T1 / (N TN) against N, ours (median over seeds) next to the paper's Tables I-II.
    A cell without an efficiency (a seed missed the target) is a cross on the axis, ours filled
    and the paper's open, so that a mode that reached no N > 1 (linear) still shows."""
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    ours = efficiency_table(cells, modes, workers)
    for i, mode in enumerate(modes):
        color, marker = policies.get(mode).style
        shift = 1 + 0.03 * (i - len(modes) / 2)            # side by side where modes coincide (N = 1)
        pts = [(n * shift, None if math.isnan(ours[mode][n]) else ours[mode][n])
               for n in workers if cells_at(cells, mode, n)]
        for k, stretch in enumerate(line_stretches(pts)):
            ax.plot(*zip(*stretch), color=color, marker=marker, label=f"{mode} (ours)" if k == 0 else None)
        missed = [x for x, y in pts if y is None]
        ax.scatter(missed, [0] * len(missed), color=color, marker="x", s=40, clip_on=False, zorder=3)
        paper = {policies.SEQUENTIAL: PAPER_TABLE1, **PAPER_TABLE2}.get(mode, {})
        ppts = [(n * shift, None if math.isnan(paper[n]) else paper[n]) for n in workers if n in paper]
        for k, stretch in enumerate(line_stretches(ppts)):
            ax.plot(*zip(*stretch), color=color, marker=marker, ls="--", mfc="none",
                    label=f"{mode} (paper)" if k == 0 else None)
    ax.scatter([], [], color="gray", marker="x", label="ours: a seed missed the target")
    ax.set(xscale="log", xlabel="workers N", ylabel="efficiency %", ylim=(-4, None),
           title="Efficiency: ours (filled), the paper's (open, dashed)")
    plain_ticks(ax.xaxis, workers)
    ax.grid(alpha=0.3, which="both")
    ax.legend(**LEGEND_OUTSIDE)
    _save(fig, path, plt)


def warmup_figure(path: Path, curves: dict, target: float, plt) -> None:
    """Fig. 3: warmup at N = 8: validation loss (left) and lr (right) per epoch, every seed."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.8))
    cmap = plt.get_cmap("tab10")
    for i, (run, c) in enumerate(sorted(curves.items())):
        ep = range(1, len(c["val_loss"]) + 1)
        vals = [math.nan if v is None else v for v in c["val_loss"]]
        ax.plot(ep, vals, color=cmap(i), marker=".", label=run)
        ax2.plot(ep, c["lr"], color=cmap(i), marker=".", label=run)
    ax.axhline(target, color="gray", ls="--", lw=1, label="target")
    ax.set(xlabel="epoch", ylabel="validation MSLE", yscale="log", title="Warmup, N = 8: validation loss")
    ax2.set(xlabel="epoch", ylabel="learning rate (end of epoch)", title="Warmup, N = 8: lr")
    ax2.legend(**LEGEND_OUTSIDE)
    ax.legend(fontsize=7, loc="best")
    _save(fig, path, plt)


def collapse_figure(path: Path, groups: list, plt) -> None:
    """Share of runs that missed the target at each global batch and (peak) lr multiple, the
    colour bar giving the share; a constant lr and a warmup to the same peak sit side by side at
    their true lr."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    cmap, norm = plt.get_cmap("coolwarm"), Normalize(0.0, 1.0)
    for b, lr, sched, _, runs, missed in groups:
        x = b * (0.92 if sched == "constant" else 1.09)
        ax.scatter([x], [lr], s=60 + 30 * runs, color=cmap(norm(missed / runs)),
                   marker="o" if sched == "constant" else "^", edgecolors="k", zorder=3)
        ax.annotate(f"{missed}/{runs}", (x, lr), textcoords="offset points", xytext=(0, 11), ha="center", fontsize=7)
    ax.scatter([], [], marker="o", color="gray", label="constant lr (left)")
    ax.scatter([], [], marker="^", color="gray", label="warmup to the peak lr (right)")
    ax.set(xlabel="global batch", ylabel="(peak) lr / eta", title="Runs that missed the target (missed / runs)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    plain_ticks(ax.xaxis, sorted({g[0] for g in groups}))
    plain_ticks(ax.yaxis, sorted({g[1] for g in groups}))
    lrs = sorted({g[1] for g in groups})
    ax.set_ylim(lrs[0] / 1.5, lrs[-1] * 1.6)
    ax.grid(alpha=0.3, which="both")
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="share of runs that missed the target", pad=0.02)
    ax.legend(loc="upper left", fontsize=7)
    _save(fig, path, plt)


def loss_against_time_figure(path: Path, cells: list, mode: str, workers, curves: dict, target: float, derived: bool,
                             plt) -> None:
    """Figs. 4 and 5: validation loss of strong or weak scaling against (modelled) time, one
    colour and marker per N, every seed (markers on every epoch, so one-epoch runs show too).
    Derived strong scaling reads every N off the same sequential runs: its panels say so."""
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    cmap = plt.get_cmap("tab10")
    markers = "osD^vP*X"
    for i, n in enumerate(workers):
        for j, c in enumerate(sorted(cells_at(cells, mode, n), key=lambda c: c.seed)):
            vals = curves[c.run]["val_loss"]
            if derived:                    # read off the sequential run at its epoch ends
                vals = sample_epoch_losses([math.inf if v is None else v for v in vals], n)[:c.epochs]
            ax.plot([(e + 1) * c.epoch_seconds for e in range(len(vals))],
                    [math.nan if v is None or math.isinf(v) else v for v in vals], marker=markers[i % len(markers)],
                    ms=3, lw=1, color=cmap(i % 10), alpha=0.8, label=f"N = {n}" if j == 0 else None)
    ax.axhline(target, color="gray", ls="--", lw=1, label="target")
    note = " (N > 1 read off the sequential runs)" if derived else ""
    ax.set(xlabel="time (s; epochs x modelled s/epoch at N)", ylabel="validation MSLE", yscale="log",
           title=f"{mode} scaling: validation loss, every seed{note}")
    plain_y(ax)
    ax.grid(alpha=0.3, which="both")
    ax.legend(**LEGEND_OUTSIDE)
    _save(fig, path, plt)


def figure1(path: Path, slices: dict, plt) -> None:
    """Central slices of a few validation cubes next to the density the trained model renders."""
    x, pred = slices["inputs"], slices["rendered"]
    fig, axes = plt.subplots(2, len(x), figsize=(2.2 * len(x), 4.6))
    for i in range(len(x)):
        vmax = max(max(map(max, x[i])), max(map(max, pred[i])))
        axes[0, i].imshow(x[i], cmap="gray", vmin=0, vmax=vmax)
        axes[1, i].imshow(pred[i], cmap="gray", vmin=0, vmax=vmax)
        for a in axes[:, i]:
            a.set_xticks([])
            a.set_yticks([])
    axes[0, 0].set_ylabel("input")
    axes[1, 0].set_ylabel("DeepDensity")
    fig.suptitle("Central slices: input cubes and rendered mixtures (first seed's sequential model)")
    _save(fig, path, plt)


def sweep_figure(path: Path, sweep: dict, plt) -> None:
    """Validation loss per epoch of every lr (and seed) the edge search tried, the edge in
    bold, the collapse level dashed."""
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
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
    ax.legend(**{**LEGEND_OUTSIDE, "fontsize": 7})
    ax.grid(alpha=0.3, which="both")
    _save(fig, path, plt)
