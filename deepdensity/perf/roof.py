"""The roof of this host, for `make bench`: what the CPU, the instruction sets and the rendering
in use are, and the best this host does at what a step is made of (a large float32 matmul, the
model's first Conv3D, exponentials, memory bandwidth), against which the step is read."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from deepdensity.model import kernels
from deepdensity.model.layers import uses_kernel
from deepdensity.perf.steps import median_seconds
from deepdensity.utils.machine import cpu_model, onednn_isa


def machine_report(cfg) -> dict:
    """The CPU, the instruction sets in use and the rendering path, printed and returned."""
    machine = {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "tensorflow": tf.__version__,
        "onednn_isa": onednn_isa(),
        "kernel_isa": kernels.isa(),
        "rendering": "kernel" if uses_kernel(cfg.rendering) else "tf",
    }
    print(
        f"CPU: {machine['cpu']}, {machine['cpus']} cores; oneDNN: {machine['onednn_isa']}; rendering kernel: "
        f"{machine['kernel_isa']}; XLA: the host's own (LLVM compiles for this CPU); TensorFlow "
        f"{machine['tensorflow']}'s element-wise kernels: what its wheel was compiled for (AVX for 2.15's)"
    )
    print(f"rendering: {cfg.rendering} -> {machine['rendering']}")
    return machine


def roof_report(repeats: int) -> dict:
    """The host's roof: matmul and Conv3D GFLOP/s, exponentials per second, memory bandwidth."""
    roof = roof_gflops(repeats)
    roof["exp_per_s"] = exp_rates(repeats)
    roof["bandwidth_gb_s"] = bandwidth_gb_s(repeats)
    print(
        f"roof here: float32 matmul 2048^3 {roof['matmul_2048']:.0f} GFLOP/s, "
        f"Conv3D 7^3 stride 2 at batch 32 {roof['conv3d_7x7x7_stride2_b32']:.0f} GFLOP/s; exponentials "
        + ", ".join(f"{k} {v / 1e9:.2f} G/s" for k, v in roof["exp_per_s"].items())
        + f"; memory {roof['bandwidth_gb_s']:.1f} GB/s (one thread copying 256 MB)"
    )
    return roof


def roof_gflops(repeats: int) -> dict:
    """GFLOP/s of a large float32 matmul and of the model's first Conv3D (forward, batch 32)."""
    n = 2048
    a = tf.random.normal((n, n))
    mm = tf.function(lambda: tf.reduce_sum(tf.matmul(a, a)))
    t_mm = median_seconds(lambda: mm().numpy(), repeats)
    conv = tf.keras.layers.Conv3D(32, 7, strides=2, padding="same")
    x = tf.random.normal((32, 16, 16, 16, 1))
    conv(x)
    cf = tf.function(lambda: tf.reduce_sum(conv(x)))
    t_conv = median_seconds(lambda: cf().numpy(), repeats)
    conv_flops = 32 * 2 * 8**3 * 32 * 7**3 * 1
    return {"matmul_2048": 2 * n**3 / t_mm / 1e9, "conv3d_7x7x7_stride2_b32": conv_flops / t_conv / 1e9}


def exp_rates(repeats: int) -> dict:
    """Exponentials per second here: the rendering kernel's own (all threads, on 64 K floats
    that stay in cache), XLA's (compiled for this host) and TensorFlow's element-wise kernel."""
    x = tf.constant(np.random.default_rng(0).uniform(-20, 5, 1 << 16).astype("f4"))
    rates = {}
    if kernels.available():
        reps = 200
        rates["kernel"] = reps * x.shape[0] / median_seconds(lambda: kernels.exp_sum(x, reps).numpy(), repeats)
    big = tf.constant(np.tile(x.numpy(), 64))  # 4 M floats: one call is long enough to time
    for name, jit in (("xla", True), ("tensorflow", False)):
        fn = tf.function(lambda: tf.reduce_sum(tf.exp(big)), jit_compile=jit)
        rates[name] = big.shape[0] / median_seconds(lambda: fn().numpy(), repeats)
    return rates


def bandwidth_gb_s(repeats: int) -> float:
    """Memory bandwidth of one thread copying 256 MB (bytes read + written per second)."""
    src = np.ones(1 << 26, dtype=np.float32)
    dst = np.empty_like(src)
    return 2 * src.nbytes / median_seconds(lambda: np.copyto(dst, src), max(3, repeats // 4)) / 1e9


def rendering_roof_ms(batch: int, K: int, V: int, m: int, roof: dict) -> float:
    """The least time the rendering's forward and backward can take here: every exponential
    twice (the forward sums them; the backward needs them again, recomputed or stored), at the
    best exponential rate measured; the quadratic form and the backward's moments as two
    (B K, m) x (m, V) matmuls at the matmul rate (they share the vector units with the
    exponentials, so the times add); and the inputs and outputs once through memory, which
    overlaps with compute. A (B, K, V) tensor stored and read again would add 8 B K V bytes."""
    exps = 2 * batch * K * V
    flops = 2 * 2 * m * batch * K * V
    compute = exps / max(roof["exp_per_s"].values()) + flops / (roof["matmul_2048"] * 1e9)
    memory = (2 * 8 * batch * K * m + 2 * 4 * batch * V) / (roof["bandwidth_gb_s"] * 1e9)
    return 1e3 * max(compute, memory)
