"""What each process of a probe runs (probes.py launches it), one process or every rank of
`horovodrun -np N`; rank 0 prints the figure on a line of its own after its key:

    python -m deepdensity.perf.rank_probes step --config C --batches 1,2,4 --steps 40 [--allreduce] [--on-data]
        STEP_SECONDS BATCH S, one line per batch, and EVAL_SECONDS_PER_SAMPLE S on one process
    python -m deepdensity.perf.rank_probes throughput --config C --batch B --steps S    SAMPLES_PER_S
    python -m deepdensity.perf.rank_probes rank-waits --config C --batch B --steps S    RANK_WAITS [JSON]
    python -m deepdensity.perf.rank_probes paired-step --config C --batch B --steps S --pairs P
        PAIRED_STEP_SECONDS {"without": [S, ...], "with": [S, ...]}, on the settings' training cubes
    python -m deepdensity.perf.rank_probes allreduce FLOATS [--cycle-ms MS]            ALLREDUCE_SECONDS
    python -m deepdensity.perf.rank_probes idle SECONDS                                 IDLE_CPU_SHARE

Each rank has the thread share and the Horovod background thread a real run gives it
(dist.setup); every figure is the slowest rank's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from deepdensity.config import load
from deepdensity.model.autoencoder import build_model, make_adam
from deepdensity.perf.probes import REPORT_ENV
from deepdensity.perf.profile import random_cubes
from deepdensity.perf.steps import median_seconds, trainable, training_step
from deepdensity.training import dist
from deepdensity.training.run_data import training_data
from deepdensity.utils.args import HelpFormatter, parser
from deepdensity.utils.files import write_atomic


def step_probe(cfg, backend, batches, steps: int, allreduce: bool = False, on_data: bool = False) -> dict:
    """What the study's clock needs of one launch (one process, or `horovodrun -np N` ranks
    sharing the host), `backend` from dist.setup: {"steps": rank_step_seconds, "eval": seconds
    per cube (one process only)} on rank 0, {} on the others. `on_data`: on the settings' own
    data (`data_path`), as the runs it prices see it, rather than random cubes."""
    train_x = val_x = None
    if on_data:
        _, train_x, val_x = training_data(cfg, say=lambda line: None)
        train_x, val_x = train_x[..., None], val_x[..., None]  # the channel axis the model takes
    found = {"steps": rank_step_seconds(cfg, backend, batches, steps, allreduce, cubes=train_x)}
    if backend.size() == 1:
        found["eval"] = eval_seconds_per_sample(cfg, cubes=val_x)
    return found if backend.rank() == 0 else {}


def rank_step_seconds(
    cfg, backend, batches, steps: int, allreduce: bool = False, cubes: Optional[np.ndarray] = None
) -> dict:
    """{per-process batch: seconds of one training step of the trainer's model} with every
    rank stepping at once: without allreduce, the compute of ranks sharing a host; with it
    (`allreduce`), the training step as it runs, gradients averaged by Horovod inside the step,
    each step waiting for the slowest rank. The slowest rank's mean over `steps` steps."""
    seconds = {}
    for b in batches:
        step = training_step(
            trainable(cfg, b, backend=backend if allreduce else None), b, seed=backend.rank(), cubes=cubes
        )
        for _ in range(3):
            step()
        backend.allreduce_max(0.0)  # every rank starts the clock together
        t = time.perf_counter()
        for _ in range(steps):
            step()
        seconds[b] = backend.allreduce_max((time.perf_counter() - t) / steps)
    return seconds


def paired_step_seconds(cfg, backend, batch: int, steps: int, pairs: int, cubes: Optional[np.ndarray] = None) -> tuple:
    """([seconds of a step without allreduce], [with Horovod's allreduce in the step]), a
    block of `steps` steps each, `pairs` of them taken in turn (L A, A L, L A, ...: with an even
    `pairs` a steady drift of the host moves both alike), each the slowest rank's mean. Both
    steps are built in this one launch, so their difference is the allreduce's, not that of two
    launches' placements on the cores."""
    local = training_step(trainable(cfg, batch), batch, seed=backend.rank(), cubes=cubes)
    averaged = training_step(trainable(cfg, batch, backend=backend), batch, seed=backend.rank(), cubes=cubes)
    for step in (local, averaged):
        for _ in range(3):
            step()

    def block(step) -> float:
        backend.allreduce_max(0.0)  # every rank starts the clock together
        t = time.perf_counter()
        for _ in range(steps):
            step()
        return backend.allreduce_max((time.perf_counter() - t) / steps)

    without, paid = [], []
    for k in range(pairs):
        if k % 2 == 0:
            without.append(block(local))
            paid.append(block(averaged))
        else:
            paid.append(block(averaged))
            without.append(block(local))
    return without, paid


def eval_seconds_per_sample(cfg, repeats: int = 7, cubes: Optional[np.ndarray] = None) -> float:
    """Seconds of the model's forward pass per cube, at a batch of 64 (the first 64 of
    `cubes`, else random ones)."""
    model = build_model(cfg, 16, 3)
    x = random_cubes(64) if cubes is None else cubes[:64]
    return median_seconds(lambda: model(x, training=False).numpy(), repeats) / 64


def throughput(cfg, backend, per_process_batch: int, steps: int) -> float:
    """Samples/s of the whole world training with Horovod's DistributedOptimizer (one process,
    or every rank of horovodrun)."""
    seconds = rank_step_seconds(cfg, backend, [per_process_batch], steps, allreduce=True)[per_process_batch]
    return per_process_batch * backend.size() / seconds


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
        grads[-1].numpy()  # the backward pass done before the call is timed
        called = time.perf_counter()
        grads = average(grads)
        grads[-1].numpy()
        returned = time.perf_counter()
        update(grads)
        return called, returned

    for _ in range(3):
        step()
    backend.allreduce_max(0.0)  # every rank starts together
    return backend.gather([step() for _ in range(steps)])


def time_allreduce(backend, n_floats: int, repeats: int = 20) -> float:
    """Median seconds of one averaging allreduce of `n_floats` float32 values across the
    world (the gradient traffic of one step of a model with that many weights), the slowest
    rank's; 0 in a world of one."""
    if not backend.available or backend.size() == 1:
        return 0.0
    grad = tf.constant(np.ones(n_floats, np.float32))
    # One name for every call, as a step's gradients have: after the first, Horovod answers
    # it from its response cache, with a lighter agreement between the ranks than a new name's
    # negotiation (0.4-2 ms less on a 2-core AMD EPYC). The first call is the warm-up.
    backend.average_named(grad, "probe")
    # A step's allreduce is enqueued at a random point of Horovod's cycle and waits for the
    # next one, half a cycle on average; back-to-back probes would each wait nearly a whole
    # cycle. The same seed on every rank: the ranks end a step's backward pass together.
    cycle_s = dist.cycle_ms_in_effect() / 1e3
    phase = np.random.default_rng(0)
    samples = []
    for _ in range(repeats):
        time.sleep(phase.uniform(0, cycle_s))
        t = time.perf_counter()
        backend.average_named(grad, "probe").numpy()
        samples.append(time.perf_counter() - t)
    # every rank must agree on one figure: the slowest rank's median
    return backend.allreduce_max(float(np.median(samples)))


def idle_cpu_share(backend, seconds: float) -> float:
    """Share of a core this process uses while it sleeps `seconds` after init, the slowest
    rank's: what Horovod's background cycle costs on its own."""
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    time.sleep(seconds)
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - start
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return backend.allreduce_max(cpu / wall)


def step_lines(args) -> tuple:
    """`step`: (this process's backend, the lines rank 0 prints)."""
    # the automatic share of the cores, as the real timing runs have
    cfg = load(args.config, ["intra_op_threads=0"])
    backend, _ = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    found = step_probe(
        cfg, backend, [int(b) for b in args.batches.split(",")], args.steps, args.allreduce, args.on_data
    )
    lines = [f"STEP_SECONDS {b} {seconds:.6f}" for b, seconds in found.get("steps", {}).items()]
    return backend, lines + ([f"EVAL_SECONDS_PER_SAMPLE {found['eval']:.8f}"] if "eval" in found else [])


def paired_step_lines(args) -> tuple:
    """`paired-step`: (this process's backend, the lines rank 0 prints)."""
    cfg = load(args.config, ["intra_op_threads=0"])  # each rank's share of the cores, as in training
    backend, _ = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    _, train_x, _ = training_data(cfg, say=lambda line: None)
    without, paid = paired_step_seconds(cfg, backend, args.batch, args.steps, args.pairs, train_x[..., None])
    return backend, [f"PAIRED_STEP_SECONDS {json.dumps({'without': without, 'with': paid})}"]


def throughput_lines(args) -> tuple:
    """`throughput`: (this process's backend, the lines rank 0 prints)."""
    cfg = load(args.config, [])
    backend, _ = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    return backend, [f"SAMPLES_PER_S {throughput(cfg, backend, args.batch, args.steps):.3f}"]


def rank_waits_lines(args) -> tuple:
    """`rank-waits`: (this process's backend, the lines rank 0 prints)."""
    cfg = load(args.config, ["intra_op_threads=0"])  # each rank's share of the cores, as in training
    backend, _ = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    return backend, ["RANK_WAITS " + json.dumps(rank_allreduce_calls(cfg, backend, args.batch, args.steps))]


def allreduce_lines(args) -> tuple:
    """`allreduce`: (this process's backend, the lines rank 0 prints)."""
    backend, _ = dist.setup(cycle_ms=args.cycle_ms)
    return backend, [f"ALLREDUCE_SECONDS {time_allreduce(backend, args.floats):.9f}"]


def idle_lines(args) -> tuple:
    """`idle`: (this process's backend, the lines rank 0 prints)."""
    backend, _ = dist.setup()
    return backend, [f"IDLE_CPU_SHARE {idle_cpu_share(backend, args.seconds):.9f}"]


def _parser() -> argparse.ArgumentParser:
    ap = parser(__doc__, "python -m deepdensity.perf.rank_probes")
    probes = ap.add_subparsers(dest="probe", required=True)
    for name, lines in (
        ("step", step_lines),
        ("throughput", throughput_lines),
        ("rank-waits", rank_waits_lines),
        ("paired-step", paired_step_lines),
    ):
        p = probes.add_parser(name, formatter_class=HelpFormatter)
        p.set_defaults(lines=lines)
        p.add_argument("--config", default="configs/paper.yaml", help="the settings")
        p.add_argument("--steps", type=int, default=20, help="timed steps")
        if name == "step":
            p.add_argument("--batches", default="32", help="per-process batches, comma-separated")
            p.add_argument("--allreduce", action="store_true", help="Horovod's allreduce in the step")
            p.add_argument("--on-data", action="store_true", help="on the settings' training cubes, not random ones")
        else:
            p.add_argument("--batch", type=int, default=32, help="per-process batch")
        if name == "paired-step":
            p.add_argument("--pairs", type=int, default=8, help="pairs of blocks without and with the allreduce")
    p = probes.add_parser("allreduce", formatter_class=HelpFormatter)
    p.set_defaults(lines=allreduce_lines)
    p.add_argument("floats", type=int, help="time an allreduce of this many float32 values")
    p.add_argument("--cycle-ms", type=float, default=0.0, help="Horovod's cycle (0: the environment's or Horovod's)")
    p = probes.add_parser("idle", formatter_class=HelpFormatter)
    p.set_defaults(lines=idle_lines)
    p.add_argument("seconds", type=float, help="measure an idle rank's share of a core over this long")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    backend, lines = args.lines(args)
    if backend.rank() == 0:  # Horovod: rank 0 alone reports
        for line in lines:
            print(line)
        report(lines)
    return 0


def report(lines: list) -> None:
    """Rank 0's lines into the file the launching process named (probes.REPORT_ENV), whole:
    mpirun forwards a rank's stdout in pieces, and a RANK_WAITS line of about 2,000 characters
    reached the parent cut, which then failed to read it."""
    path = os.environ.get(REPORT_ENV)
    if path:
        write_atomic(Path(path), "".join(line + "\n" for line in lines))


if __name__ == "__main__":
    raise SystemExit(main())
