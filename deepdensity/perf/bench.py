"""`make bench`: where a training step of the paper's model goes on this machine, against the roof.

    python -m deepdensity.bench [--config configs/paper.yaml] [--repeats 20] [--quick]

Prints, and writes to runs/bench.json (--out; `make bench OUT=reports/bench.json` refreshes
the committed figures):
  - the CPU, the instruction set oneDNN and the rendering kernel use, and which rendering
    the `rendering` setting picks here;
  - the roof measured here: a large float32 matmul, the model's first Conv3D, exponentials
    per second (the kernel's, XLA's, TensorFlow's) and memory bandwidth;
  - at per-worker batches 1..32 and the global batches emulation uses (256, 1024; cut into
    slices of `max_pass_batch`): the step, the step with a trivial rendering (TrivialDensity)
    for the rendering's share, the rendering alone (as configured and with TensorFlow ops)
    against its roof, and the former direct rendering's step (DirectDeepDensity), all taking
    turns in one run, so that shares and speed-ups are ratios on one machine at one moment;
  - the model's FLOPs per sample, counted from its layers, and the achieved GFLOP/s;
  - the step at batch 32 under each `xla` setting (off, coefficients, whole step);
  - samples/s of `horovodrun -np 2` against one process on the same cores; its step split
    into compute and allreduce, and the allreduce split by Horovod's timeline and by the
    ranks' own clocks (the wait for the last rank, then the allreduce once all have called,
    rank_waits.py); the Gloo allreduce of the model's gradients alone at N = 2 and 4, and at
    N = 2 under shorter Horovod cycles;
  - peak resident memory of weak N = 32 emulation (global batch 1024) at K = 50.
Figures only: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional


import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from deepdensity.training import dist  # noqa: E402
from deepdensity.config import XLA_CHOICES, load  # noqa: E402
from deepdensity.model import kernels  # noqa: E402
from deepdensity.model.layers import (DeepDensity, covariance_cholesky, direct_log_mixture_density,  # noqa: E402
                                      grid_points, uses_kernel)
from deepdensity.model.autoencoder import build_model, for_training, make_adam  # noqa: E402
from deepdensity.perf import horovod_timeline, rank_waits  # noqa: E402
from deepdensity.perf.profile import (GROUPS, busy_length, fit_loop, kernel_seconds, on_batch, op_group,  # noqa: E402
                                     op_intervals, print_profiles, profiled, random_cubes, step_gaps, step_spans)
from deepdensity.scaling.rules import grad_slices  # noqa: E402
from deepdensity.training.horovodrun import horovodrun_path  # noqa: E402
from deepdensity.utils.args import parser  # noqa: E402
from deepdensity.utils.errors import command  # noqa: E402
from deepdensity.utils.files import write_atomic  # noqa: E402
from deepdensity.utils.machine import cpu_model, onednn_isa  # noqa: E402

# the folder that holds the deepdensity package (a checkout or site-packages), for child processes
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
STEP_BATCHES = (1, 2, 4, 8, 16, 32, 256, 1024)
DIRECT_BATCHES = (1, 2, 4, 8, 16, 32)   # the direct form at 256 needs a 0.6 GB tensor per op
SHORT_CYCLES_MS = (0.2, 1.0)            # Horovod cycles for the allreduce alone, beside the run's own


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
        return per_sample[:, None] * tf.ones([1, self.grid_size ** self.ndim])


def trainable(cfg, batch: int, layer=DeepDensity, backend=None):
    """The trainer's model at this batch: its train_step (slices included), its `xla`; with a
    `backend` (dist.Horovod), its optimizer averages the gradients across ranks as in training."""
    model = for_training(build_model(cfg, 16, 3, density_layer=layer), grad_slices(batch, cfg.max_pass_batch))
    optimizer = make_adam(cfg, cfg.base_lr)
    if backend is not None:
        optimizer = backend.wrap_optimizer(optimizer, cfg.allreduce_groups)
    model.compile(optimizer=optimizer, loss=tf.keras.losses.MeanSquaredLogarithmicError(),
                  jit_compile=cfg.xla == "step")
    return model


def training_step(model, batch: int, seed: int = 0, cubes: Optional[np.ndarray] = None):
    """A callable running one training step (forward, backward, Adam) of `model` at this batch
    as model.fit runs it: Keras' train_function on an iterator of a tf.data pipeline. Not
    train_on_batch, which builds a data adapter on every call: 5-6 ms a step on a 2-core AMD
    EPYC that fit pays once per epoch (docs/performance.md, "Where a step's time goes"). The
    loss is read back, so the time covers the step's end on a device that runs asynchronously.
    On `cubes` (a data set's training cubes, (n, 16, 16, 16, 1)) each step takes the next
    `batch` of them, from the `seed`-th batch on; else one batch of random cubes, again and
    again. A step costs more on the study's cubes than on random ones (about 3 ms of 25 at
    batch 16 on two ranks of a 2-core AMD EPYC), so the clock probes on the data it prices."""
    batches = iter(probe_batches(batch, seed, cubes))
    train_function = model.make_train_function()
    return lambda: float(train_function(batches)["loss"])


def probe_batches(batch: int, seed: int = 0, cubes: Optional[np.ndarray] = None) -> tf.data.Dataset:
    """(input, target) batches for a probe's steps, without end: from `cubes`, batch after batch
    from the `seed`-th on, round the end of the data and then from that batch again (cubes
    left over that make no whole batch are skipped; fewer cubes than a batch are taken again
    to fill one), else one batch of random cubes over and over."""
    if cubes is None:
        x = random_cubes(batch, seed)
        return tf.data.Dataset.from_tensors((x, x)).repeat()
    order = np.roll(np.arange(len(cubes)), -seed * batch)
    order = np.resize(order, max(len(order), batch))     # fewer cubes than a batch: taken again
    return (tf.data.Dataset.from_tensor_slices(cubes[order]).batch(batch, drop_remainder=True)
            .map(lambda x: (x, x)).repeat())


def rendering(cfg, batch: int, layer=DeepDensity):
    """A callable rendering the mixture of `batch` random heads and differentiating it (the
    layer alone, as in a training step)."""
    rng = np.random.default_rng(0)
    K = cfg.n_components
    heads = [tf.Variable(v.astype("f4")) for v in (
        rng.dirichlet(np.ones(K), batch), rng.uniform(-1, 1, (batch, K, 3)),
        rng.uniform(size=(batch, K, 3)), rng.uniform(size=(batch, K, 3)))]
    render = layer(16, 3, cfg.sigma_min, cfg.corr_max, jit_coefficients=cfg.xla == "coefficients",
                   rendering=cfg.rendering)

    @tf.function
    def run():
        with tf.GradientTape() as tape:
            out = tf.reduce_sum(tf.math.log1p(render(heads)))
        return tape.gradient(out, heads)

    return lambda: [g.numpy() for g in run()]


def paired_samples(fns: dict, repeats: int) -> dict:
    """Seconds of each call of each callable, the callables taking turns so that a noisy
    machine slows them alike: the i-th samples of A and B are one round. Every other round
    runs in reverse (A B, B A, A B, ...), so that no callable always runs right after the same
    one (each leaves the caches to the next in its own state)."""
    for fn in fns.values():  # trace and warm up
        fn()
        fn()
    samples = {name: [] for name in fns}
    names = list(fns)
    for i in range(repeats):
        for name in (names if i % 2 == 0 else names[::-1]):
            t = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - t)
    return samples


def paired_seconds(fns: dict, repeats: int) -> dict:
    """Median seconds of each callable, taking turns (paired_samples)."""
    return {name: float(np.median(v)) for name, v in paired_samples(fns, repeats).items()}


def share_quartiles(step: list, trivial: list) -> tuple:
    """The rendering's share of a step, (step - trivial) / step, round by round: its median
    and quartiles. One round's two calls ran moments apart, so a slow spell of the machine
    cancels within the round instead of moving the share."""
    shares = [(s - t) / s for s, t in zip(step, trivial)]
    q1, median, q3 = np.percentile(shares, [25, 50, 75])
    return float(median), float(q1), float(q3)


def median_seconds(fn, repeats: int) -> float:
    """Median seconds of one call of `fn` (after two warm-up calls)."""
    return paired_seconds({"fn": fn}, repeats)["fn"]


def step_seconds(cfg, batch: int, repeats: int, layer=DeepDensity) -> float:
    """Median seconds of one training step of the trainer's model at this batch."""
    return paired_seconds({"model": training_step(trainable(cfg, batch, layer), batch)}, repeats)["model"]


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
            flops[layer.name] = 2 * int(np.prod(out)) * layer.filters * int(np.prod(layer.kernel_size)) \
                * int(layer.input_shape[-1])
        elif isinstance(layer, tf.keras.layers.Dense):
            flops[layer.name] = 2 * int(layer.input_shape[-1]) * layer.units
        elif isinstance(layer, DeepDensity):
            m = (layer.ndim + 1) * (layer.ndim + 2) // 2
            K = layer.input_shape[0][-1]
            flops[layer.name] = 2 * 2 * layer.grid_size ** layer.ndim * m * K
    return flops


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
    conv_flops = 32 * 2 * 8 ** 3 * 32 * 7 ** 3 * 1
    return {"matmul_2048": 2 * n ** 3 / t_mm / 1e9, "conv3d_7x7x7_stride2_b32": conv_flops / t_conv / 1e9}


