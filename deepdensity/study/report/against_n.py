"""A value to target against workers N, every mode and seed, drawn once for both studies: the
default study's Fig. 2 (`time_to_target_figure`, paper_report.py) and the beyond study's fig2 and
fig_passes. Every seed a dot, side by side (figures.spot) so that equal values stay visible; the
median over a cell's seeds a bar across them and a line from N to N, only where every seed
reached the target; a seed that missed a cross in a strip of its own above, never at a value;
N = 1 once, as the sequential runs, every mode's line starting from their median. Values are
cells.seconds under a clock (passes under beyond_verdicts.PASSES), or the cells' own times where
no clock is given.

The beyond study's other figures are drawn here too, from the same pieces (`seeds`,
`missed_strip`, `legend_keys`) and in the default study's manner (figures.py): one clock per time
axis, named on it, and legends outside the axes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.core import clocks
from deepdensity.study.core.cells import median_time
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.report.figures import clock_label, line_stretches, spot
from deepdensity.study.report.render import cells_at
from deepdensity.utils.plots import LEGEND_OUTSIDE, log_y_labels, plain_ticks, save_figure

SEQUENTIAL_STYLE = ("0.3", "D")
SEQUENTIAL_ROW = "sequential"
SEQUENTIAL_LABEL = f"{SEQUENTIAL_ROW} (every mode)"
# a dark edge on every dot and a light bar under them: seeds at one value stay countable on their median
DOT = {"s": 20, "alpha": 0.9, "linewidths": 0.5}
BAR = {"lw": 2.0, "alpha": 0.45, "solid_capstyle": "butt"}


def dark(color) -> tuple:
    """A darker shade of `color`, a dot's edge: it parts dots on their bar and keeps the dot's hue."""
    from matplotlib.colors import to_rgb

    return tuple(0.6 * v for v in to_rgb(color))


def values(cells: list, which, base) -> list:
    """Each cell's value (in seed order), inf where it missed: cells.seconds under `which` (a
    clock; passes under beyond_verdicts.PASSES), or, where `which` is None, its own time to target
    (claims.cells_of: this host's clock, or a real run's own)."""
    if which is None:
        return [
            math.inf if c.time_to_target_s is None else c.time_to_target_s for c in sorted(cells, key=lambda c: c.seed)
        ]
    return bv.values(cells, which, base)


def seeds(ax, strip, xs: list, values: list, style: tuple, row: int, bar: tuple) -> Optional[float]:
    """One group's seeds at positions `xs`: those that reached as dots on `ax`, those that missed
    (inf) as crosses on `strip` at `row` with "missed / seeds"; where every seed reached, the
    median as a bar from bar[0] to bar[1] under the dots (none for a lone seed: it is its dot).
    `strip` None: the misses are not drawn. Returns the median, else None."""
    color, marker = style
    hit = [(x, v) for x, v in zip(xs, values) if math.isfinite(v)]
    if hit:
        ax.scatter(*zip(*hit), color=color, marker=marker, edgecolors=dark(color), zorder=4, **DOT)
    miss = [x for x, v in zip(xs, values) if not math.isfinite(v)]
    if miss and strip is not None:
        strip.scatter(miss, [row] * len(miss), color=color, marker="x", s=28, linewidths=1.2, zorder=3)
        strip.annotate(
            f"{len(miss)}/{len(values)}",
            (xs[-1], row),
            textcoords="offset points",
            xytext=(5, -3),
            fontsize=8,
            color=color,
        )
    med = median_time(values)
    if med is not None and len(values) > 1:
        ax.plot(list(bar), [med, med], color=color, zorder=3, **BAR)
    return med


def legend_keys(ax, bar: bool = True, dot: bool = True) -> None:
    """The legend's entries for what `seeds` draws: a seed, the median bar (where some group has
    more than one seed)."""
    if dot:
        ax.scatter([], [], color="gray", marker="o", edgecolors=dark("gray"), label="a seed (dot)", **DOT)
    if bar:
        ax.plot([], [], color="gray", label="median over seeds (bar)", **BAR)


def missed_strip(strip, labels: list, any_missed: bool, title: str) -> None:
    """The panel above a figure's data: a row per group for the seeds that missed the target."""
    strip.set_yticks(range(len(labels)), labels, fontsize=8)
    strip.set_ylim(-0.7, len(labels) - 0.3)
    strip.set_ylabel("missed", fontsize=9)
    if not any_missed:
        strip.text(
            0.5,
            0.5,
            "no run missed the target",
            transform=strip.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            color="gray",
        )
    strip.set_title(title, fontsize=9)
    strip.grid(alpha=0.3, axis="x")


