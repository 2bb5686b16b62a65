"""The probes the study's clock takes (study/run/timing.py) and `make bench` reuses, as a library.

Each probe launches one process, or `horovodrun -np N` ranks sharing this host, each with the
thread share and Horovod background thread a real run gives it, and returns what rank 0
measured:

  probe_step_seconds   a training step of the trainer's model at per-worker batches, with N
                       ranks stepping at once, without or with Horovod's allreduce in the step
                       (and on one process, the evaluation's seconds per cube)
  paired_allreduce     a rank's step without allreduce and the allreduce a step pays, from
                       blocks of steps without and with it taken in turn in one launch
  allreduce_seconds    the controller's allreduce of a model's gradients alone (MPI's or Gloo's)
  idle_cpu_share       what an idle rank's Horovod background thread costs
  real_epoch_seconds   real strong-scaling epochs of `deepdensity train`

The launched processes run `python -m deepdensity.perf.rank_probes` (what each rank does is
there). This module imports neither TensorFlow nor Horovod, so that the study can import it.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from deepdensity.launch.horovodrun import horovodrun_path
from deepdensity.training.runs import read_metrics

# the folder that holds the deepdensity package (a checkout or site-packages), for child processes
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
RANK_PROBES = "deepdensity.perf.rank_probes"
# the file a probe's rank 0 writes its lines to (rank_probes.report)
REPORT_ENV = "DEEPDENSITY_PROBE_REPORT"
PAIRED_KEY = "PAIRED_STEP_SECONDS "


def run_child(args, env=None, timeout=None) -> subprocess.CompletedProcess:
    """Run `args` with this package importable and TensorFlow's start-up lines silenced, `env`
    added to this process's environment; its output captured. A probe's rank 0 writes its lines
    to a file as well (REPORT_ENV): where it did, they are the stdout returned, whole and in
    order, whatever mpirun's forwarding made of them on the way."""
    with tempfile.TemporaryDirectory(prefix="deepdensity-probe-") as folder:
        report = Path(folder) / "report.txt"
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": str(PACKAGE_PARENT),
            REPORT_ENV: str(report),
            **(env or {}),
        }
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
        if report.exists():
            proc = subprocess.CompletedProcess(proc.args, proc.returncode, report.read_text(), proc.stderr)
    return proc


def printed_value(proc: subprocess.CompletedProcess, key: str):
    """The number after `key` on the first stdout line holding it, or None."""
    values = [float(line.split()[-1]) for line in proc.stdout.splitlines() if key in line]
    return values[0] if values else None


def rank_probe(probe: str, *args) -> list:
    """The command that runs `probe` of rank_probes.py in one process (under horovodrun: on every rank)."""
    return [sys.executable, "-m", RANK_PROBES, probe, *map(str, args)]


def launched(n: int, probe: str, args: list, key: str, env: Optional[dict] = None) -> float:
    """`horovodrun -np n python -m deepdensity.perf.rank_probes PROBE ARGS` with `env` added: the
    value rank 0 prints after `key`; RuntimeError with its stderr if the run fails."""
    proc = run_child([horovodrun_path(), "-np", str(n)] + rank_probe(probe, *args), env, timeout=600)
    value = printed_value(proc, key)
    if proc.returncode or value is None:
        raise RuntimeError(
            f"python -m {RANK_PROBES} {probe} {' '.join(map(str, args))} on {n} processes failed:\n"
            f"{proc.stderr[-2000:]}"
        )
    return value


def allreduce_seconds(n: int, n_weights: int, cycle_ms: float = 0.0) -> float:
    """Median seconds of an allreduce of `n_weights` floats on n local processes (under
    horovodrun's default controller: MPI where Horovod was built with it, else Gloo) with
    Horovod's cycle at `cycle_ms` as in training (an allreduce waits for the next cycle)."""
    return launched(n, "allreduce", [n_weights, "--cycle-ms", cycle_ms], "ALLREDUCE_SECONDS")


def idle_cpu_share(n: int, cycle_ms: float, seconds: float = 10.0) -> float:
    """Share of a core an idle rank of `horovodrun -np n` uses with Horovod's cycle at
    `cycle_ms` (its background thread syncs with the other ranks every cycle)."""
    return launched(n, "idle", [seconds], "IDLE_CPU_SHARE", {"HOROVOD_CYCLE_TIME": f"{cycle_ms:g}"})


