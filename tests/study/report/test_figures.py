"""What the figures of validation loss draw (figures.py, Figs. 3-5), and figures.log_y_labels's
limits, read off the committed study's record or a real axis."""
import json

import pytest
from unittest import mock

from deepdensity.scaling import policies
from deepdensity.study.judge import claims
from deepdensity.study.report.figures import log_y_labels, warmup_figure
from deepdensity.study.report.render import cells_at, pyplot
from tests.support import ROOT


@pytest.fixture(scope="module")
def record():
    return json.loads((ROOT / "reports" / "study.json").read_text())


def test_fig3_gives_every_seed_one_colour_in_both_panels_and_marks_the_misses(record):
    warmup8 = sorted(cells_at(claims.cells_of(record), policies.WARMUP, 8), key=lambda c: c.seed)
    curves = {c.run: record["curves"][c.run] for c in warmup8}
    missed = {c.run: c.status for c in warmup8 if not c.reached}
    recorded = [r for r, c in curves.items() if any(v is not None for v in c.get("lr") or [])]
    assert missed and 0 < len(recorded) < len(curves), "the record has a miss and seeds without lr rows"
    plt, ax, ax2 = mock.MagicMock(), mock.MagicMock(), mock.MagicMock()
    ax.get_ylim.return_value = (0.0015, 0.007)
    plt.subplots.return_value = (mock.MagicMock(), (ax, ax2))
    plt.get_cmap.return_value = lambda i: f"C{i}"
    warmup_figure(ROOT / "unused.png", curves, record["target"], plt, missed=missed)
    loss = {call.kwargs["label"].split(" ")[0]: call.kwargs["color"] for call in ax.plot.call_args_list}
    lr = {call.kwargs["label"]: call.kwargs["color"] for call in ax2.plot.call_args_list}
    assert loss == {run: f"C{i}" for i, run in enumerate(curves)}
    assert sorted(lr) == sorted(recorded) and all(lr[r] == loss[r] for r in lr)
    labels = [call.kwargs["label"] for call in ax.plot.call_args_list]
    assert all(f"{run} (missed: {status})" in labels for run, status in missed.items())
    assert len(ax.scatter.call_args_list) == len(missed)          # a cross at each miss's last loss
    title = ax2.set.call_args.kwargs["title"]
    assert f"({len(recorded)} of {len(curves)} seeds recorded it" in title


@pytest.mark.parametrize("lo, hi", [(1.35, 35.0), (0.0017, 0.0052), (0.5, 2000.0), (12.0, 13.0)])
def test_a_log_axis_is_labelled_below_and_above_its_data(lo, hi):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [lo, hi])
    ax.set_yscale("log")
    log_y_labels(ax)
    fig.canvas.draw()
    bottom, top = ax.get_ylim()
    labelled = [t.get_position()[1] for t in ax.yaxis.get_ticklabels()
                if t.get_text() and bottom * (1 - 1e-9) <= t.get_position()[1] <= top * (1 + 1e-9)]
    plt.close(fig)
    assert bottom <= lo and top >= hi
    assert min(labelled) == pytest.approx(bottom) and max(labelled) == pytest.approx(top)