def exp_rates(repeats: int) -> dict:
    """Exponentials per second here: the rendering kernel's own (all threads, on 64 K floats
    that stay in cache), XLA's (compiled for this host) and TensorFlow's element-wise kernel."""
    x = tf.constant(np.random.default_rng(0).uniform(-20, 5, 1 << 16).astype("f4"))
    rates = {}
    if kernels.available():
        reps = 200
        rates["kernel"] = reps * x.shape[0] / median_seconds(lambda: kernels.exp_sum(x, reps).numpy(), repeats)
    big = tf.constant(np.tile(x.numpy(), 64))                    # 4 M floats: one call is long enough to time
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


def _run(args, env=None, timeout=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(PACKAGE_PARENT), **(env or {})}
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def printed_value(proc: subprocess.CompletedProcess, key: str):
    """The number after `key` on the first stdout line holding it, or None."""
    values = [float(line.split()[-1]) for line in proc.stdout.splitlines() if key in line]
    return values[0] if values else None


def _dist_probe(n: int, args: list, env: dict, key: str) -> float:
    """`horovodrun -np n python -m deepdensity.dist ARGS` with `env` added: the value rank 0
    prints after `key`; RuntimeError with its stderr if the run fails."""
    proc = _run([horovodrun_path(), "-np", str(n), sys.executable, "-m", "deepdensity.training.dist", *map(str, args)],
                env, timeout=600)
    value = printed_value(proc, key)
    if proc.returncode or value is None:
        raise RuntimeError(f"python -m deepdensity.dist {' '.join(map(str, args))} on {n} processes failed:\n"
                           f"{proc.stderr[-2000:]}")
    return value