def sequential_cells(cells: list, modes: list) -> list:
    """The runs drawn once at N = 1 for every mode (each mode's N = 1 is the sequential run): the
    sequential cell's, whose seeds the report's strong scaling and verdicts use; else, where it
    has none, the first mode's at N = 1 that has runs."""
    for mode in (policies.SEQUENTIAL, *modes):
        if cells_at(cells, mode, 1):
            return sorted(cells_at(cells, mode, 1), key=lambda c: c.seed)
    return []


def _cell(ax, strip, cs: list, xs: list, which, base, style: tuple, row: int) -> tuple:
    """One cell's seeds at `xs` (`seeds`, a bar a little past the outer seeds on a log axis):
    (median or None, a seed missed)."""
    vals = values(cs, which, base)
    med = seeds(ax, strip, xs, vals, style, row, (xs[0] / 2**0.04, xs[-1] * 2**0.04))
    return med, any(not math.isfinite(v) for v in vals)


def _against_n(ax, strip, cells: list, modes: list, workers, which, base) -> tuple:
    """Every mode's seeds against N under `which`, medians joined from N to N, and N = 1 once
    (`sequential_cells`, the strip's first row), every mode's line starting from its median.
    Returns (the strip's rows, a seed missed)."""
    seq = sequential_cells(cells, modes)
    rows, missed, seq_med = ([SEQUENTIAL_ROW] if seq else []) + list(modes), False, None
    if seq:
        seq_med, missed = _cell(
            ax, strip, seq, [spot(1, 0, 1, j, len(seq)) for j in range(len(seq))], which, base, SEQUENTIAL_STYLE, 0
        )
        ax.plot([], [], color=SEQUENTIAL_STYLE[0], marker=SEQUENTIAL_STYLE[1], ms=5, lw=0, label=SEQUENTIAL_LABEL)
    for i, mode in enumerate(modes):
        style = policies.get(mode).style
        medians = [(1, seq_med)] if seq and cells_at(cells, mode, 1) else []
        for n in [n for n in workers if n > 1 and cells_at(cells, mode, n)]:
            cs = sorted(cells_at(cells, mode, n), key=lambda c: c.seed)
            med, m = _cell(
                ax,
                strip,
                cs,
                [spot(n, i, len(modes), j, len(cs)) for j in range(len(cs))],
                which,
                base,
                style,
                rows.index(mode),
            )
            missed = missed or m
            medians.append((spot(n, i, len(modes)), med))
        stretches = line_stretches(medians)
        for stretch in stretches:
            ax.plot(*zip(*stretch), color=style[0], lw=1.2, zorder=2)
        ax.plot(
            [],
            [],
            color=style[0],
            marker=style[1],
            ms=5,
            lw=1.2,
            label=mode if stretches else f"{mode} (no cell reached on every seed)",
        )
    return rows, missed


def against_n_figure(path: Path, cells: list, modes: list, workers, which, base, plt, ylabel: str, title: str) -> None:
    """A value to target against N under `which` (`values`), every mode and seed: time (the
    studies' fig2) or passes (fig_passes)."""
    fig, (strip, ax) = plt.subplots(2, 1, figsize=(8.2, 5.8), sharex=True, gridspec_kw={"height_ratios": [1.4, 4]})
    rows, any_missed = _against_n(ax, strip, cells, modes, workers, which, base)
    legend_keys(ax)
    missed_strip(
        strip,
        rows,
        any_missed,
        f"{title}: every seed (dots), median (bar and line; only where every seed "
        "reached)\nabove: seeds that missed (x; missed / seeds)",
    )
    strip.set_xscale("log")
    ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel=ylabel)
    plain_ticks(ax.xaxis, workers)
    ax.set_xlim(min(workers) / 2**0.5, max(workers) * 2**0.5)
    log_y_labels(ax)
    ax.grid(alpha=0.3, which="major")
    ax.grid(alpha=0.12, which="minor")
    ax.legend(**LEGEND_OUTSIDE)
    save_figure(fig, path)


def time_to_target_figure(path: Path, cells: list, modes: list, workers, plt, clock=None, base=None) -> None:
    """The default study's Fig. 2 (`against_n_figure`): time to target under `clock` and `base`
    (clocks.Clock, cells.TimeBase: cells.seconds, the one function the verdicts use) where
    given, else the cells' own times (claims.cells_of); the axis names whichever it is."""
    against_n_figure(
        path,
        cells,
        modes,
        workers,
        clock,
        base,
        plt,
        f"time to target (s, {clock_label(cells, clock)})",
        "Time to target",
    )


