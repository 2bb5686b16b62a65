"""The study's runs as Slurm jobs: `deepdensity repro --executor slurm`.

Each run (one cell, one seed) is one batch job that trains into its own run folder on the
shared file system, exactly the command the local executor runs. The driver submits with
`sbatch`, follows jobs with `squeue` and reads how they ended from the job's own exit file and
`scontrol show job` (no accounting database needed, which small clusters often lack), and
decides the next seeds by the same rules as the local executor.

What survives the driver: RUNS/.slurm/NAME.json holds the job id of each submitted run, and
every job is named after its study and run, so a driver started again reattaches to jobs
still queued or running (found by id, else by name) and submits nothing twice; finished runs
are read from their result.json as always. Interrupting the driver leaves its jobs running.

How a job ended:
  exit 0                  the run finished (its result.json says how)
  exit 2                  bad input: the study stops with the run's error line
  SIGTERM (143), or no    the scheduler ended it (scancel, time limit, preemption, node
  exit file               failure): reported with Slurm's state, and the run is submitted
                          again from its checkpoint, up to `retries` times
  any other exit          the run failed: the study stops with the end of its log
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from deepdensity.study.preset import StudyError
from deepdensity.study.runner import StudyRunner
from deepdensity.utils.files import write_atomic

# Seconds before the time limit at which Slurm sends the job SIGTERM (sbatch --signal): time
# for the run to finish its step and checkpoint.
SIGNAL_BEFORE_END_S = 90
EXIT_SIGTERM = 143          # the job's run ended by SIGTERM: the scheduler's doing (scancel, time limit)
# How long squeue may fail in a row (a controller restarting) before the driver gives up waiting.
SQUEUE_PATIENCE_S = 600


@dataclass
class SlurmOptions:
    """What every job of a study asks Slurm for; from the preset's `slurm:` and --slurm KEY=VALUE."""
    partition: str = ""
    account: str = ""
    time: str = "04:00:00"           # a run of the default preset takes minutes; the paper preset's longest, hours
    cpus_per_task: int = 0           # 0: the runs' intra_op_threads
    gpus_per_task: int = 0
    max_jobs: int = 64               # jobs queued or running at once
    retries: int = 2                 # submissions again after the scheduler ended a run's job
    poll_seconds: float = 10.0
    sbatch: list = field(default_factory=list)   # extra #SBATCH lines, e.g. ["--qos=short"]

    @classmethod
    def parse(cls, preset: Optional[dict], overrides: list) -> "SlurmOptions":
        """The options of the preset, then `KEY=VALUE` overrides; StudyError names a bad key or value."""
        values = dict(preset or {})
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise StudyError(f"--slurm {item!r}: expected KEY=VALUE, e.g. partition=short")
            values[key.strip()] = [*values.get("sbatch", []), value] if key.strip() == "sbatch" else value
        known = cls.__dataclass_fields__
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise StudyError(f"slurm: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
        options = cls()
        for key, value in values.items():
            default = getattr(options, key)
            try:
                value = ([str(v) for v in value] if isinstance(default, list) else type(default)(value))
            except (TypeError, ValueError):
                raise StudyError(f"slurm: {key} must be {type(default).__name__}, got {value!r}") from None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise StudyError(f"slurm: {key} must be >= 0, got {value!r}")
            setattr(options, key, value)
        return options


def _slurm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """A Slurm client command (sbatch, squeue, scontrol); StudyError when it fails and must not."""
    try:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise StudyError(f"--executor slurm: `{args[0]}` is not on PATH; run the study on a Slurm login node") \
            from None
    if check and proc.returncode != 0:
        raise StudyError(f"{shlex.join(args)} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return proc


def queue_state(job_id: str) -> Optional[str]:
    """The job's state while Slurm still lists it in the queue (PENDING, RUNNING, ...), '' when
    it has left the queue, None when squeue could not say (the controller busy or restarting:
    a job must not be taken for ended, and submitted twice, because of that)."""
    proc = _slurm("squeue", "-h", "-j", job_id, "-o", "%T", check=False)
    if proc.returncode != 0:
        # squeue names a job that has left the controller's memory "Invalid job id"
        return "" if "Invalid job id" in proc.stderr else None
    return proc.stdout.strip()


def end_state(job_id: str) -> str:
    """How Slurm says a job ended (COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL, ...), while the
    controller still remembers it (MinJobAge), else 'UNKNOWN'."""
    out = _slurm("scontrol", "-o", "show", "job", job_id, check=False).stdout
    for word in out.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    return "UNKNOWN"


def job_named(name: str) -> str:
    """The id of a live job of that name (submitted by a driver that died before it saved the id)."""
    ids = _slurm("squeue", "-h", "-n", name, "-o", "%i").stdout.split()   # a failure stops: never submit twice
    return ids[0] if ids else ""


class SlurmRunner(StudyRunner):
    """StudyRunner whose runs are Slurm batch jobs instead of local subprocesses."""

    def __init__(self, root: Path, train_yaml: Path, runner: Optional[str], options: SlurmOptions,
                 threads: int, study_name: str, say=print):
        super().__init__(root, train_yaml, runner, parallel=options.max_jobs, say=say)
        self.options, self.threads, self.study_name = options, threads, study_name
        self.jobs = root / ".slurm"
        self._stopping = threading.Event()

    def sibling(self, runner: Optional[str], parallel: int) -> "SlurmRunner":
        options = dataclasses.replace(self.options, max_jobs=parallel)
        other = SlurmRunner(self.root, self.train_yaml, runner, options, self.threads, self.study_name, self.say)
        other.ledger, other.may_train = self.ledger, self.may_train
        return other

    def _train(self, cmd: list, name: str = "", workers: int = 1) -> tuple:
        record_path = self.jobs / f"{name}.json"
        record = _read_record(record_path)
        attempt = record.get("attempts", 0)
        job_id = self._live_job(record, name)
        while True:
            if not job_id:
                attempt += 1
                job_id = self._submit(cmd, name, workers, attempt)
                write_atomic(record_path, json.dumps({"job_id": job_id, "attempts": attempt, "command": cmd}))
            else:
                self.say(f"  {name}: attached to Slurm job {job_id} ({queue_state(job_id) or 'ended'})")
            code = self._wait(job_id)
            log = self._log(name, job_id)
            if code is not None and code != EXIT_SIGTERM:    # finished, bad input (2) or a failed run
                return code, log
            state = end_state(job_id)
            if attempt > self.options.retries:
                raise StudyError(f"run {name}: Slurm job {job_id} ended by the scheduler ({state}) on each of "
                                 f"{attempt} submissions; see {self.jobs}/{name}-{job_id}.log")
            self.say(f"  {name}: Slurm job {job_id} was ended by the scheduler ({state}), not by the run; "
                     f"submitting it again from its checkpoint ({attempt} of {self.options.retries + 1})")
            cmd = cmd if "--resume" in cmd else [*cmd, "--resume"]
            job_id = ""

    def _live_job(self, record: dict, name: str) -> str:
        """A job of this run still queued or running, or ended but not yet read: its id, else ''."""
        job_id = record.get("job_id", "")
        if job_id and (queue_state(job_id) != "" or self._exit_file(name, job_id).exists()):
            return job_id                        # queued, running, unknown for now, or ended unread
        return job_named(self._job_name(name))

    def _job_name(self, name: str) -> str:
        return f"dd-{self.study_name}-{name}"

    def _exit_file(self, name: str, job_id: str) -> Path:
        return self.jobs / f"{name}-{job_id}.exit"

    def _submit(self, cmd: list, name: str, workers: int, attempt: int) -> str:
        self.jobs.mkdir(parents=True, exist_ok=True)
        script = self.jobs / f"{name}.sh"
        write_atomic(script, self.batch_script(cmd, name, workers))
        job_id = _slurm("sbatch", "--parsable", str(script)).stdout.strip().split(";")[0]
        self.say(f"  {name}: submitted as Slurm job {job_id}" + (f" (attempt {attempt})" if attempt > 1 else ""))
        return job_id

    def batch_script(self, cmd: list, name: str, workers: int) -> str:
        """The job: the run's command in the background, SIGTERM passed on to it (the time limit's
        warning, scancel), and its exit status written where the driver reads it."""
        o = self.options
        cpus = (o.cpus_per_task or self.threads) * (workers if self.runner else 1)
        lines = [f"--job-name={self._job_name(name)}", f"--output={self.jobs}/{name}-%j.log", "--ntasks=1",
                 f"--cpus-per-task={cpus}", f"--time={o.time}", f"--signal=B:TERM@{SIGNAL_BEFORE_END_S}",
                 "--no-requeue", f"--chdir={Path.cwd()}"]
        lines += [f"--partition={o.partition}"] * bool(o.partition) + [f"--account={o.account}"] * bool(o.account)
        lines += [f"--gpus-per-task={o.gpus_per_task}"] * bool(o.gpus_per_task) + list(o.sbatch)
        exit_file = shlex.quote(str(self.jobs / f"{name}-"))
        return ("#!/bin/bash\n" + "".join(f"#SBATCH {line}\n" for line in lines)
                + "export TF_CPP_MIN_LOG_LEVEL=2\n"
                + "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in self.env_extra.items())
                + f"{shlex.join(cmd)} &\npid=$!\n"
                + "trap 'kill -TERM $pid 2>/dev/null' TERM INT\n"
                + "wait $pid; code=$?\n"
                + "while kill -0 $pid 2>/dev/null; do wait $pid; code=$?; done   # a trapped signal ended wait early\n"
                + f"echo $code > {exit_file}\"$SLURM_JOB_ID.exit\"\nexit $code\n")

    def _wait(self, job_id: str) -> Optional[int]:
        """Until the job has left the queue: its run's exit status, or None when it wrote none
        (killed before, or the node lost)."""
        silent_since = None
        while (state := queue_state(job_id)) != "":
            if state is None:                    # squeue failed: keep waiting, up to a point
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > SQUEUE_PATIENCE_S:
                    raise StudyError(f"squeue has not answered about job {job_id} for {SQUEUE_PATIENCE_S / 60:.0f} "
                                     f"min; is slurmctld up? The job goes on; start the study again to reattach")
            else:
                silent_since = None
            if self._stopping.wait(self.options.poll_seconds):
                raise KeyboardInterrupt
        exit_files = list(self.jobs.glob(f"*-{job_id}.exit"))
        if not exit_files:
            return None
        try:
            return int(exit_files[0].read_text().split()[0])
        except (ValueError, IndexError):
            return None

    def _log(self, name: str, job_id: str) -> str:
        try:
            return (self.jobs / f"{name}-{job_id}.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, grace_s: float = 0.0) -> None:
        """The driver stops following its jobs; the jobs go on, and the next driver reattaches."""
        self._stopping.set()
        self.say(f"the Slurm jobs of this study go on; start the study again to follow them ({self.jobs})")


def _read_record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
