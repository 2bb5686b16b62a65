"""The DeepDensity layer of Cunha et al. (HPML 2018), section V, and its two pure parts.

covariance(sigma, rho)                 heads' raw outputs -> covariance matrices (eq. 6)
mixture_density(points, alpha, mu, cov) -> sum_k alpha_k N(x; mu_k, Sigma_k)  (eq. 7),
                                       through the quadratic form: one small matmul
DeepDensity(grid_size, ndim)           renders the mixture on the regular grid over [-1, 1]^n
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from deepdensity.model import kernels
from deepdensity.model.autograph_rules import leave_to_graph_mode

# the layer and its kernels branch on Python values only: no conversion (autograph_rules.py)
leave_to_graph_mode("deepdensity.model.layers")
leave_to_graph_mode("deepdensity.model.kernels")

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
        raise ValueError(
            f"rho must have n(n-1)/2 = {n_correlations(ndim)} entries on its last axis, got {rho.shape[-1]}"
        )
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
        row.append(tf.sqrt(tf.maximum(1.0 - used, (1.0 - corr_max**2) ** i * 0.5)))
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


def monomials(points):
    """The quadratic monomials of every point, float64 (V, m), m = (n + 1)(n + 2) / 2:

        x_i^2 (i < n),  x_i x_j (i > j, in `correlation_pairs` order),  x_i,  1.

    Any quadratic function of x, such as a Gaussian's log density, is `monomials @ c` for
    one coefficient vector c (see `quadratic_coefficients`).
    """
    x = tf.cast(points, tf.float64)
    n = x.shape[-1]
    cols = (
        [x[:, i] ** 2 for i in range(n)]
        + [x[:, i] * x[:, j] for i, j in correlation_pairs(n)]
        + [x[:, i] for i in range(n)]
        + [tf.ones_like(x[:, 0])]
    )
    return tf.stack(cols, axis=-1)


def _log_weight_and_norm(alpha, chol):
    """(..., K): log alpha_k - (n log 2 pi + log det Sigma_k) / 2, with Sigma = L L^T.
    The normalisation is 1 / sqrt((2 pi)^n det Sigma); the paper's eq. (5) misprints it."""
    ndim = chol.shape[-1]
    log_det = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)), axis=-1)
    return tf.math.log(tf.maximum(alpha, _TINY)) - 0.5 * (ndim * math.log(2.0 * math.pi) + log_det)


def _coefficients_of_cov(alpha, mu, cov):
    return quadratic_coefficients(alpha, mu, tf.linalg.cholesky(tf.cast(cov, tf.float64)))


def quadratic_coefficients(alpha, mu, chol):
    """Coefficients (..., K, m), float64, of log(alpha_k N(x; mu_k, L L^T)) on `monomials`.

    With P = Sigma^-1 = L^-T L^-1 and a = L^-1 mu:
        log(alpha N) = log alpha - (n log 2 pi + log det Sigma) / 2 - |a|^2 / 2
                       + (P mu) . x - sum_i P_ii x_i^2 / 2 - sum_{i>j} P_ij x_i x_j.
    Computed in float64: the terms are up to |P| ~ 1 / (sigma_min^2 lambda_min(R)), over 1e5
    at the extremes of the heads, and cancel to a few units near mu, which float32 cannot
    resolve (4e-4 to 3e-2 error in log density, measured); float64 keeps it below 1e-9.
    """
    chol = tf.cast(chol, tf.float64)
    mu = tf.cast(mu, tf.float64)
    ndim = chol.shape[-1]
    eye = tf.eye(ndim, batch_shape=tf.shape(chol)[:-2], dtype=tf.float64)
    chol_inv = tf.linalg.triangular_solve(chol, eye, lower=True)  # L^-1
    precision = tf.matmul(chol_inv, chol_inv, transpose_a=True)  # P
    p_mu = tf.linalg.matvec(precision, mu)
    a = tf.linalg.matvec(chol_inv, mu)
    const = _log_weight_and_norm(tf.cast(alpha, tf.float64), chol) - 0.5 * tf.reduce_sum(tf.square(a), -1)
    cols = (
        [-0.5 * precision[..., i, i] for i in range(ndim)]
        + [-precision[..., i, j] for i, j in correlation_pairs(ndim)]
        + [p_mu[..., i] for i in range(ndim)]
        + [const]
    )
    return tf.stack(cols, axis=-1)


