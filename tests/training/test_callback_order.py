"""The run's callbacks read each other's work at the end of an epoch; the order is checked
when the list is built (callbacks.check_order), and a wrong one is refused with its reason."""

import pytest

from deepdensity.training import callbacks


def named(*names):
    """Stand-ins carrying only a class name, the one thing check_order reads."""
    return [type(n, (), {})() for n in names]


RUN = (
    "MetricAverageCallback",
    "PolicyLR",
    "EpochRow",
    "Stopping",
    "MetricsLog",
    "Checkpoint",
    "EpochSummaries",
    "Progress",
)


def test_the_order_a_run_uses_is_accepted():
    cbs = named(*RUN)
    assert callbacks.check_order(cbs) is cbs
    elastic = named("Validate", *RUN[:-1], "CommitEachEpoch", "Progress")
    assert callbacks.check_order(elastic) is elastic


def swapped(first, second):
    """The run's order with `second` moved to just after `first`."""
    order = [n for n in ("Validate",) + RUN if n != second]
    return order[: order.index(first) + 1] + [second] + order[order.index(first) + 1 :]


@pytest.mark.parametrize(
    "first, second",
    [
        ("EpochRow", "MetricAverageCallback"),  # the row would hold one worker's loss, not the average
        ("Stopping", "EpochRow"),  # would decide on the previous epoch's losses
        ("Checkpoint", "MetricsLog"),  # state.json ahead of metrics.jsonl: a row lost on resume
        ("MetricAverageCallback", "Validate"),  # val_loss averaged before it exists
        ("Progress", "Stopping"),  # the line printed before the run knows it ended
        ("EpochSummaries", "EpochRow"),  # TensorBoard's lr written before EpochRow puts it in logs
    ],
)
def test_a_callback_before_one_it_reads_from_is_refused(first, second):
    order = swapped(first, second)
    assert order.index(first) < order.index(second)
    with pytest.raises(ValueError, match=f"must come after {second}"):  # the first reader of it is named
        callbacks.check_order(named(*order))


def test_a_record_reader_without_the_epoch_row_is_refused():
    with pytest.raises(ValueError, match="Stopping reads the epoch's row"):
        callbacks.check_order(named("MetricAverageCallback", "Stopping"))


def test_the_tensorboard_callback_is_the_one_the_table_names(tmp_path):
    import numpy as np

    from deepdensity.training import watch

    [cb] = watch.tensorboard_callbacks(tmp_path, np.zeros((4, 2, 2, 2)), images_every=1)
    assert type(cb).__name__ in callbacks.MUST_FOLLOW
