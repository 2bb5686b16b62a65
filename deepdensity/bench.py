"""`make bench`: where a training step's time goes, on this machine. Prints figures only.

    python -m deepdensity.bench [--config configs/paper.yaml] [--batches 1,8,32] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from .config import load  # noqa: E402
from .layers import covariance, grid_points, mixture_density  # noqa: E402
from .model import build_model, make_adam  # noqa: E402


def _time(fn, repeats: int) -> float:
    fn()  # trace and warm up
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return float(np.median(samples))


def step_seconds(cfg, batch: int, repeats: int = 5, grid: int = 16) -> float:
    """Median seconds of one forward + backward + Adam step at this batch size."""
    model = build_model(cfg, grid, 3)
    opt = make_adam(cfg, cfg.base_lr)
    loss_fn = tf.keras.losses.MeanSquaredLogarithmicError()
    x = tf.constant(np.random.default_rng(0).uniform(size=(batch, grid, grid, grid, 1)).astype("f4") / 64)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(x, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return _time(lambda: step().numpy(), repeats)


def render_seconds(cfg, batch: int, repeats: int = 5, grid: int = 16) -> float:
    """Median seconds to render and differentiate the mixture alone (the DeepDensity layer)."""
    rng = np.random.default_rng(0)
    K = cfg.n_components
    heads = [tf.Variable(v.astype("f4")) for v in (
        rng.dirichlet(np.ones(K), batch), rng.uniform(-1, 1, (batch, K, 3)),
        rng.uniform(size=(batch, K, 3)), rng.uniform(size=(batch, K, 3)))]
    points = tf.constant(grid_points(grid, 3))

    @tf.function
    def render():
        with tf.GradientTape() as tape:
            a, m, s, r = heads
            out = tf.reduce_sum(mixture_density(points, a, m, covariance(s, r, cfg.sigma_min, cfg.corr_max)))
        return tape.gradient(out, heads)

    return _time(lambda: [g.numpy() for g in render()], repeats)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m deepdensity.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/paper.yaml")
    ap.add_argument("--batches", default="1,4,16,32")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    cfg = load(args.config, [])
    model = build_model(cfg, 16, 3)
    print(f"config {args.config}: K={cfg.n_components} filters={list(cfg.conv_filters)} "
          f"latent={cfg.latent_dim}; {model.count_params():,} weights; "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()} threads")
    print(f"{'batch':>6} {'step ms':>9} {'ms/sample':>10} {'render ms':>10} {'render share':>13}")
    for b in [int(x) for x in args.batches.split(",")]:
        s = step_seconds(cfg, b, args.repeats)
        r = render_seconds(cfg, b, args.repeats)
        print(f"{b:>6} {s * 1e3:>9.1f} {s / b * 1e3:>10.2f} {r * 1e3:>10.1f} {r / s:>12.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
