"""The rendering as one CPU kernel (render.cc, built by `make install`), with its gradient.

    available()                   the kernel is built and loads into this TensorFlow
    render_on_grid(coeffs, G)     sum_k exp(monomials . coeffs_k) on the G^n grid, (B, G^n) float32
    isa()                         the instruction set the kernel runs with here
    exp_sum(x, repeats)           sum(exp(x)) with the kernel's exponential (make bench's roof)

`deepdensity.model.layers.render_on_grid` computes the same with TensorFlow ops; the layer
uses this kernel on CPUs when it is available (see `DeepDensity`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import tensorflow as tf


def library_for(tf_version: str) -> Path:
    """The kernel built against TensorFlow `tf_version`: one per TensorFlow, so that the venvs
    of two stacks in one checkout keep their own; in lib/, out of the module path (build.py)."""
    return Path(__file__).resolve().parent / "lib" / f"render-tf{tf_version}.so"


LIBRARY = library_for(tf.__version__)
_loaded = {}


def _ops():
    """The loaded op library, or None when it is not built or does not load (then once a warning)."""
    if "ops" not in _loaded:
        _loaded["ops"] = None
        if LIBRARY.exists():
            try:
                _loaded["ops"] = tf.load_op_library(str(LIBRARY))
            except (tf.errors.NotFoundError, OSError) as e:  # built for another TensorFlow
                warnings.warn(
                    f"{LIBRARY} does not load ({str(e).strip()[:200]}); rendering with TensorFlow ops. "
                    f"`python -m deepdensity.model.kernels.build` rebuilds it.",
                    stacklevel=2,
                )
    return _loaded["ops"]


def available() -> bool:
    return _ops() is not None


def isa() -> str:
    """'avx512', 'avx2' or 'x86-64 baseline': what this CPU and DEEPDENSITY_MAX_CPU_ISA or
    ONEDNN_MAX_CPU_ISA leave the kernel (read once per process); 'not built' without it."""
    if "isa" not in _loaded:
        ops = _ops()
        with tf.init_scope():  # eager even when a layer is built inside a graph
            _loaded["isa"] = ops.deep_density_render_isa().numpy().decode() if ops else "not built"
    return _loaded["isa"]


def exp_sum(x, repeats: int = 1):
    """sum(exp(x)) with the kernel's exponential, computed `repeats` times on the CPU threads
    (the sum of the last): `make bench` times it for the exponential rate of this CPU."""
    return _ops().deep_density_exp_sum(tf.convert_to_tensor(x, tf.float32), repeats=repeats)


def render_on_grid(coeffs, grid_size: int):
    """sum_k exp(monomials(x_v) . coeffs[b, k]) at the centres of the grid_size^n cells over
    [-1, 1]^n: coeffs (B, K, m) float64 from `quadratic_coefficients` -> (B, grid_size^n)
    float32. The gradient is the kernel's own backward pass (it recomputes the exponentials)."""
    ops = _ops()

    @tf.custom_gradient
    def render(c):
        def grad(upstream):
            return ops.deep_density_render_grad(c, tf.cast(upstream, tf.float32), grid_size=grid_size)

        return ops.deep_density_render(c, grid_size=grid_size), grad

    return render(tf.convert_to_tensor(coeffs, tf.float64))
