"""The beyond study's figures, drawn from its record alone and in the default study's manner
(figures.py): every seed a dot, a median a bar and a line (only where every seed reached the
target), a run that missed in a panel of its own, one clock per time axis, named on it, and
legends outside the axes. Times are evidence.seconds under the clock drawn; passes are the same
function under the pass clock (beyond_verdicts.PASSES)."""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study import beyond_verdicts as bv
from deepdensity.study.figures import (CLOCK_NAMES, LEGEND_OUTSIDE, line_stretches, log_y_labels, plain_ticks, spot,
                                       time_to_target_figure)
from deepdensity.study.render import cells_at

DATA_STYLE = {"full": ("tab:gray", "o"), "network": ("tab:blue", "s"), "random": ("tab:orange", "^")}
RULE_STYLE = {"eta": ("tab:blue", "o"), policies.LINEAR: ("tab:red", "v")}
RULE_LABEL = {"eta": "lr eta", policies.LINEAR: "lr eta x b / B (the linear rule)"}


def time_axis(clock, wrap: bool = False) -> str:
    """A time axis's label, naming its clock (on two lines with `wrap`)."""
    return (f"time to target (s, {CLOCK_NAMES.get(clock.name, clock.name)},{chr(10) if wrap else ' '}"
            f"passes x s/pass)")


def passes_axis(n_train: Optional[int] = None) -> str:
    return "passes to target" + (f" (passes over the {n_train} training cubes)" if n_train else "")


def _save(fig, path: Path, plt) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def seeds(ax, strip, xs: list, values: list, style: tuple, row: int, bar: tuple, label=None) -> Optional[float]:
    """One group's seeds at positions `xs`: those that reached as dots on `ax`, those that missed
    (inf) as crosses on `strip` at `row` with "missed / seeds"; where every seed reached, the
    median as a bar from bar[0] to bar[1]. Returns that median, else None."""
    color, marker = style
    hit = [(x, v) for x, v in zip(xs, values) if math.isfinite(v)]
    miss = [x for x, v in zip(xs, values) if not math.isfinite(v)]
    if hit:
        ax.scatter(*zip(*hit), color=color, marker=marker, s=18, alpha=0.75, edgecolors="white", linewidths=0.4,
                   zorder=4, label=label)
    if miss:
        strip.scatter(miss, [row] * len(miss), color=color, marker="x", s=28, linewidths=1.2, zorder=3)
        strip.annotate(f"{len(miss)}/{len(values)}", (xs[-1], row), textcoords="offset points", xytext=(5, -3),
                       fontsize=8, color=color)
    if not values or miss:
        return None
    med = statistics.median(values)
    ax.plot(list(bar), [med, med], color=color, lw=2.5, solid_capstyle="butt", zorder=3)
    return med


def missed_strip(strip, labels: list, any_missed: bool, title: str) -> None:
    """The panel above a figure's data: a row per group for the seeds that missed the target."""
    strip.set_yticks(range(len(labels)), labels, fontsize=8)
    strip.set_ylim(-0.7, len(labels) - 0.3)
    strip.set_ylabel("missed", fontsize=9)
    if not any_missed:
        strip.text(0.5, 0.5, "no run missed the target", transform=strip.transAxes, ha="center", va="center",
                   fontsize=9, color="gray")
    strip.set_title(title, fontsize=9)
    strip.grid(alpha=0.3, axis="x")


def _against_n(ax, strip, cells: list, modes: list, workers, clock, base) -> bool:
    """Every mode's seeds against N under `clock`, medians joined from N to N; True if a seed missed."""
    any_missed = False
    for i, mode in enumerate(modes):
        style, medians = policies.get(mode).style, []
        for n in workers:
            cs = sorted(cells_at(cells, mode, n), key=lambda c: c.seed)
            if not cs:
                continue
            xs = [spot(n, i, len(modes), j, len(cs)) for j in range(len(cs))]
            vals = bv.values(cs, clock, base)
            any_missed |= any(not math.isfinite(v) for v in vals)
            medians.append((spot(n, i, len(modes)), seeds(ax, strip, xs, vals, style, i, (xs[0] / 2 ** 0.04,
                                                                                           xs[-1] * 2 ** 0.04))))
        stretches = line_stretches(medians)
        for stretch in stretches:
            ax.plot(*zip(*stretch), color=style[0], lw=1.2, zorder=2)
        ax.plot([], [], color=style[0], marker=style[1], ms=5, lw=1.2,
                label=mode if stretches else f"{mode} (no cell reached on every seed)")
    return any_missed


def passes_figure(path: Path, cells: list, modes: list, workers, base, plt) -> None:
    """fig_passes: passes to target against N, every mode and seed (the algorithm alone, no clock)."""
    fig, (strip, ax) = plt.subplots(2, 1, figsize=(7.6, 5.6), sharex=True, gridspec_kw={"height_ratios": [1.3, 4]})
    any_missed = _against_n(ax, strip, cells, modes, workers, bv.PASSES, base)
    ax.scatter([], [], color="gray", s=16, label="a seed (dot)")
    ax.plot([], [], color="gray", lw=2.5, label="median over seeds (bar)")
    missed_strip(strip, list(modes), any_missed, "Passes to target: every seed (dots), median (bar and line; only "
                                                 "where every seed reached)\nabove: seeds that missed (x; missed / seeds)")
    strip.set_xscale("log")
    ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel=passes_axis(base.n_train))
    plain_ticks(ax.xaxis, workers)
    ax.set_xlim(min(workers) / 2 ** 0.5, max(workers) * 2 ** 0.5)
    log_y_labels(ax)
    ax.grid(alpha=0.3, which="major")
    ax.legend(**LEGEND_OUTSIDE)
    _save(fig, path, plt)