def allreduce_seconds(n: int, n_weights: int, cycle_ms: float = 0.0) -> float:
    """Median seconds of a Gloo allreduce of `n_weights` floats on n local processes with
    Horovod's cycle at `cycle_ms` as in training (an allreduce waits for the next cycle)."""
    return _dist_probe(n, [n_weights], dist.cycle_time_env(cycle_ms), "ALLREDUCE_SECONDS")


def idle_cpu_share(n: int, cycle_ms: float, seconds: float = 10.0) -> float:
    """Share of a core an idle rank of `horovodrun -np n` uses with Horovod's cycle at
    `cycle_ms` (its background thread syncs with the other ranks every cycle)."""
    return _dist_probe(n, ["--idle", seconds], {"HOROVOD_CYCLE_TIME": f"{cycle_ms:g}"}, "IDLE_CPU_SHARE")


def throughput(cfg_path: str, per_process_batch: int, steps: int) -> float:
    """Samples/s of the whole world training with Horovod's DistributedOptimizer
    (rank 0 prints it); run under horovodrun or as one process."""
    cfg = load(cfg_path, [])
    backend, _ = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    seconds = rank_step_seconds(cfg, backend, [per_process_batch], steps, allreduce=True)[per_process_batch]
    return per_process_batch * backend.size() / seconds


def horovod_figures(cfg_path: str, n_weights: int, cycle_ms: float, batch: int = 32, steps: int = 100,
                    pairs: int = 5) -> dict:
    """horovodrun -np 2 (per-worker batch `batch`, one core each) against one process on both
    cores at the same global batch, run in turn `pairs` times (A B A B ...) so that the ratio
    is taken pair by pair and survives a machine whose speed drifts; and the Gloo allreduce
    of the gradients at N = 2, 4. All of them with Horovod's cycle at `cycle_ms`."""
    cmd = [sys.executable, "-m", "deepdensity.perf.bench", "--throughput", "--config", cfg_path, "--steps", str(steps)]
    one_rates, two_rates = [], []
    for _ in range(pairs):
        one = _run(cmd + ["--batch", str(2 * batch)])
        two = _run([horovodrun_path(), "-np", "2"] + cmd + ["--batch", str(batch)])
        a, b = printed_value(one, "SAMPLES_PER_S"), printed_value(two, "SAMPLES_PER_S")
        if a is None or b is None:
            failed = one if a is None else two
            print(f"  (throughput run failed: {failed.stderr.strip().splitlines()[-1:] or failed.returncode})")
            continue
        one_rates.append(a)
        two_rates.append(b)
    ratios = [b / a for a, b in zip(one_rates, two_rates)]
    parts = np2_step_parts(cfg_path, batch)
    out = {"steps": steps, "pairs": len(ratios), "horovod_cycle_ms": dist.cycle_ms_in_effect(cycle_ms),
           "one_process_samples_s": statistics.median(one_rates) if one_rates else None,
           "horovodrun_np2_samples_s": statistics.median(two_rates) if two_rates else None,
           "ratio_median": statistics.median(ratios) if ratios else None,
           "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None), "step_parts": parts}
    for n in (2, 4):
        try:
            out[f"allreduce_np{n}_ms"] = allreduce_seconds(n, n_weights, cycle_ms) * 1e3
        except RuntimeError:
            out[f"allreduce_np{n}_ms"] = None
    # the same allreduce under shorter cycles: what is left of it when the cycle is no wait
    by_cycle = {f"{out['horovod_cycle_ms']:g}": out["allreduce_np2_ms"]}
    for cycle in SHORT_CYCLES_MS:
        key = f"{dist.cycle_ms_in_effect(cycle):g}"    # a user's HOROVOD_CYCLE_TIME wins over every one
        if key not in by_cycle:
            try:
                by_cycle[key] = allreduce_seconds(2, n_weights, cycle) * 1e3
            except RuntimeError:
                by_cycle[key] = None
    out["allreduce_np2_ms_by_cycle"] = dict(sorted(by_cycle.items(), key=lambda item: float(item[0])))
    out["idle_core_share_np2"] = {}
    for cycle in sorted({dist.HOROVOD_DEFAULT_CYCLE_MS, out["horovod_cycle_ms"]}):  # Horovod's and ours
        try:
            out["idle_core_share_np2"][f"{cycle:g}"] = idle_cpu_share(2, cycle)
        except RuntimeError:
            out["idle_core_share_np2"][f"{cycle:g}"] = None
    return out


def np2_step_parts(cfg_path: str, batch: int, steps: int = 60) -> dict:
    """What bounds horovodrun -np 2 against one process, step by step (ms): one process's step
    at 2 x batch; two ranks stepping at `batch` at once without allreduce (the compute on
    shared cores), and with Horovod's allreduce in the step. Their ratios are the throughput
    ratio the compute alone allows, and the one compute and allreduce allow."""
    try:
        one = probe_step_seconds(cfg_path, 1, [2 * batch], steps)[0][2 * batch]
        compute = probe_step_seconds(cfg_path, 2, [batch], steps)[0][batch]
        stepped = probe_step_seconds(cfg_path, 2, [batch], steps, allreduce=True)[0][batch]
        phases = allreduce_phases(cfg_path, batch, steps)
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0]}
    return {"one_process_ms": one * 1e3, "np2_compute_ms": compute * 1e3, "np2_step_ms": stepped * 1e3,
            "allreduce_in_step_ms": (stepped - compute) * 1e3, "ratio_compute_allows": one / compute,
            "ratio_compute_and_allreduce_allow": one / stepped, "allreduce_phases": phases,
            "rank_waits": rank_waits_probe(cfg_path, batch, steps)}


