"""The default study's figures, drawn from its record alone, and the clock names and spacing
every figure of the study shares (the axes and legends every figure of the project shares are
utils/plots.py's). Every figure shows every seed (or says which it shows) as a dot
and a median as a line, draws a run that missed the target in a panel of its own (never at a data
height), names the clock on every time axis, and keeps its legend outside the axes so that no
line crosses it. Fig. 2, time to target against N, is against_n.py's, the beyond study's drawing;
the figures of validation loss over a run (Figs. 3-5) are loss_figures.py's."""

from __future__ import annotations

import math
from pathlib import Path

from deepdensity.scaling import policies
from deepdensity.study.core import clocks
from deepdensity.study.core.cells import efficiency_table, timed_under
from deepdensity.study.core.protocol_text import PAPER_TABLE1, PAPER_TABLE2
from deepdensity.study.report.render import cells_at
from deepdensity.utils.plots import LEGEND_OUTSIDE, log_y_labels, plain_ticks, save_figure


def clock_name(cells: list, clock=None) -> str:
    """The clock the times are on: `clock`'s when given, else the cells' own (claims.cells_of:
    this host's seconds per pass, or a real run's own clock)."""
    if clock is None and any(c.time_source == "measured" for c in cells):
        return "the runs' own clocks"
    return clocks.label(clock.name if clock is not None else clocks.HOST)


def clock_label(cells: list, clock=None, unit: str = "pass") -> str:
    """The clock the times are on (clock_name), as an axis label says it: with how a time is
    made of it, per `unit` ("pass", "pass_at_n": a pass's seconds at the run's N, or "epoch")."""
    name = clock_name(cells, clock)
    if clock is None and any(c.time_source == "measured" for c in cells):
        return name
    return {
        "pass": f"{name}, passes x s/pass",
        "pass_at_n": f"{name}, passes x s/pass at N",
        "epoch": f"{name}, epochs x s/epoch at N",
    }[unit]


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


def spot(n: float, i: int, modes: int, j: int = 0, seeds: int = 1) -> float:
    """Where seed j of the i-th of `modes` modes sits at N = n on a log axis: the modes 0.18 of a
    doubling apart, their seeds spread over 0.16 of one, so that seeds with equal times (the
    four N = 32 runs of one epoch) show as separate dots rather than one."""
    mode = 0.18 * (i - (modes - 1) / 2)
    seed = 0.16 * (j / (seeds - 1) - 0.5) if seeds > 1 else 0.0
    return n * 2 ** (mode + seed)


def efficiency_figure(path: Path, cells: list, modes, workers, plt, clock=None, base=None) -> None:
    """Efficiency T1 / (N TN) against N, ours (median over seeds) beside the paper's Tables I-II
    (its own cluster's), one clock of ours a panel: the cells' own (Tables I-II's: this host's,
    or real runs' own clocks) and, where `clock` and `base` are given, that clock's (the paper's,
    the verdicts'; timed_under). A cell without an efficiency is no
    point: its line breaks there, and a strip above says why (ours: a seed missed the target, or
    not run; the paper's: NaN), so that a mode that reached no N > 1 (linear) still shows and
    nothing is drawn at a value it does not have."""
    panels = [(f"ours on {clock_name(cells)} (Tables I-II)", cells)]
    if clock is not None:
        panels.append((f"ours on {clock_name(cells, clock)} (the verdicts')", timed_under(cells, clock, base)))
    fig, axes = plt.subplots(
        2,
        len(panels),
        figsize=(4.6 * len(panels) + 2.4, 5.6),
        sharex="col",
        sharey="row",
        squeeze=False,
        gridspec_kw={"height_ratios": [1.2, 4]},
    )
    for col, (title, cs) in enumerate(panels):
        _efficiency_panel(axes[0][col], axes[1][col], cs, modes, workers)
        axes[0][col].set_title(title + "\nbeside the paper's Tables I-II (its own cluster)", fontsize=9)
        axes[1][col].set(xscale="log", xlabel="workers N", ylim=(0, None))
        plain_ticks(axes[1][col].xaxis, workers)
        axes[1][col].set_xlim(min(workers) / 2**0.5, max(workers) * 2**0.5)
        axes[1][col].grid(alpha=0.3, which="both")
    axes[1][0].set_ylabel("efficiency %, T1 / (N TN)")
    axes[1][-1].legend(**LEGEND_OUTSIDE)
    fig.suptitle(
        "Efficiency: ours (filled, solid), the paper's Tables I-II (open, dashed); above: cells with no efficiency",
        fontsize=10,
    )
    save_figure(fig, path)