def _sum_of_exponentials(coeffs, log_components, mono32):
    """sum_k exp(log_components(coeffs)) over K, (B, V) float32, with a hand-written gradient.

    No log-sum-exp is needed: log(alpha N) <= -log((2 pi)^(n/2) sigma_min^n det(R)^(1/2)),
    about 10 at n = 3 and sigma_min = 0.05, far from float32 overflow, and a component that
    underflows to 0 is below 1e-38 of the mixture. The gradient reuses the forward
    exponentials in one batched float32 matmul, d/dc_km = sum_v exp(.)_bkv g_bv x^m_v,
    instead of differentiating the float64 matmul (8 ms more at batch 32, K = 50, measured).
    """

    @tf.custom_gradient
    def render(c):
        comps = tf.exp(log_components(c))  # (B, K, V)

        def grad(upstream):
            return tf.cast(tf.matmul(comps, upstream[:, :, None] * mono32), tf.float64)

        return tf.reduce_sum(comps, axis=1), grad

    return render(coeffs)


def render_mixture(mono, coeffs):
    """sum_k exp(mono @ coeffs_k): the mixture density (B, V), float32, at any points.

    `mono` (V, m) float64 from `monomials`, `coeffs` (B, K, m) float64 from
    `quadratic_coefficients`: one float64 (B*K, m) x (m, V) matmul, one exp, one sum.
    """
    mono = tf.cast(mono, tf.float64)
    return _sum_of_exponentials(
        coeffs, lambda c: tf.cast(tf.matmul(c, mono, transpose_b=True), tf.float32), tf.cast(mono, tf.float32)
    )


def grid_monomials(grid_size: int, ndim: int):
    """Monomials of the grid's cell centres as exact small integers, for `render_on_grid`.

    Cell centres are x = t / G with t = 2i + 1 - G an odd integer, so the monomials of t
    (t_i t_j, t_i, 1) are integers below G^2, exact in float32. Returns (ints (V, m) float32,
    scale (m,) float64, bound (m,) float64): ints @ (scale * c) = monomials(points) @ c, and
    bound is each column's largest |int|.
    """
    t = grid_points(grid_size, ndim).astype(np.float64) * grid_size
    ints = monomials(np.rint(t)).numpy()
    n_quad = ndim + n_correlations(ndim)
    scale = np.array([grid_size**-2.0] * n_quad + [1.0 / grid_size] * ndim + [1.0])
    return tf.constant(ints, tf.float32), tf.constant(scale), tf.constant(np.abs(ints).max(axis=0))


def render_on_grid(grid, coeffs):
    """`render_mixture` at the grid's cell centres, with float32 matmuls that lose nothing.

    The quadratic form's terms cancel (they reach |P| ~ 1e5 and sum to a few units near
    mu), so a float32 matmul of the coefficients loses the result (3e-2 relative error in
    density, measured) and a float64 one is slow on CPUs (a third of the rendering). Here
    each component's coefficients c are split as c = hi + lo with hi on a grid of step
    q = 2^(ceil(log2 T) - 22), T = sum_m |c_m| bound_m: every product int * hi is then a
    multiple of q below 2^24 q, so the float32 matmul ints @ hi is exact in any order of
    summation, and lo (|lo| <= q/2) adds an error of about 2^-46 T. The result is as exact
    as float64 at the cost of two float32 matmuls. It relies on true float32 products:
    TensorFloat-32 (Ampere GPUs) rounds them, so the layer uses `render_mixture` there.
    """
    ints, scale, bound = grid

    def log_components(c):
        scaled = c * scale  # (B, K, m)
        total = tf.reduce_sum(tf.abs(scaled) * bound, axis=-1, keepdims=True)
        exponent = tf.math.ceil(tf.math.log(tf.maximum(total, 1e-300)) / math.log(2.0)) - 22.0
        quantum = tf.pow(tf.constant(2.0, tf.float64), exponent)
        hi = tf.round(scaled / quantum) * quantum
        lo = scaled - hi
        return tf.matmul(tf.cast(hi, tf.float32), ints, transpose_b=True) + tf.matmul(
            tf.cast(lo, tf.float32), ints, transpose_b=True
        )

    return _sum_of_exponentials(coeffs, log_components, ints * tf.cast(scale, tf.float32))


