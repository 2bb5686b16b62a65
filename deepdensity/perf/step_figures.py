"""`make bench`'s figures of one process: the step at every batch against the roof (roof.py),
with the rendering's share, the rendering alone and the former direct rendering's step; the
model's FLOPs; the fixed cost of a step; where a step's time goes (profile.py); and the step
under each `xla` setting. Every figure a median of callables taking turns (steps.py)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from deepdensity.config import XLA_CHOICES, load
from deepdensity.model.autoencoder import build_model
from deepdensity.model.layers import DeepDensity, covariance_cholesky, direct_log_mixture_density, grid_points
from deepdensity.perf.profile import (
    GROUPS,
    busy_length,
    fit_loop,
    kernel_seconds,
    on_batch,
    op_group,
    op_intervals,
    print_profiles,
    profiled,
    step_gaps,
    step_spans,
)
from deepdensity.perf.roof import machine_report, rendering_roof_ms, roof_report
from deepdensity.perf.steps import paired_samples, paired_seconds, share_quartiles, trainable, training_step
from deepdensity.scaling.rules import grad_slices

STEP_BATCHES = (1, 2, 4, 8, 16, 32, 256, 1024)
DIRECT_BATCHES = (1, 2, 4, 8, 16, 32)  # the direct form at 256 needs a 0.6 GB tensor per op


@tf.keras.utils.register_keras_serializable(package="deepdensity_bench")
class DirectDeepDensity(DeepDensity):
    """The rendering before the quadratic form: z = L^-1 (x - mu) for every point and
    component, a (B, K, V, n) tensor, then a log-sum-exp. The bench's reference only."""

    def _coefficients(self, alpha, mu, sigma, rho):
        return tf.zeros([0]), covariance_cholesky(sigma, rho, self.sigma_min, self.corr_max)

    def render(self, alpha, mu, chol, coeffs):
        cov = tf.matmul(chol, chol, transpose_b=True)
        return tf.exp(direct_log_mixture_density(grid_points(self.grid_size, self.ndim), alpha, mu, cov))


@tf.keras.utils.register_keras_serializable(package="deepdensity_bench")
class TrivialDensity(DeepDensity):
    """The layer with its rendering replaced by one cheap op that still depends on every
    coefficient (so the heads get gradients): the step without the rendering, for its share."""

    def render(self, alpha, mu, chol, coeffs):
        per_sample = tf.sigmoid(tf.cast(tf.reduce_sum(coeffs, axis=[1, 2]), tf.float32))
        return per_sample[:, None] * tf.ones([1, self.grid_size**self.ndim])


def rendering(cfg, batch: int, layer=DeepDensity):
    """A callable rendering the mixture of `batch` random heads and differentiating it (the
    layer alone, as in a training step)."""
    rng = np.random.default_rng(0)
    K = cfg.n_components
    heads = [
        tf.Variable(v.astype("f4"))
        for v in (
            rng.dirichlet(np.ones(K), batch),
            rng.uniform(-1, 1, (batch, K, 3)),
            rng.uniform(size=(batch, K, 3)),
            rng.uniform(size=(batch, K, 3)),
        )
    ]
    render = layer(
        16, 3, cfg.sigma_min, cfg.corr_max, jit_coefficients=cfg.xla == "coefficients", rendering=cfg.rendering
    )

    @tf.function
    def run():
        with tf.GradientTape() as tape:
            out = tf.reduce_sum(tf.math.log1p(render(heads)))
        return tape.gradient(out, heads)

    return lambda: [g.numpy() for g in run()]


def forward_flops_per_sample(model) -> dict:
    """Multiply-adds x 2 of every layer's forward pass for one sample, from its shapes:
    convolutions (output voxels x filters x kernel volume x input channels), dense layers
    (inputs x units) and the rendering's two matmuls (2 x V x m x K, see `render_on_grid`).
    Exponentials and elementwise work are not counted. A training step costs about 3x
    the forward pass."""
    flops = {}
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Conv3D):
            out = layer.output_shape[1:-1]
            flops[layer.name] = (
                2 * int(np.prod(out)) * layer.filters * int(np.prod(layer.kernel_size)) * int(layer.input_shape[-1])
            )
        elif isinstance(layer, tf.keras.layers.Dense):
            flops[layer.name] = 2 * int(layer.input_shape[-1]) * layer.units
        elif isinstance(layer, DeepDensity):
            m = (layer.ndim + 1) * (layer.ndim + 2) // 2
            K = layer.input_shape[0][-1]
            flops[layer.name] = 2 * 2 * layer.grid_size**layer.ndim * m * K
    return flops


