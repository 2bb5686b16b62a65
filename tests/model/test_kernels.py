"""The rendering kernel (deepdensity/model/kernels/render.cc) against the float64 NumPy
reference and against the TensorFlow-ops rendering it replaces, on every instruction set the
kernel is compiled for that this CPU runs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from deepdensity.model import kernels, layers
from deepdensity.model.layers import DeepDensity, covariance, grid_points
from tests.model.test_layers import assert_density_close, extreme_heads, numpy_mixture, random_heads
from tests.support import ROOT

# Builds or fits TensorFlow models in this process: the middle tier (make test-medium).
pytestmark = pytest.mark.medium
needs_kernel = pytest.mark.skipif(not kernels.available(), reason="the rendering kernel is not built")


def test_make_install_builds_the_kernel():
    # `make install` compiles it; without it every CPU step renders with TensorFlow ops.
    assert kernels.available(), f"{kernels.LIBRARY} missing or not loadable: run `make install`"
    assert kernels.isa() in ("avx512", "avx2", "x86-64 baseline")


def coefficients(heads, n):
    chol = layers.covariance_cholesky(heads[2], heads[3][..., : n * (n - 1) // 2])
    return layers.quadratic_coefficients(heads[0], heads[1], chol)


@needs_kernel
@pytest.mark.parametrize("n, G", [(1, 64), (2, 32), (3, 16), (3, 12)])  # 12: the kernel's generic-G loops
def test_kernel_density_matches_float64_at_the_extremes(n, G):
    rng = np.random.default_rng(30 + n + G)
    heads = extreme_heads(rng, 5, 50, n)
    got = kernels.render_on_grid(coefficients(heads, n), G).numpy()
    cov64 = covariance(heads[2].astype(np.float64), heads[3][..., : n * (n - 1) // 2].astype(np.float64)).numpy()
    assert_density_close(got, numpy_mixture(grid_points(G, n), heads[0], heads[1], cov64))


@needs_kernel
@pytest.mark.parametrize("n, G", [(1, 64), (2, 32), (3, 16), (3, 12)])
def test_kernel_gradient_matches_the_tensorflow_rendering(n, G):
    # Both differentiate the same sum; they differ only in float32 summation order and in
    # the exponential's last bits (the kernel's own exp, ~2 ulp), so 1e-5 of the norm holds
    # with a wide margin (1.2e-7 measured at n = 3 on an AVX-512 Xeon).
    rng = np.random.default_rng(n + G)
    c = tf.constant(coefficients(random_heads(rng, 4, 50, n), n))
    up = tf.constant(rng.uniform(size=(4, G**n)).astype("f4"))
    grads = []
    for render in (
        lambda c: kernels.render_on_grid(c, G),
        lambda c: layers.render_on_grid(layers.grid_monomials(G, n), c),
    ):
        with tf.GradientTape() as tape:
            tape.watch(c)
            loss = tf.reduce_sum(render(c) * up)
        grads.append(tape.gradient(loss, c).numpy())
    assert np.linalg.norm(grads[0] - grads[1]) <= 1e-5 * np.linalg.norm(grads[1])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_tensorflow_rendering_still_matches_float64(n):
    # rendering: tf stays the path for GPUs and XLA: its accuracy is tested on its own.
    rng = np.random.default_rng(40 + n)
    G = {1: 64, 2: 32, 3: 16}[n]
    heads = extreme_heads(rng, 4, 50, n)
    got = DeepDensity(G, n, rendering="tf")(heads if n > 1 else heads[:3]).numpy().reshape(4, -1)
    cov64 = covariance(heads[2].astype(np.float64), heads[3].astype(np.float64)).numpy()
    assert_density_close(got, numpy_mixture(grid_points(G, n), heads[0], heads[1], cov64))


@needs_kernel
def test_a_component_far_outside_the_cube_adds_exactly_zero():
    # Rows whose exponents are all below -88 are skipped; they must add what exp would: 0.
    rng = np.random.default_rng(3)
    heads = extreme_heads(rng, 2, 8, 3)
    c = coefficients(heads, 3).numpy()
    far = c.copy()
    far[:, -1] = c[:, 0]
    far[:, -1, -1] = -200.0  # a ninth component, exp(q) < e^-150 everywhere
    far[:, -1, :-1] = 0.0
    both = np.concatenate([c, far[:, -1:]], axis=1)
    np.testing.assert_array_equal(kernels.render_on_grid(both, 16).numpy(), kernels.render_on_grid(c, 16).numpy())


@needs_kernel
def test_wrong_coefficient_width_is_an_error_not_a_crash():
    with pytest.raises(tf.errors.InvalidArgumentError, match="3, 6 or 10 monomials"):
        kernels.render_on_grid(np.zeros((2, 5, 7)), 16)


ISA_SCRIPT = r"""
import json, sys
import numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[2]))
from deepdensity.model import kernels, layers
from tests.model.test_layers import extreme_heads
heads = extreme_heads(np.random.default_rng(7), 6, 50, 3)
c = tf.constant(layers.quadratic_coefficients(heads[0], heads[1], layers.covariance_cholesky(heads[2], heads[3])))
up = tf.constant(np.random.default_rng(8).uniform(size=(6, 4096)).astype("f4"))
with tf.GradientTape() as tape:
    tape.watch(c)
    d = kernels.render_on_grid(c, 16)
    loss = tf.reduce_sum(d * up)
