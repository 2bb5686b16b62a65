"""Training steps of the two modes beyond the paper (Goldstein 2018, section 4).

Both average across workers by hand instead of through Horovod's DistributedOptimizer,
through an `average(list of tensors) -> list` function given to the constructor
(dist.Horovod.average: one grouped allreduce; identity in one process). A process holds
`parts` of the `workers` N: one under horovodrun, all N when it emulates them. The
constructor takes both (training/kit.py passes the plan's), so a step is whole when made.

  NoiseStep (adaptive)  the gradient of every worker's part, their mean for the update,
                        and beside it the mean of their squared norms, from which the
                        big-batch test estimates the gradient's noise (rules.gradient_noise).
  LocalStep (local)     every worker steps on its own part with its own copy of the weights
                        and Adam's moments; `average_workers` (called every H steps by the
                        trainer) averages weights and moments.

Not Horovod's `backward_passes_per_step`, which accumulates the gradients of several
successive batches into one synchronous update: local SGD takes H *updates* between
communications, on weights that drift apart until they are averaged.
"""

from __future__ import annotations

from typing import Callable, Optional

import tensorflow as tf

from deepdensity.model.autoencoder import SlicedStep


def _identity(tensors):
    return list(tensors)


class ByHandStep(SlicedStep):
    """A functional model whose step averages across workers by hand: this process holds
    `parts` of the `workers` N (default: all of them, as when it emulates them), and
    `average` is the mean over the processes (identity in one process)."""

    def __init__(
        self,
        inputs,
        outputs,
        name=None,
        *,
        parts: int = 1,
        workers: Optional[int] = None,
        average: Callable[[list], list] = _identity,
    ):
        super().__init__(inputs, outputs, name=name)
        self.parts = int(parts)
        self.workers = self.parts if workers is None else int(workers)
        self.average = average


class NoiseStep(ByHandStep):
    """One synchronous step that also measures how noisy its gradient is.

    Input (B, G, ..., G, 1), B = parts * b. Logs per epoch `grad_part_sq`, the mean over
    workers of ||g_i||^2 (g_i: worker i's mean gradient), and `grad_sq`, ||g||^2 of their
    mean g, the gradient the update uses.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.part_sq_tracker = tf.keras.metrics.Mean(name="grad_part_sq")
        self.sq_tracker = tf.keras.metrics.Mean(name="grad_sq")

    @property
    def metrics(self):
        return super().metrics + [self.part_sq_tracker, self.sq_tracker]

    def train_step(self, data):
        x, y = data
        parts = self.parts
        width = tf.shape(x)[0] // parts
        variables = self.trainable_variables

        def add_part(i, total, part_sq):
            lo, hi = i * width, (i + 1) * width
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x[lo:hi], y[lo:hi], self(x[lo:hi], training=True))
            grads = tape.gradient(loss, variables)
            return (
                i + 1,
                [t + g for t, g in zip(total, grads)],
                part_sq + tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]),
            )

        _, total, part_sq = tf.while_loop(
            lambda i, *_: i < parts, add_part, (tf.constant(0), [tf.zeros_like(v) for v in variables], tf.constant(0.0))
        )
        # Horovod: every process holds `parts` equal parts, so the average of the process
        # averages is the average over all N workers, for the gradient and its spread alike.
        reduced = self.average([t / float(parts) for t in total] + [part_sq / float(parts)])
        grads, mean_part_sq = reduced[:-1], reduced[-1]
        self.part_sq_tracker.update_state(mean_part_sq)
        self.sq_tracker.update_state(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
        self.optimizer.apply_gradients(zip(grads, variables))
        return self.get_metrics_result()


class LocalStep(ByHandStep):
    """Local SGD: each of this process's `parts` workers takes its own Adam step on its own
    part of the batch (B = parts * b), from its own weights and moments.

    With parts = 1 (one worker per process, horovodrun) this is a plain step without any
    allreduce. With parts > 1 (emulation) the workers' weights and moments live stacked in
    `stores`, (parts, ...) per variable, and are swapped into the model one worker at a
    time. Memory: 3 x parts x the model's weights (N = 32: 83 MB at K = 50); time: the
    same forward/backward work as one process with the whole batch, plus the swaps.
    """

    stores = None

    def state_variables(self) -> list:
        """The variables local SGD keeps per worker: weights and the optimizer's slots
        (Adam's two moments; none for plain SGD)."""
        opt = self.optimizer
        return list(self.trainable_variables) + [
            opt.get_slot(v, s) for s in opt.get_slot_names() for v in self.trainable_variables
        ]

    def start_workers(self) -> None:
        """Give every emulated worker the model's current state (after a restore or broadcast)."""
        if self.parts == 1:
            return
        if self.stores is None:
            self.stores = [tf.Variable(tf.stack([v] * self.parts), trainable=False) for v in self.state_variables()]
        else:
            for v, s in zip(self.state_variables(), self.stores):
                s.assign(tf.stack([v] * self.parts))

    def train_step(self, data):
        if self.parts == 1:
            return super().train_step(data)
        x, y = data
        parts = self.parts
        width = tf.shape(x)[0] // parts
        state, stores = self.state_variables(), self.stores
        variables = self.trainable_variables
        opt = self.optimizer
        step = opt.iterations.read_value()

        def worker_step(i):
            for v, s in zip(state, stores):
                v.assign(s[i])
            opt.iterations.assign(step)  # every worker takes the same step number
            lo, hi = i * width, (i + 1) * width
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x[lo:hi], y[lo:hi], self(x[lo:hi], training=True))
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            for v, s in zip(state, stores):
                s[i].assign(v)
            return i + 1

        tf.while_loop(lambda i: i < parts, worker_step, (tf.constant(0),))
        return self.get_metrics_result()

    def average_workers(self) -> None:
        """Average every worker's weights and moments (one allreduce across processes), and
        leave the average in the model, so that validation and checkpoints see it.

        The moments are averaged with the weights: after it every worker holds the same
        state, as after a broadcast, and with H = 1 and plain SGD the step is exactly the
        synchronous one. (With Adam no H gives that: Adam's update is not linear in the
        gradient, so N workers' Adam steps do not average to one Adam step on the mean.)
        """
        state = self.state_variables()
        means = [tf.reduce_mean(s, axis=0) for s in self.stores] if self.parts > 1 else state
        means = self.average(means)
        for v, m in zip(state, means):
            v.assign(m)
        if self.parts > 1:
            for s, m in zip(self.stores, means):
                s.assign(tf.stack([m] * self.parts))
