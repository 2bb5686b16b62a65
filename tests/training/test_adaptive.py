"""Adaptive's growing batch (training/adaptive.py) without training: the callback takes the
big-batch test on an epoch's statistics and grows the feed, the feed makes the next epoch's
data at the grown batch, and a resumed run starts at the batch its last epoch chose. (On real
runs: tests/study/test_beyond.py and tests/training/test_horovod.py.)"""

import json

import numpy as np
import pytest

from deepdensity.config import Config
from deepdensity.scaling import policies, rules
from deepdensity.training import adaptive


class Chief:
    """agree.Ranks of one process: rank 0's value is this one's."""

    def from_chief(self, value):
        return value


def feed(per_worker_batch=16, epoch=0, rank=0, processes=1):
    p = policies.plan(policies.ADAPTIVE, 2, 32, processes=processes)
    return adaptive.AdaptiveFeed(128, p, Config(), rank, processes, epoch, per_worker_batch)


@pytest.mark.parametrize("part_sq, sq, grows", [(1e-3, 1e-3, False), (1.0, 1e-3, True)])
def test_the_callback_takes_the_test_and_grows_the_feed(part_sq, sq, grows):
    said, f = [], feed()
    cb = adaptive.AdaptiveBatch(f, Config(), said.append)
    logs = {"grad_part_sq": part_sq, "grad_sq": sq}
    cb.on_epoch_end(0, logs)
    noise = rules.gradient_noise(part_sq, sq, 2)
    grown = rules.adaptive_batch(16, noise, sq, Config().adaptive_theta, Config().batch_size)
    assert (grown > 16) == grows
    assert (f.epoch, f.per_worker_batch) == (1, grown)
    assert logs["global_batch"] == 32 and logs["next_global_batch"] == 2 * grown and logs["grad_noise"] == noise
    assert logs["steps"] == logs["allreduces"] == rules.steps_per_epoch(128, f.p, global_batch=32)
    assert len(said) == grows


def test_the_feed_makes_each_epochs_data_at_its_batch():
    f = feed(per_worker_batch=24, epoch=3)
    assert f.global_batch() == 48 and f.steps() == rules.steps_per_epoch(128, f.p, global_batch=48)
    both = [feed(24, 3, rank, 2).index() for rank in (0, 1)]
    assert all(part.shape == (f.steps(), 24) for part in both)
    np.testing.assert_array_equal(np.concatenate(both, axis=1), f.index())  # the two ranks' shares of one batch


def test_a_resume_starts_at_the_batch_its_last_epoch_chose(tmp_path):
    p = policies.plan(policies.ADAPTIVE, 2, 32)
    rows = [{"epoch": 1, "next_global_batch": 40}, {"epoch": 2, "next_global_batch": 56}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert adaptive.start_batch(tmp_path, p, 2, Chief()) == 28
    assert adaptive.start_batch(tmp_path, p, 0, Chief()) == 16, "a new run: the plan's"
    assert adaptive.start_batch(None, p, 2, Chief()) == 16, "a rank other than 0 takes rank 0's (here its own)"
