"""The beyond study's figures, drawn from its record alone and in the default study's manner
(figures.py): every seed a dot, a median a bar and a line (only where every seed reached the
target), a run that missed in a panel of its own, one clock per time axis, named on it, and
legends outside the axes. Times are cells.seconds under the clock drawn; passes are the same
function under the pass clock (beyond_verdicts.PASSES). fig2 and fig_passes are against_n.py's
drawing, the default study's Fig. 2; its seeds, bounds and strip draw the figures here too."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.core import clocks
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.report.against_n import (against_n_figure, bounded, dark, DOT, least, legend_keys,
                                                missed_strip, seeds)
from deepdensity.study.report.figures import (LEGEND_OUTSIDE, line_stretches, log_y_labels, plain_ticks, save_figure,
                                              spot)

DATA_STYLE = {"full": ("tab:gray", "o"), "network": ("tab:blue", "s"), "random": ("tab:orange", "^")}
RULE_STYLE = {"eta": ("tab:blue", "o"), policies.LINEAR: ("tab:red", "v")}


def rule_label(rule: str, base_batch: int) -> str:
    """The legend's name of an lr rule of the sweep, B the study's global batch."""
    linear = f"lr eta x b / B (the linear rule;\nb the global batch, B = {base_batch}, the\nstudy's base global batch)"
    return {"eta": "lr eta", policies.LINEAR: linear}.get(rule, rule)


def time_axis(clock, wrap: bool = False) -> str:
    """A time axis's label, naming its clock (on two lines with `wrap`)."""
    return (f"time to target (s, {clocks.label(clock.name)},{chr(10) if wrap else ' '}"
            f"passes x s/pass)")


def passes_axis(n_train: Optional[int] = None) -> str:
    return "passes to target" + (f" (passes over the {n_train} training cubes)" if n_train else "")


def figures_against_n(out: Path, cells: list, modes: list, workers, clock, base, plt) -> None:
    """fig2 (time to target under `clock`) and fig_passes (passes to target: the algorithm alone,
    no clock)."""
    against_n_figure(out / "fig2.png", cells, modes, workers, clock, base, plt, time_axis(clock), "Time to target")
    against_n_figure(out / "fig_passes.png", cells, modes, workers, bv.PASSES, base, plt, passes_axis(base.n_train),
                     "Passes to target")


def filter_figure(path: Path, groups: list, clock, plt) -> None:
    """fig8: per (mode, N) of the filter, each data set's seeds in passes (left) and in seconds
    under `clock` (right). `groups` = [(mode, N, {data: (cells, TimeBase)})]."""
    fig, axes = plt.subplots(2, 2, figsize=(9.8, 5.4), sharex=True, gridspec_kw={"height_ratios": [1, 4]})
    rows, bounds, bars = list(DATA_STYLE), False, False
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
                bounds |= any(bounded(c, base) for c in cs)
                x0 = gi + (di - 1) * 0.28
                xs = [x0 + 0.2 * (j / max(1, len(vals) - 1) - 0.5) for j in range(len(vals))]
                med = seeds(ax, strip, xs, vals, DATA_STYLE[data], di, (xs[0] - 0.03, xs[-1] + 0.03),
                            least(cs, which, base))
                bars |= med is not None and len(vals) > 1
        missed_strip(strip, rows, any_missed, title)
        ax.set_xticks(range(len(groups)), [f"{m}\nN = {n}" for m, n, _ in groups])
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    for data, (color, marker) in DATA_STYLE.items():
        axes[1][1].scatter([], [], color=color, marker=marker, edgecolors=dark(color),
                           label=f"{data} data (a seed)", **DOT)
    legend_keys(axes[1][1], bounds, bar=bars, dot=False)    # the data's keys are the seeds' dots; a grey one would be full data's
    axes[1][1].legend(**LEGEND_OUTSIDE)
    fig.suptitle("Full, network-filtered and random-filtered data: every seed (dots"
                 + ("; open: passes only bounded" if bounds else "") + "), median (bar, where every seed reached);\n"
                 "above: seeds that missed the target (x; missed / seeds)", fontsize=9)
    save_figure(fig, path, plt)


def sweep_figure(path: Path, by_rule: dict, base_batch: int, clock, base, plt) -> None:
    """fig9: the batch sweep, every seed in passes (middle) and in seconds under `clock` (bottom)
    against the global batch, both lr rules, medians joined; the study's batch marked.
    `by_rule` = {lr rule: {batch: [Cell]}}."""
    fig, (strip, top, bottom) = plt.subplots(3, 1, figsize=(7.6, 7.0), sharex=True,
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
        top.plot([], [], color=style[0], marker=style[1], ms=5, lw=1.2, label=rule_label(rule, base_batch))
    many = several_seeds(by_rule)
    legend_keys(top, False, bar=many)
    missed_strip(strip, list(by_rule), any_missed, "")
    fig.suptitle("The sequential model: global batch against passes and time to target; every seed (dots), "
                 + ("median\n(bar and line, where every seed reached)" if many else "\none per batch and lr rule, a line "
                    "where it reached") + "; above: seeds that missed the target (x; missed / seeds)", fontsize=9)
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
    bottom.set_xlim(min(batches) / 2 ** 0.5, max(batches) * 2 ** 0.8)       # room for the last "missed / seeds"
    top.legend(**LEGEND_OUTSIDE)
    save_figure(fig, path, plt)


def several_seeds(by_rule: dict) -> bool:
    """Whether some cell of the sweep has more than one seed, so that a median bar is drawn."""
    return any(len(cs) > 1 for per in by_rule.values() for cs in per.values())


def sweep_caption(by_rule: dict) -> str:
    """How fig9's caption names its medians: a bar only where some cell has more than one seed."""
    return ("the median a bar and a line where every seed reached" if several_seeds(by_rule) else
            "one seed a batch and rule, so no median bar, joined by a line where it reached")


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
    save_figure(fig, path, plt)