def against_n_caption(cells: list, modes: list) -> str:
    """The sentence of an against-N figure's caption on N = 1, drawn once (`sequential_cells`)."""
    seq = sequential_cells(cells, modes)
    if not seq:
        return ""
    listed = ", ".join(str(c.seed) for c in seq)
    others = {}
    for m in modes:
        got = tuple(sorted(c.seed for c in cells_at(cells, m, 1)))
        if got and got != tuple(c.seed for c in seq):
            others.setdefault(got, []).append(m)
    text = (
        f" N = 1 is drawn once, as '{SEQUENTIAL_LABEL}': the sequential runs of the {seq[0].mode} cell at N = 1 "
        f"(seeds {listed}), whose median every mode's line starts from"
    )
    text += "".join(
        f"; the table's N = 1 of {', '.join(ms)} holds other seeds ({', '.join(map(str, k))})"
        for k, ms in others.items()
    )
    return text + "."


DATA_STYLE = {"full": ("tab:gray", "o"), "network": ("tab:blue", "s"), "random": ("tab:orange", "^")}
RULE_STYLE = {"eta": ("tab:blue", "o"), policies.LINEAR: ("tab:red", "v")}


def rule_label(rule: str, base_batch: int) -> str:
    """The legend's name of an lr rule of the sweep, B the study's global batch."""
    linear = f"lr eta x b / B (the linear rule;\nb the global batch, B = {base_batch}, the\nstudy's base global batch)"
    return {"eta": "lr eta", policies.LINEAR: linear}.get(rule, rule)


def time_axis(clock, wrap: bool = False) -> str:
    """A time axis's label, naming its clock (on two lines with `wrap`)."""
    return f"time to target (s, {clocks.label(clock.name)},{chr(10) if wrap else ' '}passes x s/pass)"


def passes_axis(n_train: Optional[int] = None) -> str:
    return "passes to target" + (f" (passes over the {n_train} training cubes)" if n_train else "")


def figures_against_n(out: Path, cells: list, modes: list, workers, clock, base, plt) -> None:
    """fig2 (time to target under `clock`) and fig_passes (passes to target: the algorithm alone,
    no clock)."""
    against_n_figure(out / "fig2.png", cells, modes, workers, clock, base, plt, time_axis(clock), "Time to target")
    against_n_figure(
        out / "fig_passes.png",
        cells,
        modes,
        workers,
        bv.PASSES,
        base,
        plt,
        passes_axis(base.n_train),
        "Passes to target",
    )


def filter_figure(path: Path, groups: list, clock, plt) -> None:
    """fig8: per (mode, N) of the filter, each data set's seeds in passes (left) and in seconds
    under `clock` (right). `groups` = [(mode, N, {data: (cells, TimeBase)})]."""
    fig, axes = plt.subplots(2, 2, figsize=(9.8, 5.4), sharex=True, gridspec_kw={"height_ratios": [1, 4]})
    rows, bars = list(DATA_STYLE), False
    for col, (which, label, title) in enumerate(
        ((bv.PASSES, passes_axis(), "passes to target"), (clock, time_axis(clock, wrap=True), "time to target"))
    ):
        strip, ax = axes[0][col], axes[1][col]
        any_missed = False
        for gi, (mode, n, by_data) in enumerate(groups):
            for di, data in enumerate(rows):
                if data not in by_data:
                    continue
                cs, base = by_data[data]
                vals = bv.values(cs, which, base)
                any_missed |= any(not math.isfinite(v) for v in vals)
                x0 = gi + (di - 1) * 0.28
                xs = [x0 + 0.2 * (j / max(1, len(vals) - 1) - 0.5) for j in range(len(vals))]
                med = seeds(ax, strip, xs, vals, DATA_STYLE[data], di, (xs[0] - 0.03, xs[-1] + 0.03))
                bars |= med is not None and len(vals) > 1
        missed_strip(strip, rows, any_missed, title)
        ax.set_xticks(range(len(groups)), [f"{m}\nN = {n}" for m, n, _ in groups])
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    for data, (color, marker) in DATA_STYLE.items():
        axes[1][1].scatter(
            [], [], color=color, marker=marker, edgecolors=dark(color), label=f"{data} data (a seed)", **DOT
        )
    legend_keys(axes[1][1], bar=bars, dot=False)  # the data's keys are the seeds' dots; a grey one would be full data's
    axes[1][1].legend(**LEGEND_OUTSIDE)
    fig.suptitle(
        "Full, network-filtered and random-filtered data: every seed (dots), median (bar, where every seed "
        "reached);\nabove: seeds that missed the target (x; missed / seeds)",
        fontsize=9,
    )
    save_figure(fig, path)