def rank_waits_probe(cfg_path: str, batch: int, steps: int = 60) -> dict:
    """The allreduce of a `horovodrun -np 2` step split by the ranks' own clocks (ms, medians
    and means over `steps` steps): the wait for the last rank to call it, and the allreduce
    once every rank has (rank_waits.py); {"error": ...} if the run fails."""
    proc = _run([horovodrun_path(), "-np", "2", sys.executable, "-m", "deepdensity.perf.bench", "--rank-waits",
                 "--config", cfg_path, "--batch", str(batch), "--steps", str(steps)], timeout=900)
    found = [line[line.index("RANK_WAITS") + len("RANK_WAITS"):] for line in proc.stdout.splitlines()
             if "RANK_WAITS" in line]
    if proc.returncode or not found:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return rank_waits.summary_ms(json.loads(found[0]))


def rank_allreduce_calls(cfg, backend, batch: int, steps: int) -> list:
    """Each rank's steps at `batch`, every step in three compiled parts: the model's gradients,
    their average over the ranks by Horovod's fused allreduce (backend.average: the one
    allreduce DistributedOptimizer sends at allreduce_groups 1), Adam's update; the
    (called, returned) times of the allreduce on the host's monotonic clock, which every
    process of one host reads alike. Every rank's list, in rank order, on rank 0."""
    model = build_model(cfg, 16, 3)
    optimizer = make_adam(cfg, cfg.base_lr)
    msle = tf.keras.losses.MeanSquaredLogarithmicError()
    x = tf.constant(random_cubes(batch, backend.rank()))

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            loss = msle(x, model(x, training=True))
        return tape.gradient(loss, model.trainable_variables)

    average = tf.function(backend.average)

    @tf.function
    def update(grads):
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def step() -> tuple:
        grads = gradients()
        grads[-1].numpy()               # the backward pass done before the call is timed
        called = time.perf_counter()
        grads = average(grads)
        grads[-1].numpy()
        returned = time.perf_counter()
        update(grads)
        return called, returned

    for _ in range(3):
        step()
    backend.allreduce_max(0.0)          # every rank starts together
    return backend.gather([step() for _ in range(steps)])


def allreduce_phases(cfg_path: str, batch: int, steps: int) -> dict:
    """The allreduce in a `horovodrun -np 2` step split by Horovod's timeline (median ms per
    allreduce: the negotiation, from rank 0 asking until every rank has, Horovod's cycle
    included; the fusion buffer's copies; the transfer), {} when no timeline was written. A run
    of its own: the timeline's writer is not in the timed steps."""
    with tempfile.TemporaryDirectory() as tmp:
        timeline = Path(tmp) / "timeline.json"
        probe_step_seconds(cfg_path, 2, [batch], steps, allreduce=True, timeline=timeline)
        if not timeline.is_file():
            return {}
        return horovod_timeline.allreduce_phases_ms(horovod_timeline.read_timeline(timeline))


def step_probe(cfg_path: str, batches, steps: int, allreduce: bool = False, on_data: bool = False) -> dict:
    """What the study's clock needs of one launch (one process, or `horovodrun -np N` ranks
    sharing the host), each rank with the thread share and Horovod background thread a real
    run gives it: {"steps": rank_step_seconds, "eval": seconds per cube (one process only)}
    on rank 0, {} on the others. `on_data`: on the settings' own data (`data_path`), as the
    runs it prices see it, rather than random cubes."""
    cfg = load(cfg_path, ["intra_op_threads=0"])    # the automatic share, as the real timing runs
    backend, _ = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    train_x = val_x = None
    if on_data:
        from deepdensity.training.trainer import training_data
        _, train_x, val_x = training_data(cfg, say=lambda line: None)
        train_x, val_x = train_x[..., None], val_x[..., None]     # the channel axis the model takes
    found = {"steps": rank_step_seconds(cfg, backend, batches, steps, allreduce, cubes=train_x)}
    if backend.size() == 1:
        found["eval"] = eval_seconds_per_sample(cfg, cubes=val_x)
    return found if backend.rank() == 0 else {}