def figures_against_n(out: Path, cells: list, modes: list, workers, clock, base, plt) -> None:
    """fig2 (time to target under `clock`, figures.time_to_target_figure as the default study
    draws it) and fig_passes."""
    time_to_target_figure(out / "fig2.png", cells, modes, workers, plt, clock=clock, base=base)
    passes_figure(out / "fig_passes.png", cells, modes, workers, base, plt)


def filter_figure(path: Path, groups: list, clock, plt) -> None:
    """fig8: per (mode, N) of the filter, each data set's seeds in passes (left) and in seconds
    under `clock` (right). `groups` = [(mode, N, {data: (cells, TimeBase)})]."""
    fig, axes = plt.subplots(2, 2, figsize=(8.0, 4.8), sharex=True, gridspec_kw={"height_ratios": [1, 4]})
    rows = list(DATA_STYLE)
    for col, (which, label, title) in enumerate(((bv.PASSES, passes_axis(), "passes to target"),
                                                 (clock, time_axis(clock, wrap=True), "time to target"))):
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
                seeds(ax, strip, xs, vals, DATA_STYLE[data], di, (xs[0] - 0.03, xs[-1] + 0.03))
        missed_strip(strip, rows, any_missed, title)
        ax.set_xticks(range(len(groups)), [f"{m}, N = {n}" for m, n, _ in groups])
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    for data, (color, marker) in DATA_STYLE.items():
        axes[1][1].scatter([], [], color=color, marker=marker, s=18, label=f"{data} data")
    axes[1][1].plot([], [], color="gray", lw=2.5, label="median over seeds")
    axes[1][1].legend(**LEGEND_OUTSIDE)
    fig.suptitle("Full, network-filtered and random-filtered data: every seed (dots), median (bar);\n"
                 "above: seeds that missed the target (x; missed / seeds)", fontsize=9)
    _save(fig, path, plt)


def sweep_figure(path: Path, by_rule: dict, base_batch: int, clock, base, plt) -> None:
    """fig9: the batch sweep, every seed in passes (middle) and in seconds under `clock` (bottom)
    against the global batch, both lr rules, medians joined; the study's batch marked.
    `by_rule` = {lr rule: {batch: [Cell]}}."""
    fig, (strip, top, bottom) = plt.subplots(3, 1, figsize=(7.4, 7.0), sharex=True,
                                             gridspec_kw={"height_ratios": [1, 3, 3]})
    any_missed, batches = False, sorted({b for per in by_rule.values() for b in per})
    for i, (rule, per_batch) in enumerate(by_rule.items()):
        style = RULE_STYLE.get(rule, ("tab:gray", "x"))
        for ax, which in ((top, bv.PASSES), (bottom, clock)):
            medians = []
            for b, cs in sorted(per_batch.items()):
                vals = bv.values(cs, bv.at_batch(which, b), base)
                any_missed |= ax is top and any(not math.isfinite(v) for v in vals)
                xs = [spot(b, i, len(by_rule), j, len(cs)) for j in range(len(cs))]
                med = seeds(ax, strip if ax is top else _Nowhere(), xs, vals, style, i,
                            (xs[0] / 2 ** 0.04, xs[-1] * 2 ** 0.04))
                medians.append((spot(b, i, len(by_rule)), med))
            for k, stretch in enumerate(line_stretches(medians)):
                ax.plot(*zip(*stretch), color=style[0], lw=1.2, zorder=2)
        top.plot([], [], color=style[0], marker=style[1], ms=5, lw=1.2, label=RULE_LABEL.get(rule, rule))
    top.scatter([], [], color="gray", s=16, label="a seed (dot)")
    top.plot([], [], color="gray", lw=2.5, label="median over seeds (bar)")
    missed_strip(strip, list(by_rule), any_missed, "")
    fig.suptitle("The sequential model: global batch against passes and time to target; every seed (dots), "
                 "median\n(bar and line, where every seed reached); above: seeds that missed the target "
                 "(x; missed / seeds)", fontsize=9)
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
    bottom.set_xlim(min(batches) / 2 ** 0.5, max(batches) * 2 ** 0.5)
    top.legend(**LEGEND_OUTSIDE)
    _save(fig, path, plt)


class _Nowhere:
    """A strip that draws nothing: the misses of the time panel are the passes panel's."""

    def scatter(self, *args, **kwargs) -> None:
        pass

    def annotate(self, *args, **kwargs) -> None:
        pass


def adaptive_figure(path: Path, cells: list, run_rows: dict, target: float, plt) -> None:
    """fig7, drawn only when adaptive's test fired: its global batch (top) and validation loss
    (bottom) per epoch, each N and seed."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.4, 6), sharex=True)
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
    for ax in (top, bottom):
        log_y_labels(ax)
    if runs:
        top.legend(**{**LEGEND_OUTSIDE, "fontsize": 7})
    _save(fig, path, plt)