def mixture_density(points, alpha, mu, cov):
    """Eq. (7): M(x) = sum_k alpha_k N(x; mu_k, Sigma_k), evaluated at every point.

    Args:
      points: (V, n) evaluation points.
      alpha:  (B, K) mixture weights (sum to 1 for a proper density).
      mu:     (B, K, n) means.
      cov:    (B, K, n, n) positive-definite covariances.
    Returns:
      (B, V), with N(x; mu, Sigma) = exp(-(x-mu)^T Sigma^-1 (x-mu) / 2) / sqrt((2 pi)^n det Sigma).
    Computed as `render_mixture` of the quadratic form (one float64 matmul, see there).
    """
    points = tf.convert_to_tensor(points)
    return tf.cast(render_mixture(monomials(points), _coefficients_of_cov(alpha, mu, cov)), points.dtype)


def direct_log_mixture_density(points, alpha, mu, cov):
    """The former per-point form, kept as `make bench`'s reference: z = L^-1 (x - mu) for
    every point and component, a (B, K, V, n) float32 tensor, then a log-sum-exp."""
    points = tf.convert_to_tensor(points)
    mu = tf.convert_to_tensor(mu, dtype=points.dtype)
    alpha = tf.convert_to_tensor(alpha, dtype=points.dtype)
    cov = tf.convert_to_tensor(cov, dtype=points.dtype)
    ndim = points.shape[-1]
    chol = tf.linalg.cholesky(cov)
    eye = tf.eye(ndim, batch_shape=tf.shape(chol)[:-2], dtype=chol.dtype)
    chol_inv = tf.linalg.triangular_solve(chol, eye, lower=True)
    z = (
        tf.einsum("bkij,vj->bkvi", chol_inv, points) - tf.einsum("bkij,bkj->bki", chol_inv, mu)[:, :, None, :]
    )  # (B, K, V, n)
    mahalanobis = tf.reduce_sum(tf.square(z), axis=-1)
    return tf.reduce_logsumexp(_log_weight_and_norm(alpha, chol)[..., None] - 0.5 * mahalanobis, axis=1)


def _tensor_float_32_possible() -> bool:
    """TensorFloat-32 rounds float32 matmul inputs to 10 bits on Ampere and later GPUs."""
    return bool(tf.config.list_logical_devices("GPU")) and tf.config.experimental.tensor_float_32_execution_enabled()


def uses_kernel(rendering: str) -> bool:
    """Whether `rendering` ('auto', 'kernel', 'tf') means the CPU kernel here: 'auto' takes it
    on a CPU with AVX2 or AVX-512 and no GPU (its x86-64 baseline is slower than TensorFlow's
    own AVX kernels; config.py, `rendering`). 'kernel' without a built kernel is an error."""
    if rendering == "kernel" and not kernels.available():
        raise RuntimeError(
            f"rendering: kernel, but {kernels.LIBRARY} is not built or does not load; "
            f"run `python -m deepdensity.model.kernels.build` (make install does) or use rendering: auto"
        )
    if rendering != "auto":
        return rendering == "kernel"
    return kernels.available() and kernels.isa() in ("avx2", "avx512") and not tf.config.list_logical_devices("GPU")


