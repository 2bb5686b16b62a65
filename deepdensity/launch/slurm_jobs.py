"""A training command as a Slurm job, through submitit: how the study's --executor slurm
(study/run/slurm_runner.py) runs its runs, kept with the cluster code. What each job
asks for (SlurmOptions: the preset's `slurm:`, then --slurm KEY=VALUE; time_hours reads its time
limit as Slurm does) and whether this host can submit such a job (clients_unavailable, said
before the study writes anything);
submission (one job, or one job array for the runs that become ready together), requeue before
the time limit, and a job's result and output.

A job's state is read with `squeue`, which every controller answers (slurm_queue.py), instead of
submitit's `sacct`; everything else is submitit's own.

What a job runs: TrainJob, the run's training command as a subprocess (the command the local
executor runs); the job's result is its exit status. 90 s before the time limit Slurm sends
the job SIGUSR2 (submitit's `--signal`); submitit then calls TrainJob.checkpoint, which stops
the run with SIGTERM (it checkpoints), and requeues the job (`scontrol requeue`): the same job
id starts again and resumes the run from its checkpoint, up to `retries` times."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import submitit
from submitit.core import utils as submitit_utils
from submitit.slurm.slurm import _make_sbatch_string

from deepdensity.launch.slurm_queue import QueueExecutor
from deepdensity.utils.errors import UserError

SIGNAL_BEFORE_END_S = 90  # Slurm's SIGUSR2 before the time limit: time to finish a step and checkpoint
COMMENT = "deepdensity:"  # --comment of every submission, with a token the run's record holds


# A job's command runs as the one task of an srun step. mpirun, which horovodrun starts where
# Horovod is built with MPI (the clock's probes and real epochs, real strong-scaling runs), reads
# that step's allocation of one task and refuses -np 2 ("All nodes which are allocated for this
# job are already filled"); without Slurm's allocator it places the ranks on horovodrun's own -H
# (localhost:N, one node, as every such run here is). A user's own OMPI_MCA_ras wins.
MPIRUN_IN_A_JOB_STEP = {"OMPI_MCA_ras": "^slurm"}


class TrainJob(submitit.helpers.Checkpointable):
    """A run's job: its training command as a subprocess, whose exit status is the job's result
    (128 + N for a signal N, as a shell says it). `env`: more environment for the run."""

    def __init__(self, cmd: list, env: dict) -> None:
        self.cmd, self.env = list(cmd), dict(env)
        self._proc: Optional[subprocess.Popen] = None
        self._stop_asked = False

    def __getstate__(self) -> dict:
        return {"cmd": self.cmd, "env": self.env}  # never the live subprocess

    def __setstate__(self, state: dict) -> None:
        self.cmd, self.env, self._proc, self._stop_asked = state["cmd"], state["env"], None, False

    def __call__(self) -> int:
        # Slurm signals every process of the job step: SIGUSR2 is for submitit (below), and would
        # kill the run (its default action); an ignored signal stays ignored across exec
        self._proc = subprocess.Popen(
            self.cmd,
            env={**MPIRUN_IN_A_JOB_STEP, **os.environ, **self.env},
            preexec_fn=lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN),
        )
        if self._stop_asked:  # checkpoint came while the run was starting, before _proc was set
            self._proc.terminate()
        code = self._proc.wait()
        return 128 - code if code < 0 else code

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """Before the time limit: stop the run with SIGTERM (it checkpoints and exits), and
        start it again from that checkpoint when the requeued job runs."""
        self._stop_asked = True  # before reading _proc: a run still starting is stopped by __call__
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(SIGNAL_BEFORE_END_S - 10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        resumed = self.cmd if "--resume" in self.cmd else [*self.cmd, "--resume"]
        return submitit.helpers.DelayedSubmission(TrainJob(resumed, self.env))


def job_parameters(options, cpus: int, hours: float) -> dict:
    """submitit's parameters for a job of `cpus` CPUs and a time limit of `hours` with the
    study's options (its name apart: Submitter names it)."""
    extra = {"chdir": str(Path.cwd())}
    for item in options.sbatch:  # --key=value or --flag, as #SBATCH lines take them
        key, sep, value = item[2:].partition("=")
        extra[key] = value if sep else True
    params = {
        "time": 0 if hours == float("inf") else max(1, round(hours * 60)),
        "ntasks_per_node": 1,
        "cpus_per_task": max(1, cpus),
        "signal_delay_s": SIGNAL_BEFORE_END_S,
        # srun of Slurm 22.05 does not take the job's --cpus-per-task: the step would get 1 CPU
        "srun_args": [f"--cpus-per-task={max(1, cpus)}"],
        "additional_parameters": extra,
    }
    for key in ("partition", "account"):
        if getattr(options, key):
            params[key] = getattr(options, key)
    if options.gpus_per_task:
        params["gpus_per_task"] = options.gpus_per_task
    return params


