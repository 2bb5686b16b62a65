"""The study's clock measured: the parts of one timing model for every N (core/clocks.py holds
the model), calibrated on a real epoch, and the real `horovodrun -np 2` and `-np 4` epochs it is
checked against on this host. Measured where the study's runs train: here under the local
executor, and under `--executor slurm` as one Slurm job that runs this module on a node:

    python -m deepdensity.study.run.timing --runs RUNS --n-train N --n-val N

The model is the paper's T_S + T_P / n + c log2 n built from parts measured here (a step's
fixed cost and cost per sample, the evaluation's cost per cube, the allreduce of this model's
gradients as a training step pays it at N = 2 and 4), each worker a device like this host; its
communication term has a latency beside the paper's c log2 n, and each epoch pays its
callbacks' epoch-end work once. Its compute parts are scaled by
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
import sys
from pathlib import Path

from deepdensity.config import load
from deepdensity.launch import controllers
from deepdensity.launch.horovodrun import horovodrun_path
from deepdensity.perf import probes
from deepdensity.scaling import policies
from deepdensity.study.core import clocks
from deepdensity.utils import machine
from deepdensity.utils.args import parser
from deepdensity.utils.errors import StudyError, command
from deepdensity.utils.files import read_json_object, write_atomic

REAL_EPOCHS = 3  # epochs of each real timing run; the first (tracing) is left out
REAL_NS = (1, 2, 4)  # one process, and horovodrun -np 2 and -np 4 on this host
PROBE_NS = (2, 4)  # the ranks of the probes that price a shared step and its allreduce
CLOCK_VERSION = clocks.CLOCK_VERSION  # the version measure_timing writes
PAIRED_BLOCKS = 8  # pairs of 20-step blocks in each round's allreduce probe at each N
# The probes and the real epochs are taken in ROUNDS rounds, each holding one of every probe
# (the pair without and with the allreduce at every N of PROBE_NS) and the real epochs, and every
# figure is the median over the rounds: a drift of the host's speed within an invocation then
# moves the probes and the real epochs alike instead of the model against what it is checked
# on. Each finished round is kept in ROUNDS_FILE until timing.json is written, so that an
# interrupted study resumes at the first unfinished round (kept_rounds).
ROUNDS = 3
ROUNDS_FILE = "timing-rounds.json"
ROUND_KEYS = {"steps", "eval", "shared", "allreduce", "real", "real_steps"}  # measure_round's
STEP_BATCHES = [1, 2, 4, 8, 16, 32]


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
            say(
                f"timing: a training step at batch {b} on {n} processes stepping at once, without and with "
                f"Horovod's allreduce"
            )
            shared[str(n)], allreduce[str(n)] = probes.paired_allreduce(str(train_yaml), n, b, PAIRED_BLOCKS)
        for n in REAL_NS:
            say(f"timing: {REAL_EPOCHS} real strong-scaling epochs on {n} process(es) of this host")
            real[str(n)], real_steps[str(n)] = probes.real_epoch_seconds(
                root / f"timing-np{n}", train_yaml, cfg.base_lr, n, REAL_EPOCHS
            )
    except RuntimeError as e:
        raise StudyError(str(e)) from None
    return {
        "steps": {str(b): s for b, s in steps.items()},
        "eval": eval_per_sample,
        "shared": shared,
        "allreduce": allreduce,
        "real": real,
        "real_steps": real_steps,
    }


def probes_controller() -> str:
    """The controller every horovodrun of the clock runs under (its probes and real epochs, and
    the study's real strong-scaling runs, all plain `horovodrun -np N`): MPI where Horovod was
    built with it, else Gloo."""
    return controllers.resolved([], {}, horovodrun_path())


def allreduce_alone(n_weights: int, cycle_ms: float, controller: str, say=print) -> dict:
    """The allreduce of `n_weights` floats alone at every N of PROBE_NS ({n: s}), under
    `controller`: reported beside the in-step allreduce, not part of the model."""
    found = {}
    for n in PROBE_NS:
        say(
            f"timing: {clocks.CONTROLLER_NAMES.get(controller, controller)} allreduce of {n_weights:,} gradients "
            f"on {n} processes, alone"
        )
        try:
            found[str(n)] = probes.allreduce_seconds(n, n_weights, cycle_ms)
        except RuntimeError as e:
            raise StudyError(str(e)) from None
    return found


def measure_timing(root: Path, train_yaml: Path, cfg, n_train: int, n_val: int, say=print) -> dict:
    """The calibrated model and the real epochs it is checked against, measured once per runs
    folder (timing.json) with nothing else running; measured again when the file came from
    another version of the clock (it is kept beside, as timing-vK.json). Each finished round is
    written to ROUNDS_FILE at once, and an invocation that finds rounds there measured under
    the same settings (round_settings) measures only the rounds still missing."""
    path = root / "timing.json"
    earlier = read_json_object(path)
    if earlier is not None:
        version = earlier.get("clock_version", 1)
        if version == CLOCK_VERSION:
            return earlier
        kept = path.with_name(f"timing-v{version}.json")
        say(
            f"timing: {path} came from version {version} of the clock, this is version {CLOCK_VERSION}: "
            f"measured again ({kept.name} keeps the old one)"
        )
        path.replace(kept)
    # TensorFlow only when the clock measures: a held timing.json and the dry run need none
    from deepdensity.model.autoencoder import build_model

    settings = round_settings(train_yaml)
    rounds = kept_rounds(root / ROUNDS_FILE, settings, say)
    for r in range(len(rounds), ROUNDS):
        say(f"timing: round {r + 1} of {ROUNDS}")
        rounds.append(measure_round(root, train_yaml, cfg, say))
        write_atomic(root / ROUNDS_FILE, json.dumps({"settings": settings, "rounds": rounds}, indent=2))
    timing = clocks.combine_rounds(rounds, cfg.batch_size)
    n_weights = build_model(cfg, 16, 3).count_params()
    controller = probes_controller()
    timing.update(
        allreduce_alone_seconds=allreduce_alone(n_weights, cfg.horovod_cycle_ms, controller, say),
        controller=controller,
        n_weights=n_weights,
    )
    timing["compute_scale"], timing["epoch_overhead_s"] = clocks.step_scale_and_overhead(
        timing,
        n_train,
        n_val,
        cfg.batch_size,
        cfg.epoch_definition,
        timing["real_epoch_seconds"]["1"],
        timing["real_steps_seconds"]["1"],
    )
    timing["clock_version"] = CLOCK_VERSION
    write_atomic(path, json.dumps(timing, indent=2))
    (root / ROUNDS_FILE).unlink(missing_ok=True)  # its rounds are timing.json's `rounds` now
    return timing


def round_settings(train_yaml: Path) -> dict:
    """What a round's figures depend on beyond the code: the clock's version, the batches and
    the N it probes, the real runs' epochs, the study's settings file (its digest), the host:
    its CPU, its cores and the instruction set oneDNN uses here (ONEDNN_MAX_CPU_ISA included),
    and the controller its horovodrun runs under. A round kept under other settings is measured
    again: a clock resumed after Horovod was rebuilt with MPI does not mix Gloo's rounds in."""
    return {
        "clock_version": CLOCK_VERSION,
        "step_batches": list(STEP_BATCHES),
        "probe_ns": list(PROBE_NS),
        "real_ns": list(REAL_NS),
        "real_epochs": REAL_EPOCHS,
        "train_settings_sha256": hashlib.sha256(Path(train_yaml).read_bytes()).hexdigest(),
        "cpu": machine.cpu_model(),
        "cores": os.cpu_count(),
        "onednn_isa": machine.onednn_isa(),
        "controller": probes_controller(),
    }


def kept_rounds(path: Path, settings: dict, say=print) -> list:
    """The rounds an interrupted invocation finished and wrote to `path` under these `settings`,
    at most ROUNDS of them; [] when there are none, or they were measured under other settings
    (said, naming what changed) or the file is not one this module wrote."""
    held = read_json_object(path)
    if (
        not isinstance(held, dict)
        or not isinstance(held.get("rounds"), list)
        or not all(isinstance(r, dict) and set(r) == ROUND_KEYS for r in held["rounds"])
    ):
        return []
    rounds, earlier = held["rounds"][:ROUNDS], held.get("settings")
    if earlier != settings:
        earlier = earlier if isinstance(earlier, dict) else {}
        changed = sorted(k for k in settings.keys() | earlier.keys() if settings.get(k) != earlier.get(k))
        say(
            f"timing: the {len(rounds)} round(s) in {path} were measured under other settings "
            f"({', '.join(changed)}): measured again"
        )
        return []
    if rounds:
        which = "round 1" if len(rounds) == 1 else f"rounds 1-{len(rounds)}"
        say(f"timing: {which} of {ROUNDS} kept from an interrupted invocation ({path})")
    return rounds


def current_timing(root: Path):
    """The runs folder's timing.json when it is of this version of the clock, else None (none,
    unreadable, or of another version: measure_timing measures it again)."""
    timing = read_json_object(root / "timing.json")
    return timing if clocks.is_current(timing) else None


def held_timing(root: Path) -> dict:
    """The runs folder's clock as measured before, for a study that trains nothing (--no-train)."""
    timing = current_timing(root)
    if timing is None:
        raise StudyError(
            f"--no-train needs this runs folder's clock ({root / 'timing.json'}, version {CLOCK_VERSION}); "
            f"run the study once without --no-train to measure it"
        )
    return timing


# The clock's Slurm job trains (its real `horovodrun -np 1/2/4` epochs), so like every stage that
# trains it runs on a compute node, never on the login node the driver runs on. It writes
# RUNS/timing.json (and, round by round, timing-rounds.json) on the shared file system, and the
# driver reads timing.json when the job has ended. The job goes through the runner's own job
# handling (SlurmRunner.job): recorded in RUNS/.slurm/clock.json before and after sbatch, so that a
# driver started again attaches to it and never submits it twice; near its time limit it is
# requeued, and the requeued job resumes at the first round not yet kept.
CLOCK_JOB = "clock"  # the job's name (dd-PRESET-clock) and its record (.slurm/clock.json)
CLOCK_PROCESSES = max(*REAL_NS, *PROBE_NS)  # the most processes the clock runs at once: horovodrun -np 4


def clock_cpus(options, threads: int) -> int:
    """CPUs of the clock's job: those of the study's real strong-scaling job at the clock's
    largest N (horovodrun -np 4): the runs' threads, or the preset's cpus_per_task, a process."""
    return max(1, options.cpus_per_task or threads) * CLOCK_PROCESSES


def clock_command(root: Path, n_train: int, n_val: int) -> list:
    """What the clock's job runs: this module, on the runs folder (absolute: the job's own cwd)."""
    return [
        sys.executable,
        "-m",
        "deepdensity.study.run.timing",
        "--runs",
        str(Path(root).resolve()),
        "--n-train",
        str(n_train),
        "--n-val",
        str(n_val),
    ]


def study_clock(s, cfg, say=print) -> dict:
    """The study's clock (timing.json), measured where the study's runs train: here under the
    local executor (measure_timing, as always); as one Slurm job under a runner whose runs are
    jobs, waited for and then read, unless the runs folder holds this clock's timing.json."""
    if not s.runner.runs_as_jobs:
        return measure_timing(s.root, s.train_yaml, cfg, s.n_train, s.n_val, say)
    held = current_timing(s.root)
    if held is not None:
        return held
    runner = s.runner
    cpus = clock_cpus(runner.options, runner.threads)
    say(
        f"timing: the clock as one Slurm job on one node ({cpus} CPUs, {runner.options.time} at most; "
        f"one-process epochs and horovodrun -np {' and '.join(str(n) for n in REAL_NS[1:])} there)"
    )
    code, log = runner.job(clock_command(s.root, s.n_train, s.n_val), CLOCK_JOB, cpus)
    timing = current_timing(s.root)
    if code != 0 or timing is None:
        runner.forget(CLOCK_JOB)  # read and said: the study started again submits it afresh
        tail = "\n".join(log.strip().splitlines()[-15:])
        raise StudyError(
            f"the clock's Slurm job failed (exit {code})"
            + ("" if code != 0 else f", and wrote no timing.json in {s.root}")
            + f":\n{tail}"
        )
    say(f"timing: the clock's job wrote {s.root / 'timing.json'}")
    return timing


@command
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.study.run.timing")
    ap.add_argument("--runs", required=True, help="the study's runs folder (its train.yaml and data)")
    ap.add_argument("--n-train", type=int, required=True, help="training cubes the runs train on")
    ap.add_argument("--n-val", type=int, required=True, help="validation cubes")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="(a job submitted again: the rounds kept in timing-rounds.json are resumed either way)",
    )
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # the job's log shows each round as it goes
    root = Path(args.runs)
    train_yaml = root / "train.yaml"
    if not train_yaml.is_file():
        raise StudyError(f"{train_yaml}: no such file; --runs names a study's runs folder")
    measure_timing(root, train_yaml, load(str(train_yaml)), args.n_train, args.n_val)
    print(f"timing: {root / 'timing.json'} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