def rank_step_seconds(cfg, backend, batches, steps: int, allreduce: bool = False,
                      cubes: Optional[np.ndarray] = None) -> dict:
    """{per-process batch: seconds of one training step of the trainer's model} with every
    rank stepping at once: without allreduce, the compute of ranks sharing a host; with it
    (`allreduce`), the training step as it runs, gradients averaged by Horovod inside the step,
    each step waiting for the slowest rank. The slowest rank's mean over `steps` steps."""
    seconds = {}
    for b in batches:
        step = training_step(trainable(cfg, b, backend=backend if allreduce else None), b, seed=backend.rank(),
                             cubes=cubes)
        for _ in range(3):
            step()
        backend.allreduce_max(0.0)  # every rank starts the clock together
        t = time.perf_counter()
        for _ in range(steps):
            step()
        seconds[b] = backend.allreduce_max((time.perf_counter() - t) / steps)
    return seconds


def eval_seconds_per_sample(cfg, repeats: int = 7, cubes: Optional[np.ndarray] = None) -> float:
    """Seconds of the model's forward pass per cube, at a batch of 64 (the first 64 of
    `cubes`, else random ones)."""
    model = build_model(cfg, 16, 3)
    x = random_cubes(64) if cubes is None else cubes[:64]
    return median_seconds(lambda: model(x, training=False).numpy(), repeats) / 64


def probe_step_seconds(cfg_path: str, n: int, batches, steps: int = 40, allreduce: bool = False,
                       timeline: Optional[Path] = None, on_data: bool = False) -> tuple:
    """({batch: rank_step_seconds}, evaluation seconds per cube or None) measured on n
    processes of this host (`horovodrun -np n`, or one process, which also times evaluation);
    with `timeline` (n > 1), Horovod's timeline written there."""
    cmd = [sys.executable, "-m", "deepdensity.perf.bench", "--step-probe", "--config", cfg_path,
           "--batches", ",".join(map(str, batches)), "--steps", str(steps)] + (["--allreduce"] if allreduce else []) \
        + (["--on-data"] if on_data else [])
    launcher = ([horovodrun_path(), "-np", str(n)] + (["--timeline-filename", str(timeline)] if timeline else [])
                if n > 1 else [])
    proc = _run(launcher + cmd, timeout=900)
    # under horovodrun rank 0's lines come as "[0]<stdout>:KEY ..."
    found = [line[line.index(key):].split() for line in proc.stdout.splitlines()
             for key in ("STEP_SECONDS", "EVAL_SECONDS_PER_SAMPLE") if key in line]
    seconds = {int(w[1]): float(w[2]) for w in found if w[0] == "STEP_SECONDS"}
    evaluation = next((float(w[1]) for w in found if w[0] == "EVAL_SECONDS_PER_SAMPLE"), None)
    if proc.returncode or set(seconds) != set(batches):
        raise RuntimeError(f"the step probe on {n} process(es) failed:\n{proc.stderr[-2000:]}")
    return seconds, evaluation


def _print_horovod(hv: dict) -> None:
    one, two = hv.get("one_process_samples_s"), hv.get("horovodrun_np2_samples_s")
    print(f"\nsamples/s, global batch 64, median of {hv['pairs']} pairs of {hv['steps']} steps, Horovod "
          f"cycle {hv['horovod_cycle_ms']:g} ms: one process "
          f"(2 threads) {one or float('nan'):.0f}; horovodrun -np 2 (1 thread each, 32 per worker) "
          f"{two or float('nan'):.0f}; ratio pair by pair {hv['ratio_median'] or float('nan'):.2f} "
          f"(min {hv['ratio_min'] or float('nan'):.2f}, max {hv['ratio_max'] or float('nan'):.2f})")
    parts = hv.get("step_parts", {})
    if "np2_step_ms" in parts:
        print(f"a step (ms): one process at batch 64 {parts['one_process_ms']:.1f}; two ranks at 32 stepping at once "
              f"{parts['np2_compute_ms']:.1f} without allreduce, {parts['np2_step_ms']:.1f} with it "
              f"({parts['allreduce_in_step_ms']:.1f} ms of allreduce in the step): the ratio the compute allows "
              f"{parts['ratio_compute_allows']:.2f}, compute and allreduce {parts['ratio_compute_and_allreduce_allow']:.2f}")
    phases = parts.get("allreduce_phases") or {}
    if phases:
        print(f"an allreduce in that step, Horovod's timeline (median ms): negotiation (until both ranks asked) "
              f"{phases['negotiation_ms']:.2f}, fusion buffer copies {phases['fusion_copies_ms']:.2f}, "
              f"transfer ({phases['transfer_activity']}) {phases['transfer_ms']:.2f}")
    waits = parts.get("rank_waits") or {}
    if "steps" in waits:
        print(f"that allreduce by the ranks' own clocks, {waits['steps']} steps (median, mean ms): the wait for the "
              f"last rank to call it {waits['wait_for_last_rank_ms_median']:.2f}, "
              f"{waits['wait_for_last_rank_ms_mean']:.2f}; the allreduce once both have "
              f"{waits['after_all_called_ms_median']:.2f}, {waits['after_all_called_ms_mean']:.2f}")
    by_cycle = hv.get("allreduce_np2_ms_by_cycle") or {}
    if by_cycle:
        print("the allreduce alone on 2 processes by Horovod's cycle: " + ", ".join(
            f"{c} ms cycle {v if v is not None else float('nan'):.2f} ms" for c, v in by_cycle.items()))
    idle = hv.get("idle_core_share_np2", {})
    print("idle ranks of horovodrun -np 2, share of a core each (the slower rank): " + ", ".join(
        f"cycle {c} ms {100 * (v if v is not None else float('nan')):.1f} %" for c, v in idle.items()))


