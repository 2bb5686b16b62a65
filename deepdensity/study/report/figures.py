"""The default study's figures, drawn from its record alone, and the clock names and spacing
every figure of the study shares (the axes and legends every figure of the project shares are
utils/plots.py's). Every figure shows every seed (or says which it shows) as a dot
and a median as a line, draws a run that missed the target in a panel of its own (never at a data
height), names the clock on every time axis, and keeps its legend outside the axes so that no
line crosses it. Fig. 2, time to target against N, is against_n.py's, the beyond study's drawing.

The figures of validation loss over a run (Figs. 3-5): a run's time is cells.seconds_of_passes
of the cell's own clock, the one function the tables' time to target goes through, so that where
a curve ends is where Tables I-II put the run; a run that missed the target ends in a cross."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.core import clocks
from deepdensity.study.core import curves as run_curves
from deepdensity.study.core.cells import efficiency_table, seconds_of_passes, timed_under
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
    return {"pass": f"{name}, passes x s/pass", "pass_at_n": f"{name}, passes x s/pass at N",
            "epoch": f"{name}, epochs x s/epoch at N"}[unit]


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
    fig, axes = plt.subplots(2, len(panels), figsize=(4.6 * len(panels) + 2.4, 5.6), sharex="col", sharey="row",
                             squeeze=False, gridspec_kw={"height_ratios": [1.2, 4]})
    for col, (title, cs) in enumerate(panels):
        _efficiency_panel(axes[0][col], axes[1][col], cs, modes, workers)
        axes[0][col].set_title(title + "\nbeside the paper's Tables I-II (its own cluster)", fontsize=9)
        axes[1][col].set(xscale="log", xlabel="workers N", ylim=(0, None))
        plain_ticks(axes[1][col].xaxis, workers)
        axes[1][col].set_xlim(min(workers) / 2 ** 0.5, max(workers) * 2 ** 0.5)
        axes[1][col].grid(alpha=0.3, which="both")
    axes[1][0].set_ylabel("efficiency %, T1 / (N TN)")
    axes[1][-1].legend(**LEGEND_OUTSIDE)
    fig.suptitle("Efficiency: ours (filled, solid), the paper's Tables I-II (open, dashed); "
                 "above: cells with no efficiency", fontsize=10)
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
        x = {n: n * 2 ** (0.1 * (i - (len(modes) - 1) / 2)) for n in workers}   # side by side where modes coincide
        for k, stretch in enumerate(line_stretches([(x[n], value[n]) for n in workers])):
            ax.plot(*zip(*stretch), color=color, marker=marker, ms=6, zorder=3,
                    label=f"{mode} (ours)" if k == 0 else None)
        missed = [x[n] for n in workers if ran[n] and value[n] is None]
        not_run = [x[n] for n in workers if not ran[n]]
        strip.scatter(missed, [2] * len(missed), color=color, marker=marker, s=30, zorder=3)
        strip.scatter(not_run, [1] * len(not_run), color=color, marker=marker, s=30, alpha=0.5, zorder=3)
        paper = {policies.SEQUENTIAL: PAPER_TABLE1, **PAPER_TABLE2}.get(mode, {})
        ppts = [(x[n], None if math.isnan(paper[n]) else paper[n]) for n in workers if n in paper]
        only = [px for px, v in ppts if v is not None] == [x[workers[0]]] and len(ppts) > 1
        for k, stretch in enumerate(line_stretches(ppts)):
            ax.plot(*zip(*stretch), color=color, marker=marker, ls="--", mfc="none", ms=10, mew=1.3, zorder=4,
                    label=(f"{mode} (paper" + (f": N = {workers[0]} only, NaN beyond)" if only else ")"))
                    if k == 0 else None)
        paper_nan = [px for px, v in ppts if v is None]
        strip.scatter(paper_nan, [0] * len(paper_nan), facecolors="none", edgecolors=color, marker=marker, s=30,
                      zorder=3)
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
        ax.plot(range(1, len(vals) + 1), vals, color=cmap(ks.index(r["k"]) % 10),
                ls=styles[sweep.get("seeds", [seed]).index(seed) % len(styles)], lw=2.5 if edge else 1.4,
                label=f"lr {r['lr']:.3g} s{seed}" + (" (edge)" if edge else " diverges" if r["diverges"] else ""))
    if sweep.get("collapse_loss") is not None:
        ax.axhline(sweep["collapse_loss"], color="k", ls="--", lw=0.8, label="collapse level (mean cube)")
    ax.set(xlabel="epoch", ylabel="validation MSLE", yscale="log",
           title="Edge of stability: the largest lr that converges on every seed")
    log_y_labels(ax)
    ax.legend(**LEGEND_OUTSIDE)
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, path)


MARKERS = "osD^vP*X"


@dataclass(frozen=True)
class RunCurve:
    """One run as Figs. 4 and 5 draw it."""
    cell: object                      # cells.Cell
    points: list                      # [(seconds, validation loss)]; a non-finite loss is nan, a gap
    end: Optional[tuple]              # (time to target as the tables have it, the target); None: missed


def run_curve(c, losses: list, per_epoch: int, by_pass: bool, target: float) -> RunCurve:
    """Cell `c`'s run on the cell's clock (c.epoch_seconds an epoch of `per_epoch` passes).
    `by_pass`: `losses` hold one loss a pass (the sequential run strong scaling is read off):
    pass p at seconds_of_passes(p), up to its passes to target, the last point at them exactly;
    else one a epoch, epoch e at seconds_of_passes(e x per_epoch), up to the epochs it ran."""
    vals = [math.nan if v is None or not math.isfinite(v) else v for v in losses]
    if by_pass:
        if c.reached:
            last = c.passes_to_target if c.passes_to_target is not None else c.epochs_to_target * per_epoch
        else:
            last = (c.epochs or 0) * per_epoch
        at = [(min(p, last), p - 1) for p in range(1, math.ceil(last) + 1)]
    else:
        at = [(e * per_epoch, e - 1) for e in range(1, (c.epochs or len(vals)) + 1)]
    points = [(seconds_of_passes(passes, c.epoch_seconds, per_epoch), vals[i]) for passes, i in at
              if i < len(vals)]
    end = (c.time_to_target_s, target) if c.reached and c.time_to_target_s is not None else None
    return RunCurve(c, points, end)


def loss_curves(cells: list, mode: str, workers, curves: dict, derived: bool, definition: str,
                target: float) -> list:
    """[(N, [RunCurve of every seed])] of `mode`, N in `workers` order. `derived`: every N is
    read off its sequential run pass by pass (strong scaling), else each run's own epochs."""
    out = []
    for n in workers:
        per_epoch = run_curves.passes_per_epoch(n, definition)
        out.append((n, [run_curve(c, curves[c.run]["val_loss"], per_epoch, derived, target)
                        for c in sorted(cells_at(cells, mode, n), key=lambda c: c.seed)]))
    return out