@tf.keras.utils.register_keras_serializable(package="deepdensity")
class DeepDensity(tf.keras.layers.Layer):
    """Renders a Gaussian mixture (paper eq. 7) on the regular grid over [-1, 1]^ndim.

    Inputs, a list of the heads' outputs (eqs. 10-13):
      alpha (B, K) softmax, mu (B, K, n) tanh, sigma (B, K, n) sigmoid and, for n > 1,
      rho (B, K, n(n-1)/2) sigmoid.
    Output:
      (B, grid_size, ..., grid_size, 1), ndim grid axes: the mixture density at the centre
      of every cell, axis d of the output being coordinate d of `mu`.
    The covariances are built by `covariance_cholesky` (positive-definite for any head
    output) and the density from their quadratic form. `rendering` picks how it is summed:
    'kernel' (`kernels.render_on_grid`, one CPU kernel that never stores a (B, K, V) tensor),
    'tf' (`render_on_grid`: two exact float32 matmuls of (B*K, m) coefficients with the grid's
    (V, m) monomials and one exp) or 'auto' (the kernel where it is faster, see `uses_kernel`).
    No head output yields NaN or inf.
    """

    def __init__(
        self,
        grid_size: int = 16,
        ndim: int = 3,
        sigma_min: float = 0.05,
        corr_max: float = 0.95,
        jit_coefficients: bool = True,
        rendering: str = "auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if rendering not in ("auto", "kernel", "tf"):
            raise ValueError(f"rendering must be 'auto', 'kernel' or 'tf', got {rendering!r}")
        if ndim not in (1, 2, 3):
            raise ValueError(f"DeepDensity renders on 1, 2 or 3 dimensions, got ndim={ndim}")
        if grid_size < 1:
            raise ValueError(f"grid_size must be >= 1, got {grid_size}")
        self.grid_size = int(grid_size)
        self.ndim = int(ndim)
        self.sigma_min = float(sigma_min)
        self.corr_max = float(corr_max)
        self.jit_coefficients = bool(jit_coefficients)
        self.rendering = rendering

    def build(self, input_shape):
        # The grid's monomials are constants, not weights: nothing here is trained.
        self.grid = grid_monomials(self.grid_size, self.ndim)
        self.monomials = monomials(grid_points(self.grid_size, self.ndim))
        # The per-component algebra (Cholesky rows, L^-1, P, P mu, log det) is some fifty
        # tiny ops on (B, K, n, n) tensors, which XLA fuses; XLA on the (B, K, V) part is
        # slower (`make bench`, the `xla` settings).
        coefficients = self._coefficients
        self._coefficients_fn = tf.function(coefficients, jit_compile=True) if self.jit_coefficients else coefficients
        self._use_kernel = uses_kernel(self.rendering)
        super().build(input_shape)

    def _coefficients(self, alpha, mu, sigma, rho):
        chol = covariance_cholesky(sigma, rho, self.sigma_min, self.corr_max)
        return quadratic_coefficients(alpha, mu, chol), chol

    def call(self, inputs):
        if self.ndim > 1:
            alpha, mu, sigma, rho = inputs
        else:
            alpha, mu, sigma = inputs[:3]
            rho = tf.zeros_like(sigma[..., :0])
        coeffs, chol = self._coefficients_fn(alpha, mu, sigma, rho)
        density = tf.cast(self.render(alpha, mu, chol, coeffs), mu.dtype)
        shape = tf.concat([tf.shape(density)[:1], [self.grid_size] * self.ndim, [1]], axis=0)
        return tf.reshape(density, shape)

    def render(self, alpha, mu, chol, coeffs):
        """(B, V) density at the grid's cell centres, from the quadratic form's coefficients
        (the heads and Cholesky factors are there for renderings that use them instead)."""
        if self._use_kernel:
            return kernels.render_on_grid(coeffs, self.grid_size)
        if _tensor_float_32_possible():
            return render_mixture(self.monomials, coeffs)
        return render_on_grid(self.grid, coeffs)

    def compute_output_shape(self, input_shape):
        return tf.TensorShape([input_shape[0][0]] + [self.grid_size] * self.ndim + [1])

    def get_config(self):
        return {
            **super().get_config(),
            "grid_size": self.grid_size,
            "ndim": self.ndim,
            "sigma_min": self.sigma_min,
            "corr_max": self.corr_max,
            "jit_coefficients": self.jit_coefficients,
            "rendering": self.rendering,
        }