np.savez(sys.argv[1], density=d.numpy(), grad=tape.gradient(loss, c).numpy())
print(json.dumps({"isa": kernels.isa()}))
"""


@pytest.mark.slow
@needs_kernel
def test_every_instruction_set_renders_alike_and_threads_change_no_bit(tmp_path):
    # Each compiled variant this CPU runs (lowered by DEEPDENSITY_MAX_CPU_ISA), against the
    # float64 reference, against each other (same exponent in float64, exp to ~2 ulp, so
    # 1e-5 relative is generous), and at 1 and 2 threads bitwise: work is split by whole
    # samples and components, each summed by one thread in a fixed order.
    heads = extreme_heads(np.random.default_rng(7), 6, 50, 3)
    cov64 = covariance(heads[2].astype(np.float64), heads[3].astype(np.float64)).numpy()
    want = numpy_mixture(grid_points(16, 3), heads[0], heads[1], cov64)
    results = {}
    for limit in ("", "AVX2", "SSE41"):
        for threads in (1, 2):
            out = tmp_path / f"{limit or 'host'}-{threads}.npz"
            proc = subprocess.run(
                [sys.executable, "-c", ISA_SCRIPT, str(out), str(threads)],
                cwd=ROOT,
                env={**os.environ, "DEEPDENSITY_MAX_CPU_ISA": limit, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
            isa = json.loads(proc.stdout.strip().splitlines()[-1])["isa"]
            results[(isa, threads)] = np.load(out)
    isas = {isa for isa, _ in results}
    assert "x86-64 baseline" in isas
    for isa in isas:
        one, two = results[(isa, 1)], results[(isa, 2)]
        np.testing.assert_array_equal(one["density"], two["density"])
        np.testing.assert_array_equal(one["grad"], two["grad"])
        assert_density_close(one["density"], want)
    base = results[("x86-64 baseline", 1)]
    for isa in isas:
        np.testing.assert_allclose(
            results[(isa, 1)]["density"], base["density"], rtol=1e-5, atol=1e-6 * base["density"].max()
        )
        assert np.linalg.norm(results[(isa, 1)]["grad"] - base["grad"]) <= 1e-5 * np.linalg.norm(base["grad"])


SCAN_THEN_RENDER = """
import importlib, json, pkgutil, sys
import numpy as np
import deepdensity
# what a documentation builder or a coverage tool does: import every module it is shown
names = [m.name for m in pkgutil.walk_packages(deepdensity.__path__, "deepdensity.")
         if not m.name.endswith("__main__")]          # running the CLI is no import
failed = []
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as e:                          # a scanner notes it and goes on
        failed.append(f"{name}: {e}")
from deepdensity.model import kernels
from tests.model.test_kernels import coefficients
from tests.model.test_layers import random_heads
from deepdensity.model import layers
c = coefficients(random_heads(np.random.default_rng(0), 2, 50, 3), 3)
got = kernels.render_on_grid(c, 16).numpy()
want = layers.render_on_grid(layers.grid_monomials(16, 3), c).numpy()
print(json.dumps({"modules": names, "failed": failed,
                  "error": float(np.abs(got - want).max() / np.abs(want).max())}))
"""


@needs_kernel
def test_importing_every_module_leaves_the_kernel_loadable():
    """The compiled kernel lives out of the module path (kernels/lib/, no __init__.py), so a tool
    that imports every module the package lists does not dlopen it as a Python extension, which
    left a later tf.load_op_library unable to register the op. In a fresh process: the scan
    first, then a render with the kernel, against the TensorFlow-ops rendering."""
    proc = subprocess.run(
        [sys.executable, "-c", SCAN_THEN_RENDER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "deepdensity.training.trainer" in got["modules"] and "deepdensity.model.kernels" in got["modules"]
    assert not [
        m
        for m in got["modules"]
        if m.startswith("deepdensity.model.kernels.") and m != "deepdensity.model.kernels.build"
    ], "the library is listed as a module"
    assert got["failed"] == []
    # the same sum in float32 in two orders, with the kernel's own exp (~2 ulp): 1e-5 of the peak
    # is the bound the gradient test above uses, with the same margin
    assert got["error"] < 1e-5
