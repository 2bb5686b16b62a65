"""DeepDensity's numerics against an independent float64 NumPy reference (paper eq. 5-7,
with the normalisation 1 / sqrt((2 pi)^n det Sigma))."""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from deepdensity.config import Config
from deepdensity.layers import (DeepDensity, correlation_pairs, covariance, grid_points,
                                mixture_density)
from deepdensity.model import build_model


def numpy_mixture(points, alpha, mu, cov):
    out = np.zeros((alpha.shape[0], len(points)))
    n = points.shape[1]
    for b in range(alpha.shape[0]):
        for k in range(alpha.shape[1]):
            S = cov[b, k].astype(np.float64)
            d = points.astype(np.float64) - mu[b, k]
            q = np.einsum("vi,ij,vj->v", d, np.linalg.inv(S), d)
            out[b] += alpha[b, k] * np.exp(-q / 2) / np.sqrt((2 * np.pi) ** n * np.linalg.det(S))
    return out


def random_heads(rng, B, K, n):
    return (rng.dirichlet(np.ones(K), size=B).astype("f4"), rng.uniform(-1, 1, (B, K, n)).astype("f4"),
            rng.uniform(size=(B, K, n)).astype("f4"), rng.uniform(size=(B, K, n * (n - 1) // 2)).astype("f4"))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_mixture_density_matches_numpy(n):
    rng = np.random.default_rng(n)
    alpha, mu, sigma, rho = random_heads(rng, 3, 7, n)
    cov = covariance(sigma, rho).numpy()
    points = grid_points({1: 64, 2: 24, 3: 12}[n], n)
    got = mixture_density(points, alpha, mu, cov).numpy()
    want = numpy_mixture(points, alpha, mu, cov)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6 * want.max())


@pytest.mark.parametrize("n", [1, 2, 3])
def test_density_integrates_to_one_when_inside_the_cube(n):
    # one narrow component in the middle: nearly all its mass is on the grid
    points = grid_points(64 if n < 3 else 40, n)
    cell = (2.0 / (64 if n < 3 else 40)) ** n
    cov = np.eye(n, dtype="f4")[None, None] * 0.15 ** 2
    d = mixture_density(points, np.ones((1, 1), "f4"), np.zeros((1, 1, n), "f4"), cov).numpy()
    assert d.sum() * cell == pytest.approx(1.0, abs=2e-3)


def _corners(n):
    m = n * (n - 1) // 2
    return [(np.array(s, "f4"), np.array(r, "f4"))
            for s in itertools.product([0.0, 1.0], repeat=n) for r in itertools.product([0.0, 1.0], repeat=m)]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_covariance_positive_definite_saturated_and_random(n):
    corners = _corners(n)
    sigma = np.stack([c[0] for c in corners])[None]
    rho = np.stack([c[1] for c in corners])[None]
    rng = np.random.default_rng(0)
    sigma = np.concatenate([sigma, rng.uniform(size=(1, 2000, n)).astype("f4")], axis=1)
    rho = np.concatenate([rho, rng.uniform(size=(1, 2000, n * (n - 1) // 2)).astype("f4")], axis=1)
    cov = covariance(sigma, rho).numpy().astype(np.float64)
    assert cov.shape == (1, sigma.shape[1], n, n)
    np.testing.assert_allclose(cov, np.swapaxes(cov, -1, -2), atol=1e-7)
    assert np.linalg.eigvalsh(cov).min() > 0
    np.linalg.cholesky(cov)  # raises if not PD
    # and TensorFlow's float32 Cholesky, which the layer uses, succeeds and is finite
    assert np.isfinite(tf.linalg.cholesky(covariance(sigma, rho)).numpy()).all()


def test_covariance_closed_form_n3():
    # The docstring's mapping, written out: s = smin + (1 - smin) sigma, z = (2 rho - 1) cmax,
    # R10 = z10, R20 = z20, R21 = z20 z10 + z21 sqrt((1 - z10^2)(1 - z20^2)).
    smin, cmax = 0.05, 0.95
    sigma = np.array([[0.3, 0.9, 0.0]], "f4")
    rho = np.array([[0.1, 0.8, 0.65]], "f4")
    assert correlation_pairs(3) == [(1, 0), (2, 0), (2, 1)]
    s = smin + (1 - smin) * sigma[0].astype(np.float64)
    z10, z20, z21 = (2 * rho[0].astype(np.float64) - 1) * cmax
    R = np.eye(3)
    R[1, 0] = R[0, 1] = z10
    R[2, 0] = R[0, 2] = z20
    R[2, 1] = R[1, 2] = z20 * z10 + z21 * np.sqrt((1 - z10 ** 2) * (1 - z20 ** 2))
    want = np.outer(s, s) * R
    np.testing.assert_allclose(covariance(sigma, rho, smin, cmax).numpy()[0], want, rtol=1e-5, atol=1e-7)
    # n = 2: the correlation is z itself
    got2 = covariance(sigma[:, :2], rho[:, :1], smin, cmax).numpy()[0]
    np.testing.assert_allclose(got2[1, 0], s[0] * s[1] * z10, rtol=1e-5)


def test_covariance_rejects_wrong_rho_width():
    with pytest.raises(ValueError, match="n\\(n-1\\)/2"):
        covariance(np.zeros((2, 3), "f4"), np.zeros((2, 2), "f4"))


def test_no_nan_or_inf_for_extreme_head_outputs_values_and_gradients():
    K, n = 5, 3
    alpha = tf.Variable(np.array([[1.0, 0, 0, 0, 0], [0.2] * 5], "f4"))   # exact zeros in alpha
    mu = tf.Variable(np.array([[[1, 1, 1]] * K, [[-1, -1, -1]] * K], "f4"))
    sigma = tf.Variable(np.zeros((2, K, n), "f4"))                         # narrowest allowed
    rho = tf.Variable(np.stack([np.zeros((K, 3)), np.ones((K, 3))]).astype("f4"))  # saturated
    layer = DeepDensity(16, 3)
    with tf.GradientTape() as tape:
        out = layer([alpha, mu, sigma, rho])
        loss = tf.reduce_mean(tf.square(tf.math.log1p(out) - 0.1))
    grads = tape.gradient(loss, [alpha, mu, sigma, rho])
    assert np.isfinite(out.numpy()).all()
    assert all(np.isfinite(g.numpy()).all() for g in grads)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_layer_output_shape_and_grid_orientation(n):
    # a narrow component at mu = (+0.9 on axis 0, -0.9 elsewhere) peaks at that end of axis 0
    G, K = 8, 2
    mu = np.full((1, K, n), -0.9, "f4")
    mu[0, :, 0] = 0.9
    heads = [np.array([[1.0, 0.0]], "f4"), mu, np.zeros((1, K, n), "f4")]
    if n > 1:
        heads.append(np.full((1, K, n * (n - 1) // 2), 0.5, "f4"))
    out = DeepDensity(G, n)(heads).numpy()
    assert out.shape == (1,) + (G,) * n + (1,)
    assert np.unravel_index(out[0, ..., 0].argmax(), (G,) * n) == (G - 1,) + (0,) * (n - 1)


def test_layer_config_round_trip_and_registration():
    layer = DeepDensity(grid_size=12, ndim=2, sigma_min=0.1, corr_max=0.9, name="dd")
    cfg = layer.get_config()
    clone = DeepDensity.from_config(cfg)
    assert clone.get_config() == cfg
    assert tf.keras.utils.get_registered_object("deepdensity>DeepDensity") is DeepDensity
    with pytest.raises(ValueError):
        DeepDensity(16, ndim=4)


@pytest.mark.parametrize("fmt", ["keras", "h5"])
def test_model_survives_save_and_load(tmp_path, fmt):
    cfg = Config(n_components=4, conv_filters=(4, 4, 4), latent_dim=8)
    model = build_model(cfg, 16, 3)
    x = np.random.default_rng(0).uniform(size=(2, 16, 16, 16, 1)).astype("f4")
    path = tmp_path / f"m.{fmt}"
    model.save(path)
    loaded = tf.keras.models.load_model(path, compile=False)  # no custom_objects: registered
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_heads_estimate_the_papers_parameter_count(n):
    K = 50
    model = build_model(Config(n_components=K, conv_filters=(4, 4, 4), latent_dim=8), 8, n)
    heads = ["alpha", "mu_dense", "sigma_dense"] + (["rho_dense"] if n > 1 else [])
    total = sum(model.get_layer(h).units for h in heads)
    assert total == (n * n + 3 * n + 2) * K // 2