def _efficiency_panel(strip, ax, cells: list, modes, workers) -> None:
    """One clock's efficiencies (ours, from `cells`' times) and the paper's, with the strip of
    cells that have none. The paper's markers are open and larger than ours, so that at N = 1,
    where every mode is 100 %, each shows as a ring around ours."""
    ours = efficiency_table(cells, modes, workers)
    rows = ["paper: NaN", "ours: not run", "ours: a seed missed"]
    for i, mode in enumerate(modes):
        color, marker = policies.get(mode).style
        ran = {n: bool(cells_at(cells, mode, n)) for n in workers}
        value = {n: ours[mode][n] if ran[n] and not math.isnan(ours[mode][n]) else None for n in workers}
        x = {n: n * 2 ** (0.1 * (i - (len(modes) - 1) / 2)) for n in workers}  # side by side where modes coincide
        for k, stretch in enumerate(line_stretches([(x[n], value[n]) for n in workers])):
            ax.plot(
                *zip(*stretch), color=color, marker=marker, ms=6, zorder=3, label=f"{mode} (ours)" if k == 0 else None
            )
        missed = [x[n] for n in workers if ran[n] and value[n] is None]
        not_run = [x[n] for n in workers if not ran[n]]
        strip.scatter(missed, [2] * len(missed), color=color, marker=marker, s=30, zorder=3)
        strip.scatter(not_run, [1] * len(not_run), color=color, marker=marker, s=30, alpha=0.5, zorder=3)
        paper = {policies.SEQUENTIAL: PAPER_TABLE1, **PAPER_TABLE2}.get(mode, {})
        ppts = [(x[n], None if math.isnan(paper[n]) else paper[n]) for n in workers if n in paper]
        only = [px for px, v in ppts if v is not None] == [x[workers[0]]] and len(ppts) > 1
        for k, stretch in enumerate(line_stretches(ppts)):
            ax.plot(
                *zip(*stretch),
                color=color,
                marker=marker,
                ls="--",
                mfc="none",
                ms=10,
                mew=1.3,
                zorder=4,
                label=(f"{mode} (paper" + (f": N = {workers[0]} only, NaN beyond)" if only else ")"))
                if k == 0
                else None,
            )
        paper_nan = [px for px, v in ppts if v is None]
        strip.scatter(
            paper_nan, [0] * len(paper_nan), facecolors="none", edgecolors=color, marker=marker, s=30, zorder=3
        )
    strip.set_yticks(range(len(rows)), rows, fontsize=8)
    strip.set_ylim(-0.6, len(rows) - 0.4)
    strip.grid(alpha=0.3, axis="x")
    strip.set_xscale("log")


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
        ax.scatter(
            [x],
            [lr],
            s=60 + 30 * runs,
            color=cmap(norm(missed / runs)),
            marker="o" if sched == "constant" else "^",
            edgecolors="k",
            zorder=3,
        )
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
    save_figure(fig, path)


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
    save_figure(fig, path)


def sweep_figure(path: Path, sweep: dict, plt) -> None:
    """Validation loss per epoch of every lr (and seed) the edge search tried: a colour per lr
    (tab10, distinct where a sequential colour map gave near-identical purples), a line style
    per seed, the edge in bold, the collapse level dashed."""
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    cmap = plt.get_cmap("tab10")
    probes = sweep["probes"]
    ks = sorted({r["k"] for r in probes})
    styles = ["-", "--", ":", "-."]
    for r in probes:
        vals = [math.nan if v is None else v for v in r["val_losses"]]
        edge = math.isclose(r["lr"], sweep["edge_lr"])
        seed = r.get("seed", 0)
        ax.plot(
            range(1, len(vals) + 1),
            vals,
            color=cmap(ks.index(r["k"]) % 10),
            ls=styles[sweep.get("seeds", [seed]).index(seed) % len(styles)],
            lw=2.5 if edge else 1.4,
            label=f"lr {r['lr']:.3g} s{seed}" + (" (edge)" if edge else " diverges" if r["diverges"] else ""),
        )
    if sweep.get("collapse_loss") is not None:
        ax.axhline(sweep["collapse_loss"], color="k", ls="--", lw=0.8, label="collapse level (mean cube)")
    ax.set(
        xlabel="epoch",
        ylabel="validation MSLE",
        yscale="log",
        title="Edge of stability: the largest lr that converges on every seed",
    )
    log_y_labels(ax)
    ax.legend(**LEGEND_OUTSIDE)
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, path)