def step_report(config: str, repeats: int, profile_folder: Path) -> dict:
    """The host, the model's FLOPs, the roof, the step and its rendering at every batch, the
    fixed cost of a step, where a step's time goes (traces in `profile_folder`), and the `xla`
    settings, printed and returned."""
    cfg = load(config, [])
    machine = machine_report(cfg)
    model = build_model(cfg, 16, 3)
    flops = forward_flops_per_sample(model)
    fwd = sum(flops.values())
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
    print(
        f"config {config}: K={cfg.n_components} filters={list(cfg.conv_filters)} "
        f"latent={cfg.latent_dim}; {model.count_params():,} weights; {threads} threads; "
        f"max_pass_batch {cfg.max_pass_batch}"
    )
    print(
        "forward FLOPs per sample: "
        + ", ".join(f"{k} {v / 1e6:.2f} M" for k, v in flops.items())
        + f"; total {fwd / 1e6:.1f} M (a training step ~3x)"
    )
    roof = roof_report(repeats)
    rows = step_rows(cfg, fwd, roof, repeats)
    fixed = fixed_cost(rows, roof)
    profiles = [step_profile(cfg, b, threads, profile_folder, repeats) for b in (1, 32)]
    print_profiles(profiles)
    xla = {
        k: v * 1e3
        for k, v in paired_seconds(
            {choice: training_step(trainable(dataclasses.replace(cfg, xla=choice), 32), 32) for choice in XLA_CHOICES},
            repeats,
        ).items()
    }
    print(
        "\nstep at batch 32 by the `xla` setting: "
        + ", ".join(f"{k} {v:.1f} ms" + (" (default)" if k == cfg.xla else "") for k, v in xla.items())
    )
    return {
        "config": config,
        "n_components": cfg.n_components,
        "threads": threads,
        "weights": model.count_params(),
        "forward_flops_per_sample": flops,
        "roof": roof,
        "steps": rows,
        "fixed_cost": fixed,
        "profiles": profiles,
        "xla_step_ms_b32": xla,
        "machine": machine,
    }


