"""figures.log_y_labels's limits, read off a real axis."""
import pytest

from deepdensity.study.figures import log_y_labels
from deepdensity.study.render import pyplot


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