def sbatch_text(folder: Path, params: dict) -> str:
    """The batch script submitit submits with these parameters."""
    folder = Path(folder).expanduser().absolute()  # as submitit's executor has it
    command = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(str(folder))}"
    return _make_sbatch_string(command=command, folder=folder, **params)


def result_of(folder: Path, job_id: str) -> tuple:
    """(exit status or None, why) of a job that has ended: the run's exit status from the
    job's result; None when it wrote none (ended before the run did: scancel, a node lost) or
    when submitit gave up requeueing it."""
    path = submitit_utils.JobPaths(folder, job_id=job_id, task_id=0).result_pickle
    try:
        outcome, value = submitit_utils.pickle_load(path)
    except (OSError, EOFError, ValueError, TypeError):
        return None, "no result"
    if outcome == "success":
        return int(value), ""
    if "UncompletedJobError" in str(value):  # requeued `retries` times and out of time again
        return None, str(value).strip().splitlines()[-1]
    return 1, str(value)  # TrainJob itself failed (the command could not start)


def log_path(folder: Path, job_id: str) -> Path:
    """Where the job's output goes (its errors: the same name, .err)."""
    return submitit_utils.JobPaths(folder, job_id=job_id, task_id=0).stdout


def log_of(folder: Path, job_id: str) -> str:
    """The job's output and errors (the run's, and submitit's lines)."""
    paths = submitit_utils.JobPaths(folder, job_id=job_id, task_id=0)
    text = []
    for path in (paths.stdout, paths.stderr):
        try:
            text.append(path.read_text(errors="replace"))
        except OSError:
            pass
    return "\n".join(text)


class Submitter:
    """Submits runs' jobs through submitit; the runs asked for within `window` seconds of each
    other (a stage's first wave) and of the same size go as one job array. Each request is
    written to its record before sbatch (with a token that goes into the job's --comment), so
    that a driver killed between sbatch and the record finds the job again (`find`)."""

    def __init__(self, folder: Path, prefix: str, retries: int, max_jobs: int, window: float = 1.0) -> None:
        self.folder, self.prefix, self.retries, self.max_jobs, self.window = folder, prefix, retries, max_jobs, window
        self._lock = threading.Lock()
        self._pending: list = []

    def submit(self, name: str, job: TrainJob, params: dict, before) -> str:
        """The job id of `job` (submitted alone or in an array); `before(token, index)` is
        called before sbatch."""
        request = {"name": name, "job": job, "params": params, "before": before, "done": threading.Event()}
        with self._lock:
            self._pending.append(request)
            leader = len(self._pending) == 1
        if leader:
            time.sleep(self.window)
            with self._lock:
                batch, self._pending = self._pending, []
            self._flush(batch)
        request["done"].wait()
        if "error" in request:
            raise request["error"]
        return request["job_id"]

    def _flush(self, batch: list) -> None:
        groups: dict = {}
        for r in batch:
            groups.setdefault(repr(sorted(r["params"].items())), []).append(r)
        for group in groups.values():
            try:
                self._submit_group(group)
            except BaseException as e:  # every waiting run hears of it, not only the leader
                error = e
                if isinstance(e, Exception):  # sbatch refused (submitit raises its output): one line
                    lines = [x.strip() for x in str(e).splitlines() if x.strip()] or [repr(e)]
                    error = UserError(f"submitting {len(group)} job(s) failed: {lines[-1]}")
                for r in group:
                    r["error"] = error
            finally:
                for r in group:
                    r["done"].set()

    def _submit_group(self, group: list) -> None:
        token = uuid.uuid4().hex[:12]
        # submitit requeues a job out of time up to `retries` times (its countdown of time-outs)
        executor = QueueExecutor(folder=self.folder, max_num_timeout=self.retries)
        params = dict(group[0]["params"])
        params["additional_parameters"] = {**params["additional_parameters"], "comment": COMMENT + token}
        params["job_name"] = f"{self.prefix}-{group[0]['name']}" if len(group) == 1 else f"{self.prefix}-array"
        if len(group) > 1:
            params["array_parallelism"] = self.max_jobs
        executor.update_parameters(**params)
        for i, r in enumerate(group):
            r["before"](token, i)
        if len(group) == 1:
            jobs = [executor.submit(group[0]["job"])]
        else:
            with executor.batch():
                jobs = [executor.submit(r["job"]) for r in group]
        for r, j in zip(group, jobs):
            r["job_id"] = j.job_id


def find(token: str, index: int) -> Optional[str]:
    """The id of the job submitted with this token (task `index` of an array) that the
    controller still lists; '' when it lists none; None when squeue could not say."""
    try:
        proc = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%k"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        job_id, _, comment = line.partition("|")
        task = job_id.partition("_")[2]
        if comment == COMMENT + token and (task == str(index) or (not task and index == 0)):
            return job_id
    return ""


