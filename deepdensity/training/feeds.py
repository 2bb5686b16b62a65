"""The run's training and validation data as tf.data pipelines, and the fit loop over them.
The order of the training cubes depends on (seed, pass) only, never on the rank."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from deepdensity.config import Config, ConfigError
from deepdensity.scaling import rules
from deepdensity.training import callbacks
from deepdensity.training.launch import Launch
from deepdensity.training.runs import read_metrics


class Feeds:
    """This process's share of every global batch, epoch after epoch, and its validation shard."""

    def __init__(self, cfg: Config, run: Launch, train_x, val_x, initial_epoch: int, grad_slices: int):
        self.cfg, self.run, self.initial_epoch = cfg, run, initial_epoch
        self.n_train = len(train_x)
        self.train_t = tf.constant(train_x[..., None])
        lo, hi = rules.validation_shard(len(val_x), run.rank, run.processes)
        self.val = tf.data.Dataset.from_tensor_slices((val_x[lo:hi, ..., None],) * 2).batch(
            run.p.per_process_batch // grad_slices)
        # a policy split unevenly (elastic strong scaling on an N that does not divide B): each
        # rank's mean loss is weighted so that the allreduced gradient is still the global
        # batch's mean (rules.slice_weight)
        self.weight = None
        if run.p.global_batch % run.processes:
            if grad_slices > 1:
                raise ConfigError(f"max_pass_batch {cfg.max_pass_batch} would cut unequal parts of the global "
                                  f"batch over {run.processes} workers; set max_pass_batch=0")
            self.weight = rules.slice_weight(run.p.global_batch, run.rank, run.processes)
        self.adaptive = None
        if run.p.policy.grows_batch:
            # The batch of each epoch is decided at the end of the one before, so every epoch
            # gets its own index stream (and its own call of fit, which fixes steps per epoch).
            self.adaptive = callbacks.AdaptiveFeed(
                self.n_train, run.p, cfg, run.rank, run.processes, initial_epoch,
                adaptive_start(run.out if run.is_chief else None, run.p, initial_epoch, run.ranks))

    def batches_of(self, index: np.ndarray) -> tf.data.Dataset:
        if self.weight is None:
            batch = lambda i: (tf.gather(self.train_t, i),) * 2  # noqa: E731
        else:   # Keras divides the weighted loss by the number of samples, not by the weights' sum;
            # shape (n, 1, ..., 1) so that it broadcasts over the voxels of MSLE's per-voxel losses
            ones = [1] * (len(self.train_t.shape) - 2)
            batch = lambda i: (tf.gather(self.train_t, i),) * 2 + (  # noqa: E731
                tf.fill(tf.concat([tf.shape(i), ones], 0), self.weight),)
        return (tf.data.Dataset.from_tensor_slices(index.astype(np.int32))
                .map(batch, num_parallel_calls=1, deterministic=True).prefetch(2))

    def whole_run(self) -> tf.data.Dataset:
        """One index stream for the whole run, so epochs follow each other without
        re-creating iterators."""
        p, cfg, run = self.run.p, self.cfg, self.run
        orders = [rules.shard_of_batch(rules.epoch_order(self.n_train, p, e, cfg.seed, cfg.epoch_definition),
                                       run.rank, run.processes, uneven=run.elastic)
                  for e in range(self.initial_epoch, cfg.max_epochs)]
        return self.batches_of(np.concatenate(orders))

    def fit(self, model, cbs: list, steps: int, record: callbacks.RunRecord, validation=True) -> None:
        """Train to the cap or until a callback stops the run. `validation` False: a callback
        validates (elastic training), and Keras is given no validation data to cache."""
        cfg, val = self.cfg, (self.val if validation else None)
        if self.adaptive is None:
            model.fit(self.whole_run(), validation_data=val, epochs=cfg.max_epochs,
                      initial_epoch=self.initial_epoch, steps_per_epoch=steps, callbacks=cbs, verbose=0)
            return
        feed = self.adaptive
        while feed.epoch < cfg.max_epochs and record.status is None:
            model.fit(self.batches_of(feed.index()), validation_data=val, epochs=feed.epoch + 1,
                      initial_epoch=feed.epoch, steps_per_epoch=feed.steps(), callbacks=cbs, verbose=0)


def adaptive_start(out: Optional[Path], p, initial_epoch: int, ranks) -> int:
    """Adaptive's per-worker batch for the first epoch to run: the plan's at the start, on
    resume the batch the last finished epoch chose (rank 0 reads it; every rank takes rank 0's)."""
    per_worker = p.per_worker_batch
    if out is not None and initial_epoch > 0:
        rows = [m for m in read_metrics(out) if m["epoch"] == initial_epoch]
        if rows and isinstance(rows[-1].get("next_global_batch"), int):
            per_worker = rows[-1]["next_global_batch"] // p.workers
    return int(ranks.from_chief(per_worker))