def _last_point(points: list) -> Optional[tuple]:
    """The last point with a finite loss: where a run that missed the target is marked."""
    return next(((x, y) for x, y in reversed(points) if not math.isnan(y)), None)


def loss_against_time_figure(path: Path, cells: list, mode: str, workers, curves: dict, target: float,
                             derived: bool, definition: str, plt) -> None:
    """Figs. 4 and 5: validation loss of strong or weak scaling against (modelled) time, a
    colour and marker per N, every seed (loss_curves); each run that reached the target marked
    at its time to target on the target line, as the tables time it, and each that missed with
    a cross at its last loss. Derived strong scaling is drawn pass by pass; other runs by epoch
    (their losses are stored per epoch), where a run validated within an epoch reaches the
    target before its curve's point at that epoch's end."""
    fig, ax = plt.subplots(figsize=(7.8, 4.5))
    cmap = plt.get_cmap("tab10")
    missed = False
    for i, (n, runs) in enumerate(loss_curves(cells, mode, workers, curves, derived, definition, target)):
        color, marker = cmap(i % 10), MARKERS[i % len(MARKERS)]
        for j, r in enumerate(runs):
            ax.plot(*zip(*r.points), marker=marker, ms=2.5 if derived else 3, lw=0.9, color=color, alpha=0.75,
                    label=f"N = {n}" if j == 0 else None)
            last = _last_point(r.points)
            if r.end is not None:
                ax.scatter([r.end[0]], [r.end[1]], marker="|", s=140, linewidths=1.6, color=color, zorder=5)
            elif last is not None:
                missed = True
                ax.scatter(*zip(last), marker="x", s=55, linewidths=1.8, color=color, zorder=6)
    ax.axhline(target, color="gray", ls="--", lw=1, label="target")
    table = "Table I" if derived else "as the tables time it"
    ax.scatter([], [], marker="|", s=140, linewidths=1.6, color="gray", label=f"time to target ({table})")
    if missed:
        ax.scatter([], [], marker="x", s=55, linewidths=1.8, color="gray", label="missed the target (last loss)")
    how = "pass by pass, every N read off the sequential runs" if derived else "epoch by epoch"
    unit = "pass_at_n" if derived else "epoch"
    ax.set(xlabel=f"time (s, {clock_label(cells, unit=unit)})", ylabel="validation MSLE", yscale="log",
           title=f"{mode} scaling: validation loss, every seed ({how})")
    ax.title.set_fontsize(10)
    log_y_labels(ax)
    ax.grid(alpha=0.3, which="both")
    ax.legend(**LEGEND_OUTSIDE)
    save_figure(fig, path)


