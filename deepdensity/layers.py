"""The DeepDensity layer of Cunha et al. (HPML 2018), section V, and its two pure parts.

    covariance(sigma, rho)                 heads' raw outputs -> covariance matrices (eq. 6)
    mixture_density(points, alpha, mu, cov) -> sum_k alpha_k N(x; mu_k, Sigma_k)  (eq. 7)
    DeepDensity(grid_size, ndim)           renders the mixture on the regular grid over [-1, 1]^n
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

# log(0) guard for mixture weights: a softmax can round a weight to exactly 0.
_TINY = 1e-30


def n_correlations(ndim: int) -> int:
    return ndim * (ndim - 1) // 2


def correlation_pairs(ndim: int) -> list:
    """The (i, j), i > j, that the entries of `rho`'s last axis stand for, in order."""
    return [(i, j) for i in range(1, ndim) for j in range(i)]


def grid_points(grid_size: int, ndim: int) -> np.ndarray:
    """Centres of the grid_size^ndim cells tiling [-1, 1]^ndim, shape (grid_size^ndim, ndim).

    Points run in C order over the array axes, and coordinate d of a point is its
    position along array axis d, so `density.reshape((grid_size,) * ndim)` is the cube.
    """
    axis = -1.0 + (np.arange(grid_size) + 0.5) * (2.0 / grid_size)
    mesh = np.meshgrid(*([axis] * ndim), indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=-1).astype(np.float32)


def covariance_cholesky(sigma, rho, sigma_min: float = 0.05, corr_max: float = 0.95):
    """Lower Cholesky factor of `covariance(sigma, rho, ...)`: D L_R, see `covariance`."""
    sigma = tf.convert_to_tensor(sigma)
    rho = tf.convert_to_tensor(rho, dtype=sigma.dtype)
    ndim = sigma.shape[-1]
    if ndim is None:
        raise ValueError("the last axis of sigma (n) must be known")
    if rho.shape[-1] != n_correlations(ndim):
        raise ValueError(f"rho must have n(n-1)/2 = {n_correlations(ndim)} entries on its last axis, "
                         f"got {rho.shape[-1]}")
    std = sigma_min + (1.0 - sigma_min) * sigma
    partial = (2.0 * rho - 1.0) * corr_max
    # Rows of the Cholesky factor of the correlation matrix from canonical partial
    # correlations z_ij (Lewandowski, Kurowicka & Joe 2009):
    #   L_i0 = z_i0,  L_ij = z_ij sqrt(1 - sum_{k<j} L_ik^2),  L_ii = sqrt(1 - sum_{k<i} L_ik^2).
    # |z_ij| <= corr_max < 1 makes L_ii^2 = prod_j (1 - z_ij^2) > 0: positive-definite always.
    pair_index = {pair: c for c, pair in enumerate(correlation_pairs(ndim))}
    zeros = tf.zeros_like(std[..., 0])
    rows = []
    for i in range(ndim):
        row, used = [], zeros
        for j in range(i):
            z = partial[..., pair_index[(i, j)]]
            entry = z * tf.sqrt(tf.maximum(1.0 - used, 0.0)) if j else z
            row.append(entry)
            used = used + tf.square(entry)
        # 1 - used = prod (1 - z^2) >= (1 - corr_max^2)^(n-1) > 0 analytically; the floor
        # only absorbs float rounding.
        row.append(tf.sqrt(tf.maximum(1.0 - used, (1.0 - corr_max ** 2) ** i * 0.5)))
        row.extend([zeros] * (ndim - i - 1))
        rows.append(tf.stack(row, axis=-1))
    chol_corr = tf.stack(rows, axis=-2)
    return std[..., :, None] * chol_corr


def covariance(sigma, rho, sigma_min: float = 0.05, corr_max: float = 0.95):
    """Covariance matrices of eq. (6) from the sigmoid heads, positive-definite for every input.

    Args:
      sigma: (..., K, n) in [0, 1], the sigma head (eq. 12).
      rho:   (..., K, n(n-1)/2) in [0, 1], the rho head (eq. 13); entry c stands for the
             pair `correlation_pairs(n)[c]` = (1,0), (2,0), (2,1), ...
    Returns:
      (..., K, n, n) covariance matrices Sigma = D R D with

        D = diag(s),  s_i = sigma_min + (1 - sigma_min) * sigma_i        in [sigma_min, 1],
        z_ij = (2 rho_ij - 1) * corr_max                                 in [-corr_max, corr_max],

      and R the correlation matrix whose canonical partial correlations are z_ij (the
      Cholesky construction of Lewandowski, Kurowicka & Joe 2009, see
      `covariance_cholesky`). For n = 2, R_10 = z_10; for n = 3, R_10 = z_10, R_20 = z_20 and
      R_21 = z_20 z_10 + z_21 sqrt((1 - z_10^2)(1 - z_20^2)). Reading sigmoid outputs
      directly as correlations (the paper's eq. 6) is not positive-definite for all
      inputs; partial correlations in (-1, 1) always are, with
      det R = prod_{i>j} (1 - z_ij^2) >= (1 - corr_max^2)^(n(n-1)/2).
    """
    chol = covariance_cholesky(sigma, rho, sigma_min, corr_max)
    return tf.matmul(chol, chol, transpose_b=True)


