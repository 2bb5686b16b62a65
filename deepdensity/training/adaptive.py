"""Adaptive batches (De et al., AISTATS 2017; Goldstein 2018, section 4) on the training side:
the run's growing batch, from the test at the end of an epoch to the data of the next.

Adaptive's pieces, and why each lives where it does:

  scaling/rules.py     `gradient_noise`, `adaptive_batch`: the big-batch test itself, pure, so
                       that it is tested exhaustively without TensorFlow
  scaling/policies.py  `Adaptive`: the policy object (its plan, N >= 2, not elastic), free of
                       TensorFlow as every policy is (the study reads the registry)
  model/steps.py       `NoiseStep`: the training step that measures the gradient's noise; a
                       Keras model averaging by hand as `LocalStep` does, with the same
                       constructor (parts, workers, average), so the two stay side by side
  here                 what shares one mutable value, the per-worker batch of the next epoch:
                       `AdaptiveFeed` holds it and makes each epoch's data from it,
                       `start_batch` finds it for a resumed run, the `AdaptiveBatch` callback
                       takes the test and grows it, and `fit_by_epoch` runs one Keras fit per
                       epoch on it. They were split over callbacks.py (the feed, the
                       callback) and feeds.py (the start, the loop): following the batch from
                       the test to the next epoch's data took both, and the kit besides.

training/kit.py builds the step and the callback for the policy's hooks; feeds.py makes the
feed for a policy whose batch grows (`grows_batch`) and hands its fit to `fit_by_epoch`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from deepdensity.scaling import rules
from deepdensity.training.runs import read_metrics


class AdaptiveFeed:
    """Adaptive's next epoch: its number and per-worker batch (set by `AdaptiveBatch`)."""

    def __init__(self, n_train, p, cfg, rank, processes, epoch, per_worker_batch):
        self.n_train, self.p, self.cfg, self.rank, self.processes = n_train, p, cfg, rank, processes
        self.epoch, self.per_worker_batch = epoch, per_worker_batch

    def global_batch(self) -> int:
        return self.per_worker_batch * self.p.workers

    def steps(self) -> int:
        return rules.steps_per_epoch(self.n_train, self.p, self.cfg.epoch_definition, self.global_batch())

    def index(self) -> np.ndarray:
        """This process's share of every global batch of the epoch: (steps, per_process_batch)."""
        order = rules.epoch_order(
            self.n_train, self.p, self.epoch, self.cfg.seed, self.cfg.epoch_definition, self.global_batch()
        )
        return rules.shard_of_batch(order, self.rank, self.processes)


def feed_of(cfg, run, n_train: int, initial_epoch: int) -> AdaptiveFeed:
    """This process's feed of a run (`run`: launch.Launch) from `initial_epoch` on."""
    return AdaptiveFeed(
        n_train,
        run.p,
        cfg,
        run.rank,
        run.processes,
        initial_epoch,
        start_batch(run.out if run.is_chief else None, run.p, initial_epoch, run.ranks),
    )


def start_batch(out: Optional[Path], p, initial_epoch: int, ranks) -> int:
    """Adaptive's per-worker batch for the first epoch to run: the plan's at the start, on
    resume the batch the last finished epoch chose (rank 0 reads it; every rank takes rank 0's)."""
    per_worker = p.per_worker_batch
    if out is not None and initial_epoch > 0:
        rows = [m for m in read_metrics(out) if m["epoch"] == initial_epoch]
        if rows and isinstance(rows[-1].get("next_global_batch"), int):
            per_worker = rows[-1]["next_global_batch"] // p.workers
    return int(ranks.from_chief(per_worker))


def fit_by_epoch(model, feed: AdaptiveFeed, batches_of, val, cbs: list, record) -> None:
    """The batch of each epoch is decided at the end of the one before, so every epoch gets its
    own index stream (`batches_of`, feeds.Feeds) and its own call of fit, which fixes steps per
    epoch; to the cap or until a callback stops the run (`record`: callbacks.RunRecord)."""
    while feed.epoch < feed.cfg.max_epochs and record.status is None:
        model.fit(
            batches_of(feed.index()),
            validation_data=val,
            epochs=feed.epoch + 1,
            initial_epoch=feed.epoch,
            steps_per_epoch=feed.steps(),
            callbacks=cbs,
            verbose=0,
        )


class AdaptiveBatch(tf.keras.callbacks.Callback):
    """De et al.'s big-batch test at the end of each epoch (rules.adaptive_batch) on the
    epoch's mean gradient statistics, which every worker holds alike after the allreduce;
    grows the per-worker batch for the next epoch, up to the base batch B (weak's)."""

    def __init__(self, feed: AdaptiveFeed, cfg, say):
        super().__init__()
        self.feed, self.cfg, self.say = feed, cfg, say

    def on_epoch_end(self, epoch, logs=None):
        logs = {} if logs is None else logs
        feed, n = self.feed, self.feed.p.workers
        noise = rules.gradient_noise(float(logs["grad_part_sq"]), float(logs["grad_sq"]), n)
        b = feed.per_worker_batch
        grown = rules.adaptive_batch(b, noise, float(logs["grad_sq"]), self.cfg.adaptive_theta, self.cfg.batch_size)
        logs.update(
            global_batch=b * n,
            steps=feed.steps(),
            allreduces=feed.steps(),
            grad_noise=noise,
            next_global_batch=grown * n,
        )
        if grown != b:
            self.say(
                f"epoch {epoch + 1}: gradient noise {noise:.3g} > theta^2 x {float(logs['grad_sq']):.3g}: "
                f"global batch {b * n} -> {grown * n}"
            )
        feed.per_worker_batch, feed.epoch = grown, epoch + 1
