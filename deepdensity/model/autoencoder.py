"""The convolutional autoencoder of Cunha et al. (HPML 2018), section V and VI."""

from __future__ import annotations

import tensorflow as tf

from deepdensity.config import Config
from deepdensity.model.layers import DeepDensity, n_correlations
from deepdensity.utils.stack import require_keras2

_CONV = {1: tf.keras.layers.Conv1D, 2: tf.keras.layers.Conv2D, 3: tf.keras.layers.Conv3D}


def build_model(cfg: Config, grid_size: int = 16, ndim: int = 3, density_layer=DeepDensity) -> tf.keras.Model:
    """Encoder -> latent y (eq. 9) -> heads alpha, mu, sigma, rho (eqs. 10-13) -> DeepDensity.

    Input (B, G, ..., G, 1) with `ndim` grid axes; output the rendered density, same shape.
    The heads estimate 1/2 (n^2 + 3n + 2) K numbers per sample, as the paper counts.
    `density_layer` swaps the rendering (the bench's direct reference); default DeepDensity.
    """
    require_keras2(tf)
    K, n = cfg.n_components, ndim
    cube = tf.keras.Input(shape=(grid_size,) * ndim + (1,), name="cube")
    x = cube
    for i, (filters, kernel, stride) in enumerate(zip(cfg.conv_filters, cfg.conv_kernels, cfg.conv_strides)):
        x = _CONV[ndim](filters, kernel, strides=stride, padding="same", activation="relu", name=f"conv{i + 1}")(x)
    x = tf.keras.layers.Flatten(name="flatten")(x)
    y = tf.keras.layers.Dense(cfg.latent_dim, activation="relu", name="latent")(x)

    alpha = tf.keras.layers.Dense(K, activation="softmax", name="alpha")(y)
    mu = tf.keras.layers.Reshape((K, n), name="mu")(tf.keras.layers.Dense(K * n, activation="tanh", name="mu_dense")(y))
    sigma = tf.keras.layers.Reshape((K, n), name="sigma")(
        tf.keras.layers.Dense(K * n, activation="sigmoid", name="sigma_dense")(y)
    )
    heads = [alpha, mu, sigma]
    if n > 1:
        heads.append(
            tf.keras.layers.Reshape((K, n_correlations(n)), name="rho")(
                tf.keras.layers.Dense(K * n_correlations(n), activation="sigmoid", name="rho_dense")(y)
            )
        )
    density = density_layer(
        grid_size,
        n,
        sigma_min=cfg.sigma_min,
        corr_max=cfg.corr_max,
        jit_coefficients=cfg.xla == "coefficients",
        rendering="tf" if cfg.xla == "step" else cfg.rendering,
        name="deep_density",
    )(heads)
    return tf.keras.Model(cube, density, name="deepdensity_autoencoder")


def for_training(model: tf.keras.Model, grad_slices: int = 1) -> "SlicedStep":
    """The same layers and weights, with a training step that averages `grad_slices` slices.
    (Saved models stay plain functional models, which load anywhere without this class.)"""
    return SlicedStep(model.inputs, model.outputs, name=model.name, grad_slices=grad_slices)


class SlicedStep(tf.keras.Model):
    """A functional model whose training step can cut its batch into slices.

    With `grad_slices` = s > 1, a batch is cut into s equal slices whose gradients are
    computed one after the other and averaged before one optimizer update. Every slice's
    loss is a mean over its samples, so the average is the gradient of the whole batch:
    exactly what s Horovod workers holding one slice each compute with their allreduce.
    Emulating N workers in one process uses it to bound memory (`max_pass_batch`); the
    paper's Horovod runs never need it (a worker holds at most B = 32 samples).
    Not Horovod's `backward_passes_per_step`, which accumulates over successive batches.
    """

    def __init__(self, inputs, outputs, name=None, *, grad_slices: int = 1):
        super().__init__(inputs, outputs, name=name)
        self.grad_slices = int(grad_slices)

    def set_grad_slices(self, grad_slices: int) -> None:
        """Another number of slices (elastic training: a per-process batch of another N); the
        step is traced again when it changes, since the number is a constant of the trace."""
        if int(grad_slices) != self.grad_slices:
            self.grad_slices = int(grad_slices)
            self.make_train_function(force=True)

    def train_step(self, data):
        if self.grad_slices == 1:
            return super().train_step(data)
        x, y = data
        slices = self.grad_slices
        width = tf.shape(x)[0] // slices
        variables = self.trainable_variables

        def add_slice(i, total):
            lo, hi = i * width, (i + 1) * width
            with tf.GradientTape() as tape:
                # compute_loss also adds the slice to the epoch's mean loss, weighted by its size
                loss = self.compute_loss(x[lo:hi], y[lo:hi], self(x[lo:hi], training=True))
            return i + 1, [t + g for t, g in zip(total, tape.gradient(loss, variables))]

        # An explicit loop: Keras does not autograph train_step, and unrolling s slices
        # would trace the model s times.
        _, total = tf.while_loop(
            lambda i, _: i < slices, add_slice, (tf.constant(0), [tf.zeros_like(v) for v in variables])
        )
        self.optimizer.apply_gradients(zip([t / float(slices) for t in total], variables))
        return self.get_metrics_result()


def make_adam(cfg: Config, lr: float) -> tf.keras.optimizers.Optimizer:
    # The legacy Adam keeps `lr` a plain variable that Horovod's DistributedOptimizer and
    # its LR callbacks have long handled; its update is the same Adam (Kingma & Ba).
    return tf.keras.optimizers.legacy.Adam(learning_rate=lr, beta_1=cfg.beta_1, beta_2=cfg.beta_2, epsilon=cfg.epsilon)
