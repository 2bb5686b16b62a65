"""What the figures of validation loss draw (loss_figures.py, Figs. 3-5), read off the committed
study's record."""

import json
from unittest import mock

import pytest

from deepdensity.scaling import policies
from deepdensity.study.judge import claims
from deepdensity.study.report.loss_figures import warmup_figure
from deepdensity.study.report.render import cells_at
from tests.support import ROOT


@pytest.fixture(scope="module")
def record():
    return json.loads((ROOT / "reports" / "study.json").read_text())


def _drawn(curves: dict, missed: dict, target: float, tmp_path, colour_of) -> tuple:
    """Fig. 3 drawn on a stand-in pyplot whose colour map is `colour_of`: (plt, loss axes, lr axes)."""
    plt, ax, ax2 = mock.MagicMock(), mock.MagicMock(), mock.MagicMock()
    ax.get_ylim.return_value = (0.0015, 0.007)
    plt.subplots.return_value = (mock.MagicMock(), (ax, ax2))
    plt.get_cmap.return_value = colour_of
    warmup_figure(tmp_path / "unused.png", curves, target, plt, missed=missed)
    return plt, ax, ax2


def test_fig3_gives_every_seed_one_colour_in_both_panels_and_marks_the_misses(record, tmp_path):
    """The first look's 8 seeds of warmup N = 8: every seed named in both panels."""
    warmup8 = sorted(cells_at(claims.cells_of(record), policies.WARMUP, 8), key=lambda c: c.seed)[:8]
    curves = {c.run: record["curves"][c.run] for c in warmup8}
    missed = {c.run: c.status for c in warmup8 if not c.reached}
    recorded = [r for r, c in curves.items() if any(v is not None for v in c.get("lr") or [])]
    assert missed and 0 < len(recorded) < len(curves), "the record has a miss and seeds without lr rows"
    plt, ax, ax2 = _drawn(curves, missed, record["target"], tmp_path, lambda i: f"C{i}")
    loss = {call.kwargs["label"].split(" ")[0]: call.kwargs["color"] for call in ax.plot.call_args_list}
    lr = {call.kwargs["label"]: call.kwargs["color"] for call in ax2.plot.call_args_list}
    assert loss == {run: f"C{i}" for i, run in enumerate(curves)}
    assert sorted(lr) == sorted(recorded) and all(lr[r] == loss[r] for r in lr)
    labels = [call.kwargs["label"] for call in ax.plot.call_args_list]
    assert all(f"{run} (missed: {status})" in labels for run, status in missed.items())
    assert len(ax.scatter.call_args_list) == len(missed)  # a cross at each miss's last loss
    title = ax2.set.call_args.kwargs["title"]
    assert f"({len(recorded)} of {len(curves)} seeds recorded it" in title


def test_fig3_of_a_second_looks_24_seeds_gives_each_its_own_colour_and_names_the_missed(record, tmp_path):
    """All 24 seeds of warmup N = 8: 24 colours (tab10 would repeat them), the loss legend naming
    the missed runs alone, and the schedule the seeds share drawn once."""
    warmup8 = sorted(cells_at(claims.cells_of(record), policies.WARMUP, 8), key=lambda c: c.seed)
    curves = {c.run: record["curves"][c.run] for c in warmup8}
    missed = {c.run: c.status for c in warmup8 if not c.reached}
    assert len(curves) == 24 and 0 < len(missed) < 24
    plt, ax, ax2 = _drawn(curves, missed, record["target"], tmp_path, lambda x: ("map", x))
    plt.get_cmap.assert_called_once_with("turbo")
    colours = [call.kwargs["color"] for call in ax.plot.call_args_list]
    assert len(colours) == 24 and len(set(colours)) == 24
    labels = [call.kwargs["label"] for call in ax.plot.call_args_list if call.kwargs["label"]]
    assert sorted(labels) == sorted(f"{run} (missed: {status})" for run, status in missed.items())
    (lr_line,) = ax2.plot.call_args_list
    assert lr_line.kwargs["color"] == "black" and lr_line.kwargs["lw"] < 3
