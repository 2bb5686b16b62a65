"""The policy kit (training/kit.py), one per run: the steps it builds hold the plan's workers
and the backend's allreduce from their constructor, and what belongs to one call of fit (the
feeds) reaches the callbacks hook as an argument."""

from types import SimpleNamespace

import pytest
import tensorflow as tf

from deepdensity.config import Config
from deepdensity.model.autoencoder import SlicedStep
from deepdensity.model.steps import LocalStep, NoiseStep
from deepdensity.scaling import policies
from deepdensity.training import adaptive, callbacks, dist
from deepdensity.training.kit import PolicyKit


def tiny():
    x = tf.keras.Input((4,))
    return tf.keras.Model(x, tf.keras.layers.Dense(2)(x), name="tiny")


@pytest.mark.parametrize("mode, cls", [(policies.ADAPTIVE, NoiseStep), (policies.LOCAL, LocalStep)])
@pytest.mark.parametrize("workers, processes", [(4, 1), (4, 4), (8, 2)])
def test_the_steps_hold_the_plans_workers_and_the_backends_allreduce(mode, cls, workers, processes):
    backend = dist.Single()
    p = policies.plan(mode, workers, 32, processes=processes)
    model = p.policy.training_model(PolicyKit(Config(), backend), tiny(), p)
    assert type(model) is cls and model.name == "tiny"
    assert (model.parts, model.workers) == (workers // processes, workers)
    assert model.average == backend.average


def test_the_papers_step_slices_at_max_pass_batch():
    p = policies.plan(policies.WEAK, 4, 32, processes=1)  # one process holds 128 samples
    model = p.policy.training_model(PolicyKit(Config(max_pass_batch=32), dist.Single()), tiny(), p)
    assert type(model) is SlicedStep and model.grad_slices == 4


def test_the_callbacks_hook_takes_the_fits_feeds():
    kit, said = PolicyKit(Config(), dist.Single()), []
    p = policies.plan(policies.ADAPTIVE, 2, 32)
    growing = adaptive.AdaptiveFeed(128, p, Config(), 0, 1, 0, 16)
    feeds = SimpleNamespace(adaptive=growing, run=SimpleNamespace(say=said.append))
    [cb] = p.policy.callbacks(kit, p, 4, feeds)
    assert isinstance(cb, adaptive.AdaptiveBatch) and cb.feed is growing and cb.say == said.append
    local = policies.plan(policies.LOCAL, 2, 32)
    [sync] = local.policy.callbacks(kit, local, 4, feeds)
    assert isinstance(sync, callbacks.LocalSync) and sync.local_steps == Config().local_steps
    assert policies.plan(policies.STRONG, 2, 32).policy.callbacks(kit, p, 4, feeds) == []
