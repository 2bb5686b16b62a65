"""A training step of the trainer's model as a callable, and timing callables in turns: what
every probe and figure of the bench times (probes.py, rank_probes.py, step_figures.py)."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
import tensorflow as tf

from deepdensity.model.autoencoder import build_model, for_training, make_adam
from deepdensity.model.layers import DeepDensity
from deepdensity.perf.profile import random_cubes
from deepdensity.scaling.rules import grad_slices


def trainable(cfg, batch: int, layer=DeepDensity, backend=None):
    """The trainer's model at this batch: its train_step (slices included), its `xla`; with a
    `backend` (dist.Horovod), its optimizer averages the gradients across ranks as in training."""
    model = for_training(build_model(cfg, 16, 3, density_layer=layer), grad_slices(batch, cfg.max_pass_batch))
    optimizer = make_adam(cfg, cfg.base_lr)
    if backend is not None:
        optimizer = backend.wrap_optimizer(optimizer, cfg.allreduce_groups)
    model.compile(
        optimizer=optimizer, loss=tf.keras.losses.MeanSquaredLogarithmicError(), jit_compile=cfg.xla == "step"
    )
    return model


def training_step(model, batch: int, seed: int = 0, cubes: Optional[np.ndarray] = None):
    """A callable running one training step (forward, backward, Adam) of `model` at this batch
    as model.fit runs it: Keras' train_function on an iterator of a tf.data pipeline. Not
    train_on_batch, which builds a data adapter on every call: 5-6 ms a step on a 2-core AMD
    EPYC that fit pays once per epoch (docs/performance.md, "Where a step's time goes"). The
    loss is read back, so the time covers the step's end on a device that runs asynchronously.
    On `cubes` (a data set's training cubes, (n, 16, 16, 16, 1)) each step takes the next
    `batch` of them, from the `seed`-th batch on; else one batch of random cubes, again and
    again. A step costs more on the study's cubes than on random ones (about 3 ms of 25 at
    batch 16 on two ranks of a 2-core AMD EPYC), so the clock probes on the data it prices."""
    batches = iter(probe_batches(batch, seed, cubes))
    train_function = model.make_train_function()
    return lambda: float(train_function(batches)["loss"])


def probe_batches(batch: int, seed: int = 0, cubes: Optional[np.ndarray] = None) -> tf.data.Dataset:
    """(input, target) batches for a probe's steps, without end: from `cubes`, batch after batch
    from the `seed`-th on, round the end of the data and then from that batch again (cubes
    left over that make no whole batch are skipped; fewer cubes than a batch are taken again
    to fill one), else one batch of random cubes over and over."""
    if cubes is None:
        x = random_cubes(batch, seed)
        return tf.data.Dataset.from_tensors((x, x)).repeat()
    order = np.roll(np.arange(len(cubes)), -seed * batch)
    order = np.resize(order, max(len(order), batch))  # fewer cubes than a batch: taken again
    return (
        tf.data.Dataset.from_tensor_slices(cubes[order])
        .batch(batch, drop_remainder=True)
        .map(lambda x: (x, x))
        .repeat()
    )


def paired_samples(fns: dict, repeats: int) -> dict:
    """Seconds of each call of each callable, the callables taking turns so that a noisy
    machine slows them alike: the i-th samples of A and B are one round. Every other round
    runs in reverse (A B, B A, A B, ...), so that no callable always runs right after the same
    one (each leaves the caches to the next in its own state)."""
    for fn in fns.values():  # trace and warm up
        fn()
        fn()
    samples = {name: [] for name in fns}
    names = list(fns)
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - t)
    return samples


def paired_seconds(fns: dict, repeats: int) -> dict:
    """Median seconds of each callable, taking turns (paired_samples)."""
    return {name: float(np.median(v)) for name, v in paired_samples(fns, repeats).items()}


def median_seconds(fn, repeats: int) -> float:
    """Median seconds of one call of `fn` (after two warm-up calls)."""
    return paired_seconds({"fn": fn}, repeats)["fn"]


def share_quartiles(step: list, trivial: list) -> tuple:
    """The rendering's share of a step, (step - trivial) / step, round by round: its median
    and quartiles. One round's two calls ran moments apart, so a slow spell of the machine
    cancels within the round instead of moving the share."""
    shares = [(s - t) / s for s, t in zip(step, trivial)]
    q1, median, q3 = np.percentile(shares, [25, 50, 75])
    return float(median), float(q1), float(q3)
