"""The training steps are whole when made: their slices, workers and allreduce are constructor
arguments that survive compiling and fitting, and a new number of slices (elastic training)
retraces the step. (What the steps compute: tests/study/test_beyond.py.)"""

import numpy as np
import pytest
import tensorflow as tf

from deepdensity.model.autoencoder import SlicedStep, for_training
from deepdensity.model.steps import LocalStep, NoiseStep

# Builds or fits TensorFlow models in this process: the middle tier (make test-medium).
pytestmark = pytest.mark.medium


def tiny(cls=tf.keras.Model, **kwargs):
    tf.keras.utils.set_random_seed(0)
    x = tf.keras.Input((4,))
    return cls(x, tf.keras.layers.Dense(2)(tf.keras.layers.Dense(3, activation="tanh")(x)), name="tiny", **kwargs)


def data(n=8):
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, 4)).astype("f4"), rng.normal(size=(n, 2)).astype("f4")


def fitted(model):
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.1), loss="mse")
    model.fit(*data(), batch_size=8, epochs=1, shuffle=False, verbose=0)
    return model


def test_for_training_keeps_the_layers_and_takes_its_slices():
    plain = tiny()
    model = for_training(plain, 4)
    assert isinstance(model, SlicedStep) and model.grad_slices == 4 and model.name == "tiny"
    assert [id(v) for v in model.trainable_variables] == [id(v) for v in plain.trainable_variables]
    assert for_training(plain).grad_slices == 1


@pytest.mark.parametrize("cls", [NoiseStep, LocalStep])
def test_the_by_hand_steps_take_their_workers_and_allreduce_from_the_constructor(cls):
    calls = []

    def average(tensors):
        calls.append(len(tensors))
        return list(tensors)

    model = tiny(cls, parts=1, workers=4, average=average)
    assert (model.parts, model.workers, model.average) == (1, 4, average)
    fitted(model)
    assert (model.parts, model.workers, model.average) == (1, 4, average), "kept through compile and fit"
    if cls is NoiseStep:
        assert calls, "the step averages through the allreduce it was given"
    else:
        model.average_workers()
        assert calls
    emulated = tiny(cls, parts=2)
    assert (emulated.parts, emulated.workers) == (2, 2), "one process holding every worker by default"


def test_set_grad_slices_retraces_the_step_only_when_the_slices_change():
    model = fitted(tiny(SlicedStep))
    step = model.train_function
    model.set_grad_slices(1)
    assert model.train_function is step
    model.set_grad_slices(2)
    assert model.grad_slices == 2 and model.train_function is not step
    x, y = data()
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    # the step of a model built with two slices, from the weights after the first fit
    twin = tiny(SlicedStep, grad_slices=2)
    twin.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.1), loss="mse")
    twin.set_weights(fitted(tiny(SlicedStep)).get_weights())
    twin.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), twin.get_weights()):
        np.testing.assert_array_equal(a, b)