def step_profile(cfg, batch: int, threads: int, folder: Path, repeats: int, steps: int = 30) -> dict:
    """The step at `batch` three ways (ms, medians over `repeats` turns), the op kernels' time by
    group from a profile of `steps` steps (ms per step, summed over threads), the bound and the
    step over it; the trace in folder/step-bBATCH.trace.json.gz."""
    model = trainable(cfg, batch)
    # fit's own start (callbacks, data handler) is paid once a call: a call of k + 1 steps
    # less one of 1 step, round by round, is k steps of the loop (k: about 0.3 s of steps)
    k = min(100, max(10, 640 // batch))
    samples = paired_samples(
        {
            "train_on_batch": on_batch(model, batch),
            "fit 1": fit_loop(model, batch, 1),
            "fit k+1": fit_loop(model, batch, k + 1),
            "train_function": training_step(model, batch),
        },
        repeats,
    )
    loop = [(long - short) / k for long, short in zip(samples.pop("fit k+1"), samples.pop("fit 1"))]
    ms = {name: float(np.median(v)) * 1e3 for name, v in {**samples, "fit loop": loop}.items()}
    trace = folder / f"step-b{batch}.trace.json.gz"
    space, profiled_s = profiled(training_step(model, batch), steps, trace)
    groups = dict.fromkeys(GROUPS, 0.0)
    for op_type, (seconds, _) in kernel_seconds(space).items():
        groups[op_group(op_type)] += seconds * 1e3 / steps
    intervals = op_intervals(space)
    busy = busy_length(intervals) * 1e-9 / steps
    return {
        "batch": batch,
        "threads": threads,
        "step_ms": ms,
        "profiled_step_ms": profiled_s * 1e3,
        "kernels_ms": groups,
        "busy_ms": busy,
        "profiled_over_busy": profiled_s * 1e3 / busy,
        "step_gaps_ms": {k: v * 1e3 for k, v in step_gaps(step_spans(space), intervals).items()},
        "trace": str(trace),
    }


def fixed_cost(rows: list, roof: dict) -> dict:
    """The step at per-worker batch 1 against the batch-32 step scaled down to one sample (what
    strong scaling at N = 32 runs against what its samples would cost in bulk), and the
    batch-32 step's GFLOP/s against the Conv3D roof measured here; printed and returned."""
    by_batch = {r["batch"]: r for r in rows}
    one, bulk = by_batch[1]["step_ms"], by_batch[32]["step_ms"] / 32
    found = {
        "step_b1_ms": one,
        "step_b32_per_sample_ms": bulk,
        "b1_over_b32_per_sample": one / bulk,
        "gflops_b32_over_conv_roof": by_batch[32]["gflops"] / roof["conv3d_7x7x7_stride2_b32"],
    }
    print(
        f"\nfixed cost: a step at batch 1 takes {one:.2f} ms, {found['b1_over_b32_per_sample']:.1f} x a sample's "
        f"share of the batch-32 step ({bulk:.2f} ms); batch 32 runs at "
        f"{found['gflops_b32_over_conv_roof']:.0%} of the Conv3D roof"
    )
    return found


def step_rows(cfg, forward_flops: float, roof: dict, repeats: int) -> list:
    """At every batch of STEP_BATCHES: the step and the step with a trivial rendering, taking
    turns with each other alone (the rendering's share); then the rendering alone (as
    configured and with TensorFlow ops) and the direct form's step where it fits in memory,
    taking turns. Printed as a table."""
    print(
        f"\n{'batch':>6} {'step ms':>8} {'samples/s':>9} {'GFLOP/s':>8} {'trivial ms':>10} {'share (IQR)':>13}"
        f" {'render ms':>9} {'tf ops ms':>9} {'roof ms':>8} {'x roof':>7} {'direct ms':>9}"
    )
    rows = []
    for b in STEP_BATCHES:
        slices, turns = grad_slices(b, cfg.max_pass_batch), repeats if b <= 32 else max(3, repeats // 4)
        # A step run right after a much larger one (the direct form) finds its caches evicted:
        # in one turn with it, the step read 26-33 % rendering where it reads 13-18 % alone.
        pair = paired_samples(
            {
                "step": training_step(trainable(cfg, b), b),
                "trivial": training_step(trainable(cfg, b, TrivialDensity), b),
            },
            turns,
        )
        parts = {
            "render": rendering(cfg, b // slices),
            "render_tf": rendering(dataclasses.replace(cfg, rendering="tf"), b // slices),
        }
        if b in DIRECT_BATCHES:
            parts["direct"] = training_step(trainable(cfg, b, DirectDeepDensity), b)
        t = {name: float(np.median(v)) for name, v in {**pair, **paired_samples(parts, turns)}.items()}
        share, share_q1, share_q3 = share_quartiles(pair["step"], pair["trivial"])
        step, render, render_tf = t["step"], t["render"] * slices, t["render_tf"] * slices
        roof_ms = rendering_roof_ms(b // slices, cfg.n_components, 16**3, 10, roof) * slices
        row = {
            "batch": b,
            "slices": slices,
            "step_ms": step * 1e3,
            "samples_per_s": b / step,
            "gflops": 3 * forward_flops * b / step / 1e9,
            "trivial_step_ms": t["trivial"] * 1e3,
            "render_share": share,
            "render_share_quartiles": [share_q1, share_q3],
            "render_ms": render * 1e3,
            "render_tf_ms": render_tf * 1e3,
            "render_roof_ms": roof_ms,
            "render_over_roof": render * 1e3 / roof_ms,
            "direct_step_ms": t["direct"] * 1e3 if "direct" in t else None,
        }
        rows.append(row)
        print(
            f"{b:>6} {step * 1e3:>8.1f} {b / step:>9.0f} {row['gflops']:>8.1f} {t['trivial'] * 1e3:>10.1f} "
            f"{share:>5.0%} ({share_q1:>3.0%}-{share_q3:>3.0%}) "
            f"{render * 1e3:>9.1f} {render_tf * 1e3:>9.1f} {roof_ms:>8.2f} "
            f"{row['render_over_roof']:>7.1f} " + (f"{t['direct'] * 1e3:>9.1f}" if "direct" in t else f"{'-':>9}")
        )
    print(
        "share: (step - trivial) / step in each round of their turns, median (quartiles); render: the layer's forward "
        "and backward alone; "
        "x roof: render / roof (rendering_roof_ms)"
    )
    return rows
