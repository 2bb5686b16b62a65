"""What every figure of the project shares: matplotlib without a display, a figure written in
one rename at the reports' resolution, a legend kept outside the axes, and log axes labelled in
plain numbers."""

from __future__ import annotations

import math
from pathlib import Path

from deepdensity.utils.files import atomic_path

LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "fontsize": 8, "borderaxespad": 0.0}


def pyplot():
    """matplotlib.pyplot on the Agg backend: figures are files, and a cluster node has no display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Laid out, written (a crash leaves the earlier file, never half of one), and closed."""
    try:
        fig.tight_layout()
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=dpi, format="png")
    finally:
        pyplot().close(fig)


def plain_ticks(axis, ticks) -> None:
    """Log axis labelled at `ticks` in plain numbers, with no minor labels ("9 x 10^-1")."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, ScalarFormatter

    axis.set_major_locator(FixedLocator(list(ticks)))
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def log_y_labels(ax) -> None:
    """A log y axis labelled in plain numbers ("10, 15, 20, 30", "0.002, 0.003") at every decade
    and in between, as densely as its span leaves room for; never "2.8 x 10^1". Its limits are
    widened to the nearest labelled values, so that every datum lies between two labels. Call it
    once the data are drawn: the span sets the density."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = ax.get_ylim()
    subs = _log_subs(lo, hi)  # the data's span sets the density, the widened one keeps it
    if lo > 0 and hi > lo:
        ax.set_ylim(_labelled_below(lo, subs), _labelled_above(hi, subs))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(float(s) for s in range(1, 10))))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _log_subs(lo: float, hi: float) -> tuple:
    """Where within a decade a log axis from `lo` to `hi` is labelled: a span under about a
    decade (the study's times, its losses) would otherwise get one or two labels."""
    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    return (
        (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
        if decades <= 0.6
        else (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0)
        if decades <= 1.2
        else (1.0, 2.0, 3.0, 5.0)
        if decades <= 2.2
        else (1.0, 2.0, 5.0)
        if decades <= 4
        else (1.0,)
    )


def _labelled(v: float, subs: tuple) -> list:
    """The labelled values of the decades around `v`, ascending."""
    d = math.floor(math.log10(v))
    return [s * 10.0**k for k in (d - 1, d, d + 1) for s in subs]


def _labelled_below(lo: float, subs: tuple) -> float:
    """The largest labelled value at or below `lo` (`lo` itself where it is not positive)."""
    if not lo > 0:
        return lo
    return max(t for t in _labelled(lo, subs) if t <= lo * (1 + 1e-9))


def _labelled_above(hi: float, subs: tuple) -> float:
    """The smallest labelled value at or above `hi`."""
    if not hi > 0:
        return hi
    return min(t for t in _labelled(hi, subs) if t >= hi * (1 - 1e-9))