def log_mixture_density(points, alpha, mu, cov):
    """log of `mixture_density`, computed as a log-sum-exp over components (no underflow)."""
    points = tf.convert_to_tensor(points)
    mu = tf.convert_to_tensor(mu, dtype=points.dtype)
    alpha = tf.convert_to_tensor(alpha, dtype=points.dtype)
    cov = tf.convert_to_tensor(cov, dtype=points.dtype)
    ndim = points.shape[-1]
    chol = tf.linalg.cholesky(cov)                                            # (B, K, n, n)
    eye = tf.eye(ndim, batch_shape=tf.shape(chol)[:-2], dtype=chol.dtype)
    chol_inv = tf.linalg.triangular_solve(chol, eye, lower=True)              # L^-1
    # z = L^-1 (x - mu): one batched matmul against all points, then a shift per component.
    z = tf.einsum("bkij,vj->bkvi", chol_inv, points) \
        - tf.einsum("bkij,bkj->bki", chol_inv, mu)[:, :, None, :]             # (B, K, V, n)
    mahalanobis = tf.reduce_sum(tf.square(z), axis=-1)                        # (B, K, V)
    log_det = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)), axis=-1)  # (B, K)
    # The normalisation is 1 / sqrt((2 pi)^n det Sigma); the paper's eq. (5) misprints it.
    log_norm = -0.5 * (ndim * math.log(2.0 * math.pi) + log_det)
    log_components = log_norm[..., None] - 0.5 * mahalanobis
    log_alpha = tf.math.log(tf.maximum(alpha, _TINY))[..., None]
    return tf.reduce_logsumexp(log_alpha + log_components, axis=1)            # (B, V)


def mixture_density(points, alpha, mu, cov):
    """Eq. (7): M(x) = sum_k alpha_k N(x; mu_k, Sigma_k), evaluated at every point.

    Args:
      points: (V, n) evaluation points.
      alpha:  (B, K) mixture weights (sum to 1 for a proper density).
      mu:     (B, K, n) means.
      cov:    (B, K, n, n) positive-definite covariances.
    Returns:
      (B, V), with N(x; mu, Sigma) = exp(-(x-mu)^T Sigma^-1 (x-mu) / 2) / sqrt((2 pi)^n det Sigma).
    """
    return tf.exp(log_mixture_density(points, alpha, mu, cov))


@tf.keras.utils.register_keras_serializable(package="deepdensity")
class DeepDensity(tf.keras.layers.Layer):
    """Renders a Gaussian mixture (paper eq. 7) on the regular grid over [-1, 1]^ndim.

    Inputs, a list of the heads' outputs (eqs. 10-13):
      alpha (B, K) softmax, mu (B, K, n) tanh, sigma (B, K, n) sigmoid and, for n > 1,
      rho (B, K, n(n-1)/2) sigmoid.
    Output:
      (B, grid_size, ..., grid_size, 1), ndim grid axes: the mixture density at the centre
      of every cell, axis d of the output being coordinate d of `mu`.
    The covariances are built by `covariance` (positive-definite for any head output) and
    the density by `log_mixture_density`, so no head output yields NaN or inf.
    """

    def __init__(self, grid_size: int = 16, ndim: int = 3, sigma_min: float = 0.05,
                 corr_max: float = 0.95, **kwargs):
        super().__init__(**kwargs)
        if ndim not in (1, 2, 3):
            raise ValueError(f"DeepDensity renders on 1, 2 or 3 dimensions, got ndim={ndim}")
        if grid_size < 1:
            raise ValueError(f"grid_size must be >= 1, got {grid_size}")
        self.grid_size = int(grid_size)
        self.ndim = int(ndim)
        self.sigma_min = float(sigma_min)
        self.corr_max = float(corr_max)

    def build(self, input_shape):
        # The grid is a constant, not a weight: nothing here is trained.
        self.points = tf.constant(grid_points(self.grid_size, self.ndim))
        super().build(input_shape)

    def call(self, inputs):
        if self.ndim > 1:
            alpha, mu, sigma, rho = inputs
        else:
            alpha, mu, sigma = inputs[:3]
            rho = tf.zeros_like(sigma[..., :0])
        cov = covariance(sigma, rho, self.sigma_min, self.corr_max)
        density = mixture_density(tf.cast(self.points, mu.dtype), alpha, mu, cov)
        shape = tf.concat([tf.shape(density)[:1], [self.grid_size] * self.ndim, [1]], axis=0)
        return tf.reshape(density, shape)

    def compute_output_shape(self, input_shape):
        return tf.TensorShape([input_shape[0][0]] + [self.grid_size] * self.ndim + [1])

    def get_config(self):
        return {**super().get_config(), "grid_size": self.grid_size, "ndim": self.ndim,
                "sigma_min": self.sigma_min, "corr_max": self.corr_max}