def probe_step_seconds(
    cfg_path: str,
    n: int,
    batches,
    steps: int = 40,
    allreduce: bool = False,
    timeline: Optional[Path] = None,
    on_data: bool = False,
) -> tuple:
    """({batch: seconds of a step, the slowest rank's mean}, evaluation seconds per cube or None)
    measured on n processes of this host (`horovodrun -np n`, or one process, which also times
    evaluation), the ranks stepping at once; with `allreduce`, Horovod's allreduce of the
    gradients in the step; `on_data`, on the settings' own training cubes rather than random
    ones; with `timeline` (n > 1), Horovod's timeline written there."""
    cmd = (
        rank_probe("step", "--config", cfg_path, "--batches", ",".join(map(str, batches)), "--steps", steps)
        + (["--allreduce"] if allreduce else [])
        + (["--on-data"] if on_data else [])
    )
    launcher = (
        [horovodrun_path(), "-np", str(n)] + (["--timeline-filename", str(timeline)] if timeline else [])
        if n > 1
        else []
    )
    proc = run_child(launcher + cmd, timeout=900)
    # under horovodrun rank 0's lines come as "[0]<stdout>:KEY ..."
    found = [
        line[line.index(key) :].split()
        for line in proc.stdout.splitlines()
        for key in ("STEP_SECONDS", "EVAL_SECONDS_PER_SAMPLE")
        if key in line
    ]
    seconds = {int(w[1]): float(w[2]) for w in found if w[0] == "STEP_SECONDS"}
    evaluation = next((float(w[1]) for w in found if w[0] == "EVAL_SECONDS_PER_SAMPLE"), None)
    if proc.returncode or set(seconds) != set(batches):
        raise RuntimeError(f"the step probe on {n} process(es) failed:\n{proc.stderr[-2000:]}")
    return seconds, evaluation


def paired_allreduce(train_yaml: str, n: int, batch: int, pairs: int, steps: int = 20) -> tuple:
    """(a rank's step without allreduce, the allreduce as a step pays it), seconds, on the
    settings' own cubes, from one launch of n ranks that times blocks of `steps` steps without
    and with Horovod's allreduce in turn, `pairs` of each (rank_probes.paired_step_seconds):
    paired_medians of the blocks. It is what the training pays: Horovod's negotiation, its cycle,
    the wait for the slowest rank and the transfer. Taken as the difference of two launches'
    40-step probes instead, the allreduce of -np 2 under MPI on a 2-core AMD EPYC came out at
    5.9, 9.1 and 11.5 ms in three rounds, against about 4.8 ms a real epoch's steps imply."""
    proc = run_child(
        [horovodrun_path(), "-np", str(n)]
        + rank_probe("paired-step", "--config", train_yaml, "--batch", batch, "--steps", steps, "--pairs", pairs),
        timeout=900,
    )
    found = [
        line[line.index(PAIRED_KEY) + len(PAIRED_KEY) :] for line in proc.stdout.splitlines() if PAIRED_KEY in line
    ]
    if proc.returncode or not found:
        raise RuntimeError(f"the paired step probe on {n} processes failed:\n{proc.stderr[-2000:]}")
    blocks = json.loads(found[0])
    return paired_medians(blocks["without"], blocks["with"])


def paired_medians(without: list, paid: list) -> tuple:
    """(median step without the allreduce, median of the pairs' differences, none below 0)."""
    if not without or len(without) != len(paid):
        raise ValueError("as many blocks with the allreduce as without, at least one")
    return statistics.median(without), statistics.median(max(0.0, w - o) for o, w in zip(without, paid))


def real_epoch_seconds(out: Path, train_yaml: Path, eta: float, n: int, epochs: int) -> tuple:
    """(median seconds of a real strong-scaling epoch, median seconds of its steps) on n
    processes of this host (epochs after the first, of `epochs`), from `horovodrun -np n`
    (n > 1) or one process, each with its share of the cores, the run's folder `out` (measured
    afresh, never resumed). The steps are the epoch less its validation and the callbacks'
    epoch-end work (metrics.jsonl's `steps_seconds`). RuntimeError with the end of its stderr
    if the run fails."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "deepdensity",
        "train",
        "--mode",
        "strong",
        "--config",
        str(train_yaml),
        "--out",
        str(out),
        "--quiet",
        "--set",
        f"base_lr={eta!r}",
        "--set",
        f"max_epochs={epochs}",
        "--set",
        "target_loss=0",
        "--set",
        "stall_patience=0",
        "--set",
        "intra_op_threads=0",
        # the paper's epoch validates once; the study's extra pass validations are its instrument
        "--set",
        "validate_every_pass=false",
    ]
    if n > 1:
        cmd = [horovodrun_path(), "-np", str(n)] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"the real timing run on {n} process(es) failed (exit {proc.returncode}):\n"
            + "\n".join(proc.stderr.strip().splitlines()[-10:])
        )
    rows = read_metrics(out)
    secs = [r["seconds"] for r in rows]
    return (
        statistics.median(b - a for a, b in zip(secs, secs[1:])),
        statistics.median(r["steps_seconds"] for r in rows[1:]),
    )