def sweep_figure(path: Path, by_rule: dict, base_batch: int, clock, base, plt) -> None:
    """fig9: the batch sweep, every seed in passes (middle) and in seconds under `clock` (bottom)
    against the global batch, both lr rules, medians joined; the study's batch marked.
    `by_rule` = {lr rule: {batch: [Cell]}}."""
    fig, (strip, top, bottom) = plt.subplots(
        3, 1, figsize=(7.6, 7.0), sharex=True, gridspec_kw={"height_ratios": [1, 3, 3]}
    )
    any_missed, batches = False, sorted({b for per in by_rule.values() for b in per})
    for i, (rule, per_batch) in enumerate(by_rule.items()):
        style = RULE_STYLE.get(rule, ("tab:gray", "x"))
        for ax, which in ((top, bv.PASSES), (bottom, clock)):
            medians = []
            for b, cs in sorted(per_batch.items()):
                vals = bv.values(cs, bv.at_batch(which, b), base)
                any_missed |= ax is top and any(not math.isfinite(v) for v in vals)
                xs = [spot(b, i, len(by_rule), j, len(cs)) for j in range(len(cs))]
                # the misses of the time panel are the passes panel's: drawn once, in the strip
                med = seeds(ax, strip if ax is top else None, xs, vals, style, i, (xs[0] / 2**0.04, xs[-1] * 2**0.04))
                medians.append((spot(b, i, len(by_rule)), med))
            for k, stretch in enumerate(line_stretches(medians)):
                ax.plot(*zip(*stretch), color=style[0], lw=1.2, zorder=2)
        top.plot([], [], color=style[0], marker=style[1], ms=5, lw=1.2, label=rule_label(rule, base_batch))
    many = several_seeds(by_rule)
    legend_keys(top, bar=many)
    missed_strip(strip, list(by_rule), any_missed, "")
    fig.suptitle(
        "The sequential model: global batch against passes and time to target; every seed (dots), "
        + (
            "median\n(bar and line, where every seed reached)"
            if many
            else "\none per batch and lr rule, a line where it reached"
        )
        + "; above: seeds that missed the target (x; missed / seeds)",
        fontsize=9,
    )
    for ax in (top, bottom):
        ax.axvline(base_batch, color="gray", ls=":", lw=1)
        ax.set(xscale="log", yscale="log")
        log_y_labels(ax)
        ax.grid(alpha=0.3, which="major")
    strip.set_xscale("log")
    top.set_ylabel(passes_axis(), fontsize=9)
    bottom.set_ylabel(time_axis(clock, wrap=True), fontsize=9)
    bottom.set_xlabel(f"global batch (dotted: the study's batch {base_batch}, the reference)")
    plain_ticks(bottom.xaxis, batches)
    bottom.set_xlim(min(batches) / 2**0.5, max(batches) * 2**0.8)  # room for the last "missed / seeds"
    top.legend(**LEGEND_OUTSIDE)
    save_figure(fig, path)


def several_seeds(by_rule: dict) -> bool:
    """Whether some cell of the sweep has more than one seed, so that a median bar is drawn."""
    return any(len(cs) > 1 for per in by_rule.values() for cs in per.values())


def sweep_caption(by_rule: dict) -> str:
    """How fig9's caption names its medians: a bar only where some cell has more than one seed."""
    return (
        "the median a bar and a line where every seed reached"
        if several_seeds(by_rule)
        else "one seed a batch and rule, so no median bar, joined by a line where it reached"
    )


def adaptive_figure(path: Path, cells: list, run_rows: dict, target: float, plt) -> None:
    """fig7, drawn only when adaptive's test fired: its global batch (top) and validation loss
    (bottom) per epoch, each N and seed."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.4, 6), sharex=True)
    cmap = plt.get_cmap("viridis")
    runs = sorted({(c.n, c.seed, c.run) for c in cells if policies.get(c.mode).grows_batch and c.n > 1})
    for i, (n, seed, run) in enumerate(runs):
        rows = run_rows[run]
        ep = [r["epoch"] for r in rows]
        style = dict(
            color=cmap(i / max(1, len(runs) - 1)),
            ls="-" if seed == runs[0][1] else ":",
            marker="o",
            markersize=3,
            label=f"N = {n}, seed {seed}",
        )
        top.step(ep, [r["global_batch"] for r in rows], where="mid", **style)
        bottom.plot(ep, [r["val_loss"] for r in rows], **style)
    bottom.axhline(target, color="gray", ls="--", lw=1, label="target")
    top.set(ylabel="global batch", yscale="log", title="adaptive: batch and validation loss per epoch")
    bottom.set(xlabel="epoch", ylabel="validation MSLE", yscale="log")
    for ax in (top, bottom):
        log_y_labels(ax)
    if runs:
        top.legend(**{**LEGEND_OUTSIDE, "fontsize": 7})
    save_figure(fig, path)
