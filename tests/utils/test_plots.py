"""The figures' shared parts (utils/plots.py): a log axis's labels and limits, read off a real
axis, and a figure written whole or not at all."""

from pathlib import Path

import pytest

from deepdensity.utils.plots import log_y_labels, pyplot, save_figure


@pytest.mark.parametrize("lo, hi", [(1.35, 35.0), (0.0017, 0.0052), (0.5, 2000.0), (12.0, 13.0)])
def test_a_log_axis_is_labelled_below_and_above_its_data(lo, hi):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [lo, hi])
    ax.set_yscale("log")
    log_y_labels(ax)
    fig.canvas.draw()
    bottom, top = ax.get_ylim()
    labelled = [
        t.get_position()[1]
        for t in ax.yaxis.get_ticklabels()
        if t.get_text() and bottom * (1 - 1e-9) <= t.get_position()[1] <= top * (1 + 1e-9)
    ]
    plt.close(fig)
    assert bottom <= lo and top >= hi
    assert min(labelled) == pytest.approx(bottom) and max(labelled) == pytest.approx(top)


def test_a_figure_that_fails_to_save_leaves_the_earlier_file(tmp_path, monkeypatch):
    plt = pyplot()
    path = tmp_path / "fig.png"
    path.write_bytes(b"earlier")
    fig, ax = plt.subplots()

    def interrupted(where, **kwargs):  # half of a file written, then Ctrl-C
        Path(where).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(fig, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_figure(fig, path)
    assert path.read_bytes() == b"earlier" and [p.name for p in tmp_path.iterdir()] == ["fig.png"]
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    save_figure(fig, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not plt.get_fignums()