def warmup_figure(path: Path, curves: dict, target: float, plt, missed: Optional[dict] = None) -> None:
    """Fig. 3: warmup at N = 8: validation loss (left) and lr (right) per epoch, every seed in the
    order of `curves`, each seed one colour in both panels; `missed` ({run: status}) are the runs
    that missed the target, ending in a cross and named so. Runs taken from an earlier record
    carry no lr rows: the lr panel says how many seeds it shows. The seeds share one schedule,
    so their lr lines coincide: each is drawn narrower than the one before it, as nested bands,
    so that every legend entry is a line one can see."""
    missed = missed or {}
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10.2, 4.0))
    cmap = plt.get_cmap("tab10")
    color = {run: cmap(i % 10) for i, run in enumerate(curves)}
    for run, c in curves.items():
        vals = [math.nan if v is None else v for v in c["val_loss"]]
        points = list(zip(range(1, len(vals) + 1), vals))
        ax.plot(*zip(*points), color=color[run], marker=".", label=run + (f" (missed: {missed[run]})"
                                                                          if run in missed else ""))
        last = _last_point(points)
        if run in missed and last is not None:
            ax.scatter(*zip(last), marker="x", s=60, linewidths=2.0, color=color[run], zorder=5)
    recorded = [(run, c) for run, c in curves.items() if any(v is not None for v in c.get("lr") or [])]
    for k, (run, c) in enumerate(recorded):
        ax2.plot(range(1, len(c["lr"]) + 1), c["lr"], color=color[run], lw=1.5 + 3.0 * (len(recorded) - 1 - k),
                 solid_capstyle="butt", zorder=2 + k, label=run)   # the first seed widest, underneath
    if not recorded:
        ax2.text(0.5, 0.5, "no lr recorded: these runs came\nfrom an earlier record's curves",
                 transform=ax2.transAxes, ha="center", va="center", fontsize=9, color="gray")
    ax.axhline(target, color="gray", ls="--", lw=1, label="target")
    ax.set(xlabel="epoch", ylabel="validation MSLE", yscale="log", title="Warmup, N = 8: validation loss")
    log_y_labels(ax)
    longest = max((c["lr"] for _, c in recorded), key=len, default=[])
    same = len(recorded) > 1 and all(c["lr"] == longest[:len(c["lr"])] for _, c in recorded)  # only where so
    ax2.set(xlabel="epoch", ylabel="learning rate (end of epoch)",
            title=f"Warmup, N = 8: lr ({len(recorded)} of {len(curves)} seeds recorded it"
                  + ("; their schedules coincide)" if same else ")"))
    ax.title.set_fontsize(10)
    ax2.title.set_fontsize(10)
    if recorded:
        ax2.legend(**LEGEND_OUTSIDE)
    ax.legend(fontsize=8, loc="best")
    save_figure(fig, path)
