"""The run's training and validation data as tf.data pipelines, and the fit loop over them.
The order of the training cubes depends on (seed, pass) only, never on the rank."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from deepdensity.config import Config, ConfigError
from deepdensity.scaling import rules
from deepdensity.training import adaptive, callbacks
from deepdensity.training.launch import Launch


class Feeds:
    """This process's share of every global batch, epoch after epoch, and its validation shard."""

    def __init__(self, cfg: Config, run: Launch, train_x, val_x, initial_epoch: int, grad_slices: int):
        self.cfg, self.run, self.initial_epoch = cfg, run, initial_epoch
        self.n_train = len(train_x)
        self.train_t = tf.constant(train_x[..., None])
        lo, hi = rules.validation_shard(len(val_x), run.rank, run.processes)
        self.val = tf.data.Dataset.from_tensor_slices((val_x[lo:hi, ..., None],) * 2).batch(
            run.p.per_process_batch // grad_slices
        )
        # a policy split unevenly (elastic strong scaling on an N that does not divide B): each
        # rank's mean loss is weighted so that the allreduced gradient is still the global
        # batch's mean (rules.slice_weight)
        self.weight = None
        if run.p.global_batch % run.processes:
            if grad_slices > 1:
                raise ConfigError(
                    f"max_pass_batch {cfg.max_pass_batch} would cut unequal parts of the global "
                    f"batch over {run.processes} workers; set max_pass_batch=0"
                )
            self.weight = rules.slice_weight(run.p.global_batch, run.rank, run.processes)
        # a batch that grows during the run: each epoch's data is made at its start (adaptive.py)
        self.adaptive = adaptive.feed_of(cfg, run, self.n_train, initial_epoch) if run.p.policy.grows_batch else None

    def batches_of(self, index: np.ndarray) -> tf.data.Dataset:
        if self.weight is None:
            batch = lambda i: (tf.gather(self.train_t, i),) * 2  # noqa: E731
        else:  # Keras divides the weighted loss by the number of samples, not by the weights' sum;
            # shape (n, 1, ..., 1) so that it broadcasts over the voxels of MSLE's per-voxel losses
            ones = [1] * (len(self.train_t.shape) - 2)
            batch = lambda i: (  # noqa: E731
                (tf.gather(self.train_t, i),) * 2 + (tf.fill(tf.concat([tf.shape(i), ones], 0), self.weight),)
            )
        return (
            tf.data.Dataset.from_tensor_slices(index.astype(np.int32))
            .map(batch, num_parallel_calls=1, deterministic=True)
            .prefetch(2)
        )

    def whole_run(self) -> tf.data.Dataset:
        """One index stream for the whole run, so epochs follow each other without
        re-creating iterators."""
        p, cfg, run = self.run.p, self.cfg, self.run
        orders = [
            rules.shard_of_batch(
                rules.epoch_order(self.n_train, p, e, cfg.seed, cfg.epoch_definition),
                run.rank,
                run.processes,
                uneven=run.elastic,
            )
            for e in range(self.initial_epoch, cfg.max_epochs)
        ]
        return self.batches_of(np.concatenate(orders))

    def fit(self, model, cbs: list, steps: int, record: callbacks.RunRecord, validation=True) -> None:
        """Train to the cap or until a callback stops the run. `validation` False: a callback
        validates (elastic training), and Keras is given no validation data to cache."""
        cfg, val = self.cfg, (self.val if validation else None)
        if self.adaptive is None:
            model.fit(
                self.whole_run(),
                validation_data=val,
                epochs=cfg.max_epochs,
                initial_epoch=self.initial_epoch,
                steps_per_epoch=steps,
                callbacks=cbs,
                verbose=0,
            )
            return
        adaptive.fit_by_epoch(model, self.adaptive, self.batches_of, val, cbs, record)