def peak_memory_weak32(cfg_path: str, max_pass_batch: int) -> dict:
    """Peak resident memory of one epoch of `--mode weak --emulate-workers 32` (a global
    batch of 1024) on 1280 synthetic cubes: the child's ru_maxrss."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "bench.h5"
        _run([sys.executable, "-m", "deepdensity.data", "synth", "--out", str(data), "--n", "1280",
              "--val", "256", "--seed", "0"])
        code = ("import resource, sys, train; rc = train.main(sys.argv[1:]); "
                "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)")
        t = time.perf_counter()
        proc = _run([sys.executable, "-c", code, "--mode", "weak", "--emulate-workers", "32",
                     "--config", cfg_path, "--quiet", "--set", f"data_path={data}", "--set", "max_epochs=1",
                     "--set", f"max_pass_batch={max_pass_batch}"])
        seconds = time.perf_counter() - t
    kb = printed_value(proc, "MAXRSS_KB")
    if proc.returncode or kb is None:
        return {"max_pass_batch": max_pass_batch, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return {"max_pass_batch": max_pass_batch, "peak_rss_gb": kb / 2 ** 20, "seconds": seconds}


def _parser() -> argparse.ArgumentParser:
    ap = parser(__doc__, "python -m deepdensity.bench")
    ap.add_argument("--config", default="configs/paper.yaml",
                    help="the model's settings (the paper's)")
    ap.add_argument("--repeats", type=int, default=20,
                    help="timed repeats per figure, a quarter above batch 32")
    ap.add_argument("--quick", action="store_true", help="step times only (no Horovod, no memory runs)")
    ap.add_argument("--out", default="runs/bench.json",
                    help="the figures as JSON (default runs/bench.json; the committed ones are reports/bench.json)")
    ap.add_argument("--throughput", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--step-probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank-waits", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--batches", default="32", help=argparse.SUPPRESS)
    ap.add_argument("--allreduce", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--on-data", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=20, help=argparse.SUPPRESS)
    ap.add_argument("--horovod", action="store_true",
                    help="only horovodrun -np 2 against one process (paired runs); written into --out's "
                         "'horovod' entry, the rest of that file kept")
    ap.add_argument("--profile", action="store_true",
                    help="only where a step's time goes, at batch 1 and 32 (traces beside --out); written "
                         "into --out's 'profiles' entry, the rest of that file kept")
    ap.add_argument("--pairs", type=int, default=5,
                    help="with --horovod: paired runs A B A B ...")
    return ap


@command
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.horovod:
        cfg = load(args.config, [])
        figures = horovod_figures(args.config, build_model(cfg, 16, 3).count_params(), cfg.horovod_cycle_ms,
                                  pairs=args.pairs)
        _print_horovod(figures)
        _write_entry(Path(args.out), "horovod", figures)
        return 0
    if args.profile:
        cfg, out = load(args.config, []), Path(args.out)
        threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
        profiles = [step_profile(cfg, b, threads, out.parent / f"{out.stem}-profile", args.repeats) for b in (1, 32)]
        print_profiles(profiles)
        _write_entry(out, "profiles", profiles)
        return 0
    if args.throughput:
        rate = throughput(args.config, args.batch, args.steps)
        if dist.hvd is None or dist.hvd.rank() == 0:
            print(f"SAMPLES_PER_S {rate:.3f}")
        return 0
    if args.rank_waits:
        cfg = load(args.config, ["intra_op_threads=0"])   # each rank's share of the cores, as in training
        backend, _ = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
        calls = rank_allreduce_calls(cfg, backend, args.batch, args.steps)
        if backend.rank() == 0:
            print("RANK_WAITS " + json.dumps(calls))
        return 0
    if args.step_probe:
        found = step_probe(args.config, [int(b) for b in args.batches.split(",")], args.steps, args.allreduce,
                           args.on_data)
        for b, seconds in found.get("steps", {}).items():
            print(f"STEP_SECONDS {b} {seconds:.6f}")
        if "eval" in found:
            print(f"EVAL_SECONDS_PER_SAMPLE {found['eval']:.8f}")
        return 0
    out = Path(args.out)
    report = step_report(args.config, args.repeats, out.parent / f"{out.stem}-profile")
    if not args.quick:
        report.update(distributed_report(args.config, report["weights"]))
    write_atomic(out, json.dumps(report, indent=2))
    print(f"\nwritten: {out}")
    return 0


def _write_entry(out: Path, key: str, figures: dict) -> None:
    """Set one entry of a bench file, keeping the others (a full `make bench` writes them all)."""
    try:
        report = json.loads(out.read_text())
    except (OSError, ValueError):
        report = {}
    report = report if isinstance(report, dict) else {}
    write_atomic(out, json.dumps({**report, key: figures}, indent=2))
    print(f"\nwritten: {out} ({key})")


def machine_report(cfg) -> dict:
    """The CPU, the instruction sets in use and the rendering path, printed and returned."""
    machine = {"cpu": cpu_model(), "cpus": os.cpu_count(), "tensorflow": tf.__version__, "onednn_isa": onednn_isa(),
               "kernel_isa": kernels.isa(),
               "rendering": "kernel" if uses_kernel(cfg.rendering) else "tf"}
    print(f"CPU: {machine['cpu']}, {machine['cpus']} cores; oneDNN: {machine['onednn_isa']}; rendering kernel: "
          f"{machine['kernel_isa']}; XLA: the host's own (LLVM compiles for this CPU); TensorFlow's element-wise "
          f"kernels: AVX (as the 2.15 wheel is built)")
    print(f"rendering: {cfg.rendering} -> {machine['rendering']}")
    return machine


def roof_report(repeats: int) -> dict:
    """The host's roof: matmul and Conv3D GFLOP/s, exponentials per second, memory bandwidth."""
    roof = roof_gflops(repeats)
    roof["exp_per_s"] = exp_rates(repeats)
    roof["bandwidth_gb_s"] = bandwidth_gb_s(repeats)
    print(f"roof here: float32 matmul 2048^3 {roof['matmul_2048']:.0f} GFLOP/s, "
          f"Conv3D 7^3 stride 2 at batch 32 {roof['conv3d_7x7x7_stride2_b32']:.0f} GFLOP/s; exponentials "
          + ", ".join(f"{k} {v / 1e9:.2f} G/s" for k, v in roof["exp_per_s"].items())
          + f"; memory {roof['bandwidth_gb_s']:.1f} GB/s (one thread copying 256 MB)")
    return roof


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
    print(f"config {config}: K={cfg.n_components} filters={list(cfg.conv_filters)} "
          f"latent={cfg.latent_dim}; {model.count_params():,} weights; {threads} threads; "
          f"max_pass_batch {cfg.max_pass_batch}")
    print("forward FLOPs per sample: " + ", ".join(f"{k} {v / 1e6:.2f} M" for k, v in flops.items())
          + f"; total {fwd / 1e6:.1f} M (a training step ~3x)")
    roof = roof_report(repeats)
    rows = step_rows(cfg, fwd, roof, repeats)
    fixed = fixed_cost(rows, roof)
    profiles = [step_profile(cfg, b, threads, profile_folder, repeats) for b in (1, 32)]
    print_profiles(profiles)
    xla = {k: v * 1e3 for k, v in paired_seconds(
        {choice: training_step(trainable(dataclasses.replace(cfg, xla=choice), 32), 32) for choice in XLA_CHOICES},
        repeats).items()}
    print("\nstep at batch 32 by the `xla` setting: "
          + ", ".join(f"{k} {v:.1f} ms" + (" (default)" if k == cfg.xla else "") for k, v in xla.items()))
    return {"config": config, "n_components": cfg.n_components, "threads": threads,
            "weights": model.count_params(), "forward_flops_per_sample": flops, "roof": roof,
            "steps": rows, "fixed_cost": fixed, "profiles": profiles, "xla_step_ms_b32": xla, "machine": machine}


