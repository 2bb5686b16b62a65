"""The convolutional autoencoder of Cunha et al. (HPML 2018), section V and VI."""
from __future__ import annotations

import tensorflow as tf

from .config import Config
from .layers import DeepDensity, n_correlations

_CONV = {1: tf.keras.layers.Conv1D, 2: tf.keras.layers.Conv2D, 3: tf.keras.layers.Conv3D}


def build_model(cfg: Config, grid_size: int = 16, ndim: int = 3) -> tf.keras.Model:
    """Encoder -> latent y (eq. 9) -> heads alpha, mu, sigma, rho (eqs. 10-13) -> DeepDensity.

    Input (B, G, ..., G, 1) with `ndim` grid axes; output the rendered density, same shape.
    The heads estimate 1/2 (n^2 + 3n + 2) K numbers per sample, as the paper counts.
    """
    K, n = cfg.n_components, ndim
    cube = tf.keras.Input(shape=(grid_size,) * ndim + (1,), name="cube")
    x = cube
    for i, (filters, kernel, stride) in enumerate(zip(cfg.conv_filters, cfg.conv_kernels, cfg.conv_strides)):
        x = _CONV[ndim](filters, kernel, strides=stride, padding="same", activation="relu",
                        name=f"conv{i + 1}")(x)
    x = tf.keras.layers.Flatten(name="flatten")(x)
    y = tf.keras.layers.Dense(cfg.latent_dim, activation="relu", name="latent")(x)

    alpha = tf.keras.layers.Dense(K, activation="softmax", name="alpha")(y)
    mu = tf.keras.layers.Reshape((K, n), name="mu")(
        tf.keras.layers.Dense(K * n, activation="tanh", name="mu_dense")(y))
    sigma = tf.keras.layers.Reshape((K, n), name="sigma")(
        tf.keras.layers.Dense(K * n, activation="sigmoid", name="sigma_dense")(y))
    heads = [alpha, mu, sigma]
    if n > 1:
        heads.append(tf.keras.layers.Reshape((K, n_correlations(n)), name="rho")(
            tf.keras.layers.Dense(K * n_correlations(n), activation="sigmoid", name="rho_dense")(y)))
    density = DeepDensity(grid_size, n, sigma_min=cfg.sigma_min, corr_max=cfg.corr_max,
                          name="deep_density")(heads)
    return tf.keras.Model(cube, density, name="deepdensity_autoencoder")


def make_adam(cfg: Config, lr: float) -> tf.keras.optimizers.Optimizer:
    # The legacy Adam keeps `lr` a plain variable that Horovod's DistributedOptimizer and
    # its LR callbacks have long handled; its update is the same Adam (Kingma & Ba).
    return tf.keras.optimizers.legacy.Adam(learning_rate=lr, beta_1=cfg.beta_1,
                                           beta_2=cfg.beta_2, epsilon=cfg.epsilon)