@dataclass
class SlurmOptions:
    """What every job of a study asks Slurm for; from the preset's `slurm:` and --slurm KEY=VALUE."""

    partition: str = ""
    account: str = ""
    time: str = "04:00:00"  # a run of the default preset takes minutes; the paper preset's longest, hours
    cpus_per_task: int = 0  # 0: the runs' intra_op_threads
    gpus_per_task: int = 0
    max_jobs: int = 64  # jobs queued or running at once
    retries: int = 2  # submissions again after the scheduler ended a run's job
    poll_seconds: float = 10.0
    sbatch: list = field(default_factory=list)  # extra #SBATCH lines, e.g. ["--qos=short"]

    @classmethod
    def parse(cls, preset: Optional[dict], overrides: list) -> "SlurmOptions":
        """The options of the preset, then `KEY=VALUE` overrides; UserError names a bad key or value."""
        values = dict(preset or {})
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise UserError(f"--slurm {item!r}: expected KEY=VALUE, e.g. partition=short")
            values[key.strip()] = [*values.get("sbatch", []), value] if key.strip() == "sbatch" else value
        known = cls.__dataclass_fields__
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UserError(f"slurm: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
        options = cls()
        for key, value in values.items():
            default = getattr(options, key)
            try:
                value = [str(v) for v in value] if isinstance(default, list) else type(default)(value)
            except (TypeError, ValueError):
                raise UserError(f"slurm: {key} must be {type(default).__name__}, got {value!r}") from None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise UserError(f"slurm: {key} must be >= 0, got {value!r}")
            setattr(options, key, value)
        time_hours(options.time)  # a time Slurm would refuse: said now, before anything
        odd = [o for o in options.sbatch if not re.fullmatch(r"--[A-Za-z][\w-]*(=.*)?", o)]
        if odd:  # submitit writes each as `#SBATCH --key=value`
            raise UserError(f"slurm: sbatch options are given as --key=value or --flag, got {odd[0]!r}")
        return options

    def resources(self, cpus: int) -> list:
        """What a job of `cpus` CPUs asks for, as sbatch options."""
        return (
            [f"--partition={self.partition}"] * bool(self.partition)
            + [f"--account={self.account}"] * bool(self.account)
            + [f"--time={self.time}", "--ntasks=1", f"--cpus-per-task={max(1, cpus)}"]
            + [f"--gpus-per-task={self.gpus_per_task}"] * bool(self.gpus_per_task)
            + list(self.sbatch)
        )


def time_hours(text: str) -> float:
    """Hours of a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; UNLIMITED:
    inf); UserError for anything else."""
    if str(text).upper() in ("UNLIMITED", "INFINITE"):
        return float("inf")
    days, dash, rest = str(text).partition("-")
    if not dash:
        days, rest = "0", days
    parts = rest.split(":")
    try:
        numbers = [int(x) for x in [days, *parts]]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < 0 or len(parts) > 3 or (dash and not 1 <= len(parts) <= 3):
        raise UserError(f"slurm: time must be a Slurm time limit such as 04:00:00 or 1-00:00:00, got {text!r}")
    d = numbers[0]
    if dash:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, sec = (numbers[1:] + [0, 0])[:3]
    elif len(parts) == 3:  # HH:MM:SS
        h, m, sec = numbers[1:]
    else:  # MM, MM:SS
        h, (m, sec) = 0, (numbers[1:] + [0])[:2]
    hours = d * 24 + h + m / 60 + sec / 3600
    if hours <= 0:
        raise UserError(f"slurm: time must be more than zero, got {text!r}")
    return hours


def clients_unavailable(options: SlurmOptions, cpus: int) -> Optional[str]:
    """None when this host can run the study's jobs: `sbatch` and `squeue` on PATH, the
    controller answering, and a job with the study's options accepted (`sbatch --test-only`,
    which submits nothing); else why not, in one line."""
    import shutil

    missing = [c for c in ("sbatch", "squeue") if shutil.which(c) is None]
    if missing:
        return (
            f"{' and '.join(f'`{c}`' for c in missing)} not found on PATH; run the study on a Slurm login node "
            f"(docs/cluster.md), or without --executor slurm to train here"
        )
    if shutil.which("srun") is None:
        return "`srun` not found on PATH (submitit starts each job's run with it); run the study on a Slurm login node"
    try:
        queue = subprocess.run(["squeue", "-h", "-o", "%i", "-j", "1"], capture_output=True, text=True, timeout=60)
        if queue.returncode != 0 and "Invalid job id" not in queue.stderr:
            return f"`squeue` does not answer: {_last_line(queue.stderr or queue.stdout)}"
        test = subprocess.run(
            ["sbatch", "--test-only", *options.resources(cpus), "--wrap", "true"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired as e:
        return f"`{e.cmd[0]}` did not answer within {e.timeout:.0f} s; is slurmctld up?"
    if test.returncode != 0:
        return (
            f"Slurm refuses a job with the study's options "
            f"({' '.join(options.resources(cpus))}): {_last_line(test.stderr or test.stdout)}"
        )
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"