def step_profile(cfg, batch: int, threads: int, folder: Path, repeats: int, steps: int = 30) -> dict:
    """The step at `batch` three ways (ms, medians over `repeats` turns), the op kernels' time by
    group from a profile of `steps` steps (ms per step, summed over threads), the bound and the
    step over it; the trace in folder/step-bBATCH.trace.json.gz."""
    model = trainable(cfg, batch)
    # fit's own start (callbacks, data handler) is paid once a call: a call of k + 1 steps
    # less one of 1 step, round by round, is k steps of the loop (k: about 0.3 s of steps)
    k = min(100, max(10, 640 // batch))
    samples = paired_samples({"train_on_batch": on_batch(model, batch), "fit 1": fit_loop(model, batch, 1),
                              "fit k+1": fit_loop(model, batch, k + 1),
                              "train_function": training_step(model, batch)}, repeats)
    loop = [(long - short) / k for long, short in zip(samples.pop("fit k+1"), samples.pop("fit 1"))]
    ms = {name: float(np.median(v)) * 1e3 for name, v in {**samples, "fit loop": loop}.items()}
    trace = folder / f"step-b{batch}.trace.json.gz"
    space, profiled_s = profiled(training_step(model, batch), steps, trace)
    groups = dict.fromkeys(GROUPS, 0.0)
    for op_type, (seconds, _) in kernel_seconds(space).items():
        groups[op_group(op_type)] += seconds * 1e3 / steps
    intervals = op_intervals(space)
    busy = busy_length(intervals) * 1e-9 / steps
    return {"batch": batch, "threads": threads, "step_ms": ms, "profiled_step_ms": profiled_s * 1e3,
            "kernels_ms": groups, "busy_ms": busy, "profiled_over_busy": profiled_s * 1e3 / busy,
            "step_gaps_ms": {k: v * 1e3 for k, v in step_gaps(step_spans(space), intervals).items()},
            "trace": str(trace)}


def fixed_cost(rows: list, roof: dict) -> dict:
    """The step at per-worker batch 1 against the batch-32 step scaled down to one sample (what
    strong scaling at N = 32 runs against what its samples would cost in bulk), and the
    batch-32 step's GFLOP/s against the Conv3D roof measured here; printed and returned."""
    by_batch = {r["batch"]: r for r in rows}
    one, bulk = by_batch[1]["step_ms"], by_batch[32]["step_ms"] / 32
    found = {"step_b1_ms": one, "step_b32_per_sample_ms": bulk, "b1_over_b32_per_sample": one / bulk,
             "gflops_b32_over_conv_roof": by_batch[32]["gflops"] / roof["conv3d_7x7x7_stride2_b32"]}
    print(f"\nfixed cost: a step at batch 1 takes {one:.2f} ms, {found['b1_over_b32_per_sample']:.1f} x a sample's "
          f"share of the batch-32 step ({bulk:.2f} ms); batch 32 runs at "
          f"{found['gflops_b32_over_conv_roof']:.0%} of the Conv3D roof")
    return found


def step_rows(cfg, forward_flops: float, roof: dict, repeats: int) -> list:
    """At every batch of STEP_BATCHES: the step and the step with a trivial rendering, taking
    turns with each other alone (the rendering's share); then the rendering alone (as
    configured and with TensorFlow ops) and the direct form's step where it fits in memory,
    taking turns. Printed as a table."""
    print(f"\n{'batch':>6} {'step ms':>8} {'samples/s':>9} {'GFLOP/s':>8} {'trivial ms':>10} {'share (IQR)':>13}"
          f" {'render ms':>9} {'tf ops ms':>9} {'roof ms':>8} {'x roof':>7} {'direct ms':>9}")
    rows = []
    for b in STEP_BATCHES:
        slices, turns = grad_slices(b, cfg.max_pass_batch), repeats if b <= 32 else max(3, repeats // 4)
        # A step run right after a much larger one (the direct form) finds its caches evicted:
        # in one turn with it, the step read 26-33 % rendering where it reads 13-18 % alone.
        pair = paired_samples({"step": training_step(trainable(cfg, b), b),
                               "trivial": training_step(trainable(cfg, b, TrivialDensity), b)}, turns)
        parts = {"render": rendering(cfg, b // slices), "render_tf": rendering(dataclasses.replace(cfg, rendering="tf"),
                                                                               b // slices)}
        if b in DIRECT_BATCHES:
            parts["direct"] = training_step(trainable(cfg, b, DirectDeepDensity), b)
        t = {name: float(np.median(v)) for name, v in {**pair, **paired_samples(parts, turns)}.items()}
        share, share_q1, share_q3 = share_quartiles(pair["step"], pair["trivial"])
        step, render, render_tf = t["step"], t["render"] * slices, t["render_tf"] * slices
        roof_ms = rendering_roof_ms(b // slices, cfg.n_components, 16 ** 3, 10, roof) * slices
        row = {"batch": b, "slices": slices, "step_ms": step * 1e3, "samples_per_s": b / step,
               "gflops": 3 * forward_flops * b / step / 1e9, "trivial_step_ms": t["trivial"] * 1e3,
               "render_share": share, "render_share_quartiles": [share_q1, share_q3], "render_ms": render * 1e3,
               "render_tf_ms": render_tf * 1e3, "render_roof_ms": roof_ms, "render_over_roof": render * 1e3 / roof_ms,
               "direct_step_ms": t["direct"] * 1e3 if "direct" in t else None}
        rows.append(row)
        print(f"{b:>6} {step * 1e3:>8.1f} {b / step:>9.0f} {row['gflops']:>8.1f} {t['trivial'] * 1e3:>10.1f} "
              f"{share:>5.0%} ({share_q1:>3.0%}-{share_q3:>3.0%}) {render * 1e3:>9.1f} {render_tf * 1e3:>9.1f} {roof_ms:>8.2f} "
              f"{row['render_over_roof']:>7.1f} " + (f"{t['direct'] * 1e3:>9.1f}" if "direct" in t else f"{'-':>9}"))
    print("share: (step - trivial) / step in each round of their turns, median (quartiles); render: the layer's forward "
          "and backward alone; "
          "x roof: render / roof (rendering_roof_ms)")
    return rows


def distributed_report(config: str, n_weights: int) -> dict:
    """horovodrun -np 2 against one process, Gloo's allreduce, and weak N = 32's memory."""
    cfg = load(config, [])
    hv = horovod_figures(config, n_weights, cfg.horovod_cycle_ms)
    _print_horovod(hv)
    print(f"Gloo allreduce of the {n_weights:,} gradients: "
          + ", ".join(f"N={n} {hv.get(f'allreduce_np{n}_ms') or float('nan'):.2f} ms" for n in (2, 4)))
    memory = [peak_memory_weak32(config, cfg.max_pass_batch), peak_memory_weak32(config, 0)]
    for m in memory:
        what = (f"{m['peak_rss_gb']:.2f} GB peak resident ({m['seconds']:.0f} s with start-up)"
                if "peak_rss_gb" in m else f"failed: {m['error']}")
        print(f"weak N=32 emulated, one epoch, max_pass_batch {m['max_pass_batch']}: {what}")
    return {"horovod": hv, "weak32_memory": memory}


if __name__ == "__main__":
    raise SystemExit(main())
