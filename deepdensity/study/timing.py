"""The study's clock: one timing model for every N, calibrated on a real epoch, and checked
against real `horovodrun -np 2` and `-np 4` epochs on this host.

The model is the paper's T_S + T_P / n + c log2 n built from parts measured here (a step's
fixed cost and cost per sample, the evaluation's cost per cube, the allreduce of this model's
gradients as a training step pays it at N = 2 and 4), each worker a device like this host; its
communication term has a latency beside the paper's c log2 n, and each epoch pays its
callbacks' epoch-end work once (both from version 4, below). Its compute parts are scaled by
one factor so that the steps of its N = 1 epoch take what the real one-process epoch's steps
took in the same invocation, and the rest of that real epoch is the per-epoch cost: T(1) and
T(N) then come from the same model, and an efficiency T(1) / (N T(N)) carries no bias from
mixing a measurement with a model.

Everything here runs alone, before or after the training runs, never beside them.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
from pathlib import Path

from deepdensity.perf import probes
from deepdensity.scaling import policies, rules
from deepdensity.study import speedup
from deepdensity.study import clocks
from deepdensity.study.errors import StudyError
from deepdensity.utils import machine
from deepdensity.utils.files import write_atomic

REAL_EPOCHS = 3          # epochs of each real timing run; the first (tracing) is left out
REAL_NS = (1, 2, 4)      # one process, and horovodrun -np 2 and -np 4 on this host
PROBE_NS = (2, 4)        # the ranks of the probes that price a shared step and its allreduce
# What the clock's parts mean. A runs folder's timing.json of another version is measured again
# (the old one kept beside as timing-vK.json), never mixed with new runs; one without the key
# is version 1. In version 4 the probes step on the study's own cubes; the allreduce at N is the
# median of paired probes without and with it (probes.paired_allreduce), priced as
# latency + per_doubling * log2 n fitted to N = 2 and 4 (speedup.fit_latency_and_per_doubling);
# the compute scale k is fitted on the real one-process run's steps (`steps_seconds`), the rest
# of its epoch a per-epoch cost (step_scale_and_overhead). A record of version 3 or before has
# no `allreduce_latency_s` and is rendered as it was, with none. In version 5 the allreduce at
# N comes from one launch timing PAIRED_BLOCKS blocks of steps without and with it in turn
# (rank_probes.paired_step_seconds), not from the difference of two launches' probes.
CLOCK_VERSION = 5
PAIRED_BLOCKS = 8         # pairs of 20-step blocks in each round's allreduce probe at each N
# The probes and the real epochs are taken in ROUNDS rounds, each holding one of every probe
# (the pair without and with the allreduce at every N of PROBE_NS) and the real epochs, and every
# figure is the median over the rounds: a drift of the host's speed within an invocation then
# moves the probes and the real epochs alike instead of the model against what it is checked
# on. Each finished round is kept in ROUNDS_FILE until timing.json is written, so that an
# interrupted study resumes at the first unfinished round (kept_rounds).
ROUNDS = 3
ROUNDS_FILE = "timing-rounds.json"
ROUND_KEYS = {"steps", "eval", "shared", "allreduce", "real", "real_steps"}   # measure_round's
STEP_BATCHES = [1, 2, 4, 8, 16, 32]
CONTROLLER_NAMES = {"gloo": "Gloo", "mpi": "MPI"}


def clock_controller(timing: dict) -> str:
    """The controller a clock's horovodrun ran under, as the reports name it ("Gloo", "MPI"). A
    clock that names none was measured before the key was written, when `make install` built
    Horovod with Gloo alone: under Gloo."""
    name = timing.get("controller", "gloo")
    return CONTROLLER_NAMES.get(name, str(name))


def allreduce_alone_of(timing: dict) -> dict:
    """The allreduce alone ({n: s}) under the clock's controller; clocks written before the
    controller was recorded call it `gloo_seconds`."""
    return timing.get("allreduce_alone_seconds", timing.get("gloo_seconds"))


def measure_round(root: Path, train_yaml: Path, cfg, say=print) -> dict:
    """One round of the clock's measurements, raw, in the thread configuration of the real runs
    (each in a process of its own, `intra_op_threads` automatic) and on their data: step time
    against per-worker batch and evaluation per cube on one process; at every N of PROBE_NS,
    one pair of steps of N ranks stepping at once on their share of the cores at strong
    scaling's per-worker batch, without allreduce and with Horovod's allreduce of the gradients
    in the step (their difference is the allreduce's cost); then the real epochs on every N of
    REAL_NS, and the seconds of their steps. {"steps": {batch: s}, "eval": s, "shared": {n: s},
    "allreduce": {n: s}, "real": {n: s}, "real_steps": {n: s}}, n and batch as strings (JSON keys)."""
    say("timing: training steps at per-worker batch " + ", ".join(map(str, STEP_BATCHES)) + " on one process")
    shared, allreduce, real, real_steps = {}, {}, {}, {}
    try:
        steps, eval_per_sample = probes.probe_step_seconds(str(train_yaml), 1, STEP_BATCHES, on_data=True)
        for n in PROBE_NS:
            b = policies.plan(policies.SEQUENTIAL, n, cfg.batch_size).per_worker_batch
            say(f"timing: a training step at batch {b} on {n} processes stepping at once, without and with "
                f"Horovod's allreduce")
            shared[str(n)], allreduce[str(n)] = probes.paired_allreduce(str(train_yaml), n, b, PAIRED_BLOCKS)
        for n in REAL_NS:
            say(f"timing: {REAL_EPOCHS} real strong-scaling epochs on {n} process(es) of this host")
            real[str(n)], real_steps[str(n)] = probes.real_epoch_seconds(root / f"timing-np{n}", train_yaml,
                                                                         cfg.base_lr, n, REAL_EPOCHS)
    except RuntimeError as e:
        raise StudyError(str(e)) from None
    return {"steps": {str(b): s for b, s in steps.items()}, "eval": eval_per_sample, "shared": shared,
            "allreduce": allreduce, "real": real, "real_steps": real_steps}


def combine_rounds(rounds: list, batch_size: int) -> dict:
    """The model's parts from the rounds (pure): every figure the median over the rounds, then
    the step's line through the batches' medians and a + c log2 n through the allreduces'
    medians (speedup.fit_latency_and_per_doubling). The rounds are kept beside (`rounds`)."""
    median = lambda key, k: statistics.median(r[key][k] for r in rounds)  # noqa: E731
    steps = {b: median("steps", b) for b in rounds[0]["steps"]}
    shared = {n: median("shared", n) for n in rounds[0]["shared"]}
    allreduce = {n: median("allreduce", n) for n in rounds[0]["allreduce"]}
    step_fixed, per_sample = speedup.fit_line([int(b) for b in steps], list(steps.values()))
    latency, per_doubling = speedup.fit_latency_and_per_doubling({int(n): s for n, s in allreduce.items()})
    return {"step_seconds": steps, "step_fixed_s": step_fixed, "per_sample_s": per_sample,
            "eval_per_sample_s": statistics.median(r["eval"] for r in rounds),
            "shared_step_seconds": {"1": steps[str(batch_size)], **shared},
            "allreduce_seconds": {"1": 0.0, **allreduce},
            "allreduce_latency_s": latency, "allreduce_per_doubling_s": per_doubling,
            "real_epoch_seconds": {n: median("real", n) for n in rounds[0]["real"]},
            "real_steps_seconds": {n: median("real_steps", n) for n in rounds[0]["real_steps"]}, "rounds": rounds}


def probes_controller() -> str:
    """The controller every horovodrun of the clock runs under (its probes and real epochs, and
    the study's real strong-scaling runs, all plain `horovodrun -np N`): MPI where Horovod was
    built with it, else Gloo."""
    from deepdensity.training import controllers
    from deepdensity.training.horovodrun import horovodrun_path
    return controllers.resolved([], {}, horovodrun_path())


def allreduce_alone(n_weights: int, cycle_ms: float, controller: str, say=print) -> dict:
    """The allreduce of `n_weights` floats alone at every N of PROBE_NS ({n: s}), under
    `controller`: reported beside the in-step allreduce, not part of the model."""
    found = {}
    for n in PROBE_NS:
        say(f"timing: {CONTROLLER_NAMES.get(controller, controller)} allreduce of {n_weights:,} gradients on {n} processes, alone")
        try:
            found[str(n)] = probes.allreduce_seconds(n, n_weights, cycle_ms)
        except RuntimeError as e:
            raise StudyError(str(e)) from None
    return found


def step_scale_and_overhead(parts: dict, n_train: int, n_val: int, base_batch: int, definition: str,
                            t1_real: float, t1_steps: float) -> tuple:
    """(k, epoch overhead) from the real one-process epoch (clock version 4): k makes the
    model's steps of that epoch its real steps (`steps_seconds`), and the overhead is the rest
    of the real epoch less the evaluation (k x the probe's): its callbacks' epoch-end work,
    paid once an epoch at every N. Then the model's one-process epoch is the real one, and
    neither part is stretched into the other: a per-epoch cost scaled per step grows with the
    steps an epoch has (N x at N under the per_worker epoch)."""
    steps = rules.steps_per_epoch(n_train, policies.plan(policies.SEQUENTIAL, 1, base_batch), definition)
    k = t1_steps / (steps * (parts["step_fixed_s"] + parts["per_sample_s"] * base_batch))
    return k, max(0.0, t1_real - t1_steps - k * parts["eval_per_sample_s"] * n_val)


def describe_allreduce(timing: dict) -> str:
    """The clock's allreduce in words: per doubling of N, and its latency where it has one."""
    per_doubling = f"{timing['allreduce_per_doubling_s'] * 1e3:.2f} ms per doubling of N"
    latency = timing.get("allreduce_latency_s", 0.0)      # none in a clock of version 3 or before
    return f"{latency * 1e3:.2f} ms + {per_doubling} (none at N = 1)" if latency else per_doubling


def model_epoch(timing: dict, mode: str, n: int, n_train: int, n_val: int, base_batch: int, definition: str) -> float:
    """Seconds of one epoch of (mode, N), each worker its own device: the calibrated model
    (clocks.host_clock)."""
    return clocks.host_clock(timing, base_batch).epoch_seconds(mode, n, n_train, n_val, definition)


def shared_host_epoch(timing: dict, n: int, n_train: int, n_val: int, base_batch: int, definition: str) -> float:
    """The same model for N strong-scaling workers sharing this one host (what a real
    `horovodrun -np N` here runs), from parts measured in the real runs' thread configuration:
    each step is a rank's step while all N ranks step at once on their share of the cores
    (`shared_step_seconds`; from clock version 4, at N > 1 as measured: shared_step_scale), plus
    the allreduce of the model's gradients between N processes of this host; the host evaluates
    the validation set once. A study timed before that measurement existed takes the host's
    throughput as simply shared: the N workers' compute adds up."""
    c = clocks.host_clock(timing, base_batch)
    p = policies.plan(policies.SEQUENTIAL, n, base_batch)
    steps = rules.steps_per_epoch(n_train, p, definition)
    allreduce = steps * speedup.allreduce_seconds_at(n, c.allreduce_per_doubling_s, c.allreduce_latency_s)
    evaluation = c.eval_per_sample_s * n_val + c.epoch_overhead_s
    shared = timing.get("shared_step_seconds", {})
    if str(n) in shared:
        return steps * shared_step_scale(timing, n) * shared[str(n)] + allreduce + evaluation
    compute = steps * (c.step_fixed_s + c.per_sample_s * p.per_worker_batch)
    return n * compute + evaluation + allreduce


def scales_steps_only(timing: dict) -> bool:
    """Whether the clock's scale k was fitted on the one-process run's steps, with the rest of
    that epoch a per-epoch cost (version 4 on), rather than on its whole epoch (3 and before)."""
    return "epoch_overhead_s" in timing


def shared_step_scale(timing: dict, n: int) -> float:
    """The factor on a step of N ranks sharing the host: the compute scale k where it was fitted
    (one process), none at N > 1 from clock version 4. From version 4, k is fitted on the
    one-process run's steps (two threads, a step that was bimodal on a 2-core AMD EPYC), while
    the steps at N > 1 are probed in the ranks' own configuration (one thread each, all N at
    once) in the same rounds as the real -np N epochs: a factor fitted in one configuration is
    not carried into another it was not measured in. Up to version 3, k scaled every N's whole
    epoch and still does there, so that a report of that clock renders as it was."""
    if n == 1 or not scales_steps_only(timing):
        return timing["compute_scale"]
    return 1.0


def measure_timing(root: Path, train_yaml: Path, cfg, n_train: int, n_val: int, say=print) -> dict:
    """The calibrated model and the real epochs it is checked against, measured once per runs
    folder (timing.json) with nothing else running; measured again when the file came from
    another version of the clock (it is kept beside, as timing-vK.json). Each finished round is
    written to ROUNDS_FILE at once, and an invocation that finds rounds there measured under
    the same settings (round_settings) measures only the rounds still missing."""
    path = root / "timing.json"
    earlier = _read_timing(path)
    if earlier is not None:
        version = earlier.get("clock_version", 1)
        if version == CLOCK_VERSION:
            return earlier
        kept = path.with_name(f"timing-v{version}.json")
        say(f"timing: {path} came from version {version} of the clock, this is version {CLOCK_VERSION}: "
            f"measured again ({kept.name} keeps the old one)")
        path.replace(kept)
    from deepdensity.model.autoencoder import build_model
    settings = round_settings(train_yaml)
    rounds = kept_rounds(root / ROUNDS_FILE, settings, say)
    for r in range(len(rounds), ROUNDS):
        say(f"timing: round {r + 1} of {ROUNDS}")
        rounds.append(measure_round(root, train_yaml, cfg, say))
        write_atomic(root / ROUNDS_FILE, json.dumps({"settings": settings, "rounds": rounds}, indent=2))
    timing = combine_rounds(rounds, cfg.batch_size)
    n_weights = build_model(cfg, 16, 3).count_params()
    controller = probes_controller()
    timing.update(allreduce_alone_seconds=allreduce_alone(n_weights, cfg.horovod_cycle_ms, controller, say),
                  controller=controller, n_weights=n_weights)
    timing["compute_scale"], timing["epoch_overhead_s"] = step_scale_and_overhead(
        timing, n_train, n_val, cfg.batch_size, cfg.epoch_definition, timing["real_epoch_seconds"]["1"],
        timing["real_steps_seconds"]["1"])
    timing["clock_version"] = CLOCK_VERSION
    write_atomic(path, json.dumps(timing, indent=2))
    (root / ROUNDS_FILE).unlink(missing_ok=True)      # its rounds are timing.json's `rounds` now
    return timing


def round_settings(train_yaml: Path) -> dict:
    """What a round's figures depend on beyond the code: the clock's version, the batches and
    the N it probes, the real runs' epochs, the study's settings file (its digest), the host:
    its CPU, its cores and the instruction set oneDNN uses here (ONEDNN_MAX_CPU_ISA included),
    and the controller its horovodrun runs under. A round kept under other settings is measured
    again: a clock resumed after Horovod was rebuilt with MPI does not mix Gloo's rounds in."""
    return {"clock_version": CLOCK_VERSION, "step_batches": list(STEP_BATCHES), "probe_ns": list(PROBE_NS),
            "real_ns": list(REAL_NS), "real_epochs": REAL_EPOCHS,
            "train_settings_sha256": hashlib.sha256(Path(train_yaml).read_bytes()).hexdigest(),
            "cpu": machine.cpu_model(), "cores": os.cpu_count(), "onednn_isa": machine.onednn_isa(),
            "controller": probes_controller()}


def kept_rounds(path: Path, settings: dict, say=print) -> list:
    """The rounds an interrupted invocation finished and wrote to `path` under these `settings`,
    at most ROUNDS of them; [] when there are none, or they were measured under other settings
    (said, naming what changed) or the file is not one this module wrote."""
    held = _read_timing(path)
    if not isinstance(held, dict) or not isinstance(held.get("rounds"), list) \
            or not all(isinstance(r, dict) and set(r) == ROUND_KEYS for r in held["rounds"]):
        return []
    rounds, earlier = held["rounds"][:ROUNDS], held.get("settings")
    if earlier != settings:
        earlier = earlier if isinstance(earlier, dict) else {}
        changed = sorted(k for k in settings.keys() | earlier.keys() if settings.get(k) != earlier.get(k))
        say(f"timing: the {len(rounds)} round(s) in {path} were measured under other settings "
            f"({', '.join(changed)}): measured again")
        return []
    if rounds:
        which = "round 1" if len(rounds) == 1 else f"rounds 1-{len(rounds)}"
        say(f"timing: {which} of {ROUNDS} kept from an interrupted invocation ({path})")
    return rounds


def current_timing(root: Path):
    """The runs folder's timing.json when it is of this version of the clock, else None (none,
    unreadable, or of another version: measure_timing measures it again)."""
    timing = _read_timing(root / "timing.json")
    return timing if isinstance(timing, dict) and timing.get("clock_version") == CLOCK_VERSION else None


def held_timing(root: Path) -> dict:
    """The runs folder's clock as measured before, for a study that trains nothing (--no-train)."""
    timing = current_timing(root)
    if timing is None:
        raise StudyError(f"--no-train needs this runs folder's clock ({root / 'timing.json'}, version {CLOCK_VERSION}); "
                         f"run the study once without --no-train to measure it")
    return timing


def _read_timing(path: Path):
    """timing.json's contents, or None when there is none (or it is unreadable: measured again)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
