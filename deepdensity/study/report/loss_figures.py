"""The figures of validation loss over a run (Figs. 3-5): a run's time is cells.seconds_of_passes
of the cell's own clock, the one function the tables' time to target goes through, so that where
a curve ends is where Tables I-II put the run; a run that missed the target ends in a cross."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from deepdensity.study.core import curves as run_curves
from deepdensity.study.core.cells import seconds_of_passes
from deepdensity.study.report.figures import clock_label
from deepdensity.study.report.render import cells_at
from deepdensity.utils.plots import LEGEND_OUTSIDE, log_y_labels, save_figure

MARKERS = "osD^vP*X"


@dataclass(frozen=True)
class RunCurve:
    """One run as Figs. 4 and 5 draw it."""

    cell: object  # cells.Cell
    points: list  # [(seconds, validation loss)]; a non-finite loss is nan, a gap
    end: Optional[tuple]  # (time to target as the tables have it, the target); None: missed


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
    points = [(seconds_of_passes(passes, c.epoch_seconds, per_epoch), vals[i]) for passes, i in at if i < len(vals)]
    end = (c.time_to_target_s, target) if c.reached and c.time_to_target_s is not None else None
    return RunCurve(c, points, end)


def loss_curves(cells: list, mode: str, workers, curves: dict, derived: bool, definition: str, target: float) -> list:
    """[(N, [RunCurve of every seed])] of `mode`, N in `workers` order. `derived`: every N is
    read off its sequential run pass by pass (strong scaling), else each run's own epochs."""
    out = []
    for n in workers:
        per_epoch = run_curves.passes_per_epoch(n, definition)
        out.append(
            (
                n,
                [
                    run_curve(c, curves[c.run]["val_loss"], per_epoch, derived, target)
                    for c in sorted(cells_at(cells, mode, n), key=lambda c: c.seed)
                ],
            )
        )
    return out


def _last_point(points: list) -> Optional[tuple]:
    """The last point with a finite loss: where a run that missed the target is marked."""
    return next(((x, y) for x, y in reversed(points) if not math.isnan(y)), None)


def loss_against_time_figure(
    path: Path, cells: list, mode: str, workers, curves: dict, target: float, derived: bool, definition: str, plt
) -> None:
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
            ax.plot(
                *zip(*r.points),
                marker=marker,
                ms=2.5 if derived else 3,
                lw=0.9,
                color=color,
                alpha=0.75,
                label=f"N = {n}" if j == 0 else None,
            )
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
    ax.set(
        xlabel=f"time (s, {clock_label(cells, unit=unit)})",
        ylabel="validation MSLE",
        yscale="log",
        title=f"{mode} scaling: validation loss, every seed ({how})",
    )
    ax.title.set_fontsize(10)
    log_y_labels(ax)
    ax.grid(alpha=0.3, which="both")
    ax.legend(**LEGEND_OUTSIDE)
    save_figure(fig, path)


# Fig. 3 names every seed in its legends up to this many; beyond, a second look's 24 seeds ran
# its legends off the figure and its lr bands to 46 points wide
FIG3_NAMED_SEEDS = 10


def warmup_figure(path: Path, curves: dict, target: float, plt, missed: Optional[dict] = None) -> None:
    """Fig. 3: warmup at N = 8: validation loss (left) and lr (right) per epoch, every seed in the
    order of `curves`, each seed one colour in both panels; `missed` ({run: status}) are the runs
    that missed the target, ending in a cross and named so. Runs taken from an earlier record
    carry no lr rows: the lr panel says how many seeds it shows. The seeds share one schedule,
    so their lr lines coincide: each is drawn narrower than the one before it, as nested bands,
    so that every legend entry is a line one can see. Past FIG3_NAMED_SEEDS seeds (a second
    look's 24) each seed takes its colour along one map, the loss legend names the missed alone,
    and a schedule the seeds share is one line."""
    missed = missed or {}
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10.2, 4.0))
    many = len(curves) > FIG3_NAMED_SEEDS
    if many:  # a colour each along one map: tab10's ten would repeat
        cmap = plt.get_cmap("turbo")
        color = {run: cmap(i / (len(curves) - 1)) for i, run in enumerate(curves)}
    else:
        cmap = plt.get_cmap("tab10")
        color = {run: cmap(i % 10) for i, run in enumerate(curves)}
    _warmup_losses(ax, curves, color, missed, name_all=not many)
    recorded = [(run, c) for run, c in curves.items() if any(v is not None for v in c.get("lr") or [])]
    longest = max((c["lr"] for _, c in recorded), key=len, default=[])
    same = len(recorded) > 1 and all(c["lr"] == longest[: len(c["lr"])] for _, c in recorded)  # only where so
    if many and same:  # one line for the one schedule, not a band a seed
        ax2.plot(
            range(1, len(longest) + 1), longest, color="black", lw=1.5, label=f"the schedule of {len(recorded)} seeds"
        )
    else:
        _warmup_lrs(ax2, recorded, color, bands=not many)
    ax.axhline(target, color="gray", ls="--", lw=1, label="target")
    title = "Warmup, N = 8: validation loss" + (f", {len(curves)} seeds" if many else "")
    ax.set(xlabel="epoch", ylabel="validation MSLE", yscale="log", title=title)
    log_y_labels(ax)
    ax2.set(
        xlabel="epoch",
        ylabel="learning rate (end of epoch)",
        title=f"Warmup, N = 8: lr ({len(recorded)} of {len(curves)} seeds recorded it"
        + ("; their schedules coincide)" if same else ")"),
    )
    ax.title.set_fontsize(10)
    ax2.title.set_fontsize(10)
    if recorded and (not many or same):
        ax2.legend(**LEGEND_OUTSIDE)
    ax.legend(fontsize=8, loc="best")
    save_figure(fig, path)


def _warmup_losses(ax, curves: dict, color: dict, missed: dict, name_all: bool = True) -> None:
    """Fig. 3's left panel: each seed's validation loss per epoch, a run that missed the target
    named so in the legend and ending in a cross at its last finite loss; the others named too
    where `name_all`."""
    for run, c in curves.items():
        vals = [math.nan if v is None else v for v in c["val_loss"]]
        points = list(zip(range(1, len(vals) + 1), vals))
        named = name_all or run in missed
        ax.plot(
            *zip(*points),
            color=color[run],
            marker=".",
            label=(run + (f" (missed: {missed[run]})" if run in missed else "")) if named else None,
        )
        last = _last_point(points)
        if run in missed and last is not None:
            ax.scatter(*zip(last), marker="x", s=60, linewidths=2.0, color=color[run], zorder=5)


def _warmup_lrs(ax2, recorded: list, color: dict, bands: bool = True) -> None:
    """Fig. 3's right panel: the lr per epoch of the seeds that recorded it ([(run, its
    curves)]), as nested bands (`bands`, each named) or thin lines (or a note where none did)."""
    for k, (run, c) in enumerate(recorded):
        ax2.plot(
            range(1, len(c["lr"]) + 1),
            c["lr"],
            color=color[run],
            lw=1.5 + 3.0 * (len(recorded) - 1 - k) if bands else 1.0,
            solid_capstyle="butt",
            zorder=2 + k,
            label=run if bands else None,
        )  # the first seed widest, underneath
    if not recorded:
        ax2.text(
            0.5,
            0.5,
            "no lr recorded: these runs came\nfrom an earlier record's curves",
            transform=ax2.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            color="gray",
        )
