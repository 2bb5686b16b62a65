"""The study's runs as Slurm jobs: `deepdensity repro --executor slurm`.

Each run (one cell, one seed) is one batch job that trains into its own run folder on the
shared file system, exactly the command the local executor runs. The jobs go through
submitit (study/slurm_jobs.py): it submits them (the runs that become ready together as one
job array), and requeues a job before its time limit after the run checkpoints. Job state is
read with `squeue` (submitit's own reader needs `sacct`, hence an accounting database, which
small clusters often lack), and the driver decides the next seeds by the same rules as the
local executor.

What survives the driver: RUNS/.slurm/NAME.json holds the job id of each submitted run (written
before sbatch with a token that goes into the job's --comment, and after it with the id), so a
driver started again reattaches to jobs still queued, running or requeued and submits nothing
twice; finished runs are read from their result.json as always. Interrupting the driver leaves
its jobs running.

How a job ended (its result: the run's exit status, from submitit's result file):
  exit 0                  the run finished (its result.json says how)
  exit 2                  bad input: the study stops with the run's error line
  SIGTERM (143), or no    the scheduler ended it (scancel, preemption, node failure, or out of
  result                  time more than `retries` times): reported with Slurm's state, and
                          the run is submitted again from its checkpoint, up to `retries` times
  any other exit          the run failed: the study stops with the end of its log
"""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from deepdensity.study.preset import StudyError
from deepdensity.study.runner import StudyRunner
from deepdensity.study.slurm_jobs import (COMMENT, LEFT, LIVE, QueueJob, Submitter, TrainJob, find, job_parameters,
                                          log_of, log_path, result_of, sbatch_text)
from deepdensity.utils.files import write_atomic

EXIT_SIGTERM = 143          # the job's run ended by SIGTERM: the scheduler's doing (scancel, preemption)
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
        time_hours(options.time)                     # a time Slurm would refuse: said now, before anything
        odd = [o for o in options.sbatch if not re.fullmatch(r"--[A-Za-z][\w-]*(=.*)?", o)]
        if odd:                                      # submitit writes each as `#SBATCH --key=value`
            raise StudyError(f"slurm: sbatch options are given as --key=value or --flag, got {odd[0]!r}")
        return options

    def resources(self, cpus: int) -> list:
        """What a job of `cpus` CPUs asks for, as sbatch options."""
        return ([f"--partition={self.partition}"] * bool(self.partition) + [f"--account={self.account}"] * bool(self.account)
                + [f"--time={self.time}", "--ntasks=1", f"--cpus-per-task={max(1, cpus)}"]
                + [f"--gpus-per-task={self.gpus_per_task}"] * bool(self.gpus_per_task) + list(self.sbatch))


def time_hours(text: str) -> float:
    """Hours of a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; UNLIMITED:
    inf); StudyError for anything else."""
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
        raise StudyError(f"slurm: time must be a Slurm time limit such as 04:00:00 or 1-00:00:00, got {text!r}")
    d = numbers[0]
    if dash:                                            # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, sec = (numbers[1:] + [0, 0])[:3]
    elif len(parts) == 3:                               # HH:MM:SS
        h, m, sec = numbers[1:]
    else:                                               # MM, MM:SS
        h, (m, sec) = 0, (numbers[1:] + [0])[:2]
    hours = d * 24 + h + m / 60 + sec / 3600
    if hours <= 0:
        raise StudyError(f"slurm: time must be more than zero, got {text!r}")
    return hours


def clients_unavailable(options: SlurmOptions, cpus: int) -> Optional[str]:
    """None when this host can run the study's jobs: `sbatch` and `squeue` on PATH, the
    controller answering, and a job with the study's options accepted (`sbatch --test-only`,
    which submits nothing); else why not, in one line."""
    import shutil
    missing = [c for c in ("sbatch", "squeue") if shutil.which(c) is None]
    if missing:
        return (f"{' and '.join(f'`{c}`' for c in missing)} not found on PATH; run the study on a Slurm login node "
                f"(docs/cluster.md), or without --executor slurm to train here")
    if shutil.which("srun") is None:
        return "`srun` not found on PATH (submitit starts each job's run with it); run the study on a Slurm login node"
    try:
        queue = subprocess.run(["squeue", "-h", "-o", "%i", "-j", "1"], capture_output=True, text=True, timeout=60)
        if queue.returncode != 0 and "Invalid job id" not in queue.stderr:
            return f"`squeue` does not answer: {_last_line(queue.stderr or queue.stdout)}"
        test = subprocess.run(["sbatch", "--test-only", *options.resources(cpus), "--wrap", "true"],
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        return f"`{e.cmd[0]}` did not answer within {e.timeout:.0f} s; is slurmctld up?"
    if test.returncode != 0:
        return (f"Slurm refuses a job with the study's options "
                f"({' '.join(options.resources(cpus))}): {_last_line(test.stderr or test.stdout)}")
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


class SlurmRunner(StudyRunner):
    """StudyRunner whose runs are Slurm batch jobs (submitit, study/slurm_jobs.py) instead of
    local subprocesses."""

    def __init__(self, root: Path, train_yaml: Path, runner: Optional[str], options: SlurmOptions,
                 threads: int, study_name: str, say=print, submitter: Optional[Submitter] = None):
        super().__init__(root, train_yaml, runner, parallel=options.max_jobs, say=say)
        self.options, self.threads, self.study_name = options, threads, study_name
        self.jobs = root / ".slurm"
        self._stopping = threading.Event()
        self.submitter = submitter or Submitter(self.jobs, f"dd-{study_name}", options.retries, options.max_jobs)
        QueueJob.watcher._delay_s = options.poll_seconds

    def sibling(self, runner: Optional[str], parallel: int) -> "SlurmRunner":
        options = dataclasses.replace(self.options, max_jobs=parallel)
        other = SlurmRunner(self.root, self.train_yaml, runner, options, self.threads, self.study_name, self.say,
                            self.submitter)
        other.ledger, other.may_train = self.ledger, self.may_train
        return other

    def _train(self, cmd: list, name: str = "", workers: int = 1) -> tuple:
        record = _read_record(self.jobs / f"{name}.json")
        attempt, job_id = self._live_job(record, name)
        while True:
            if not job_id:
                attempt += 1
                job_id = self._submit(cmd, name, workers, attempt)
            else:
                self.say(f"  {name}: attached to Slurm job {job_id} ({QueueJob(self.jobs, job_id).state.lower()})")
            (code, why), state = self._wait(job_id)
            log = log_of(self.jobs, job_id)
            if code is not None and code != EXIT_SIGTERM:    # finished, bad input (2) or a failed run
                return code, log
            state = state if state != LEFT else "no longer listed by the controller"
            if attempt > self.options.retries:
                raise StudyError(f"run {name}: Slurm job {job_id} ended by the scheduler ({state}) on each of "
                                 f"{attempt} submissions; see {log_path(self.jobs, job_id)}")
            self.say(f"  {name}: Slurm job {job_id} was ended by the scheduler ({state}), not by the run"
                     + (f" ({why})" if why else "") + f"; submitting it again from its checkpoint "
                     f"({attempt} of {self.options.retries + 1})")
            cmd = cmd if "--resume" in cmd else [*cmd, "--resume"]
            job_id = ""

    def _live_job(self, record: dict, name: str) -> tuple:
        """(submissions so far, the id of this run's job still listed by the controller, or
        ended but not yet read; else ''). A submission the last driver began finds its job by
        the token in the job's --comment."""
        pending = record.get("submitting")
        if pending:
            job_id = find(pending["token"], pending["index"])
            if job_id is None:      # never submit twice: without squeue, it cannot be known
                raise StudyError(f"run {name}: squeue does not answer, so whether its job was submitted cannot be "
                                 f"told; start the study again when slurmctld answers")
            if job_id:
                self._write_record(name, job_id, pending["attempt"], record.get("jobs", []), record["command"])
                return pending["attempt"], job_id
            return record.get("attempts", 0), ""
        job_id = record.get("job_id", "")
        if job_id and (QueueJob(self.jobs, job_id).state != LEFT or result_of(self.jobs, job_id)[1] != "no result"):
            return record.get("attempts", 0), job_id        # queued, running, unknown for now, or ended unread
        return record.get("attempts", 0), ""

    def _write_record(self, name: str, job_id: str, attempt: int, jobs: list, cmd: list) -> None:
        write_atomic(self.jobs / f"{name}.json", json.dumps({"job_id": job_id, "attempts": attempt,
                                                             "jobs": [*jobs, job_id], "command": cmd}))

    def _submit(self, cmd: list, name: str, workers: int, attempt: int) -> str:
        self.jobs.mkdir(parents=True, exist_ok=True)
        path = self.jobs / f"{name}.json"
        jobs = _read_record(path).get("jobs", [])

        def before(token: str, index: int) -> None:           # written before sbatch
            write_atomic(path, json.dumps({"attempts": attempt - 1, "jobs": jobs, "command": cmd,
                                           "submitting": {"token": token, "index": index, "attempt": attempt}}))
        params = job_parameters(self.options, self.cpus(workers), time_hours(self.options.time))
        job_id = self.submitter.submit(name, TrainJob(cmd, self._job_env()), params, before)
        self._write_record(name, job_id, attempt, jobs, cmd)
        self.say(f"  {name}: submitted as Slurm job {job_id}" + (f" (attempt {attempt})" if attempt > 1 else ""))
        return job_id

    def _job_env(self) -> dict:
        return {"TF_CPP_MIN_LOG_LEVEL": "2", **{k: str(v) for k, v in self.env_extra.items()}}

    def batch_script(self, name: str, workers: int) -> str:
        """The batch script submitit submits for this run's job (alone; in an array, with
        --array and the array's name)."""
        params = job_parameters(self.options, self.cpus(workers), time_hours(self.options.time))
        params["job_name"] = f"dd-{self.study_name}-{name}"
        params["additional_parameters"] = {**params["additional_parameters"], "comment": COMMENT + "TOKEN"}
        return sbatch_text(self.jobs, params)

    def cpus(self, workers: int) -> int:
        """CPUs of a run's job: the runs' threads (or cpus_per_task), times N under a launcher."""
        return max(1, self.options.cpus_per_task or self.threads) * (workers if self.runner else 1)

    def _wait(self, job_id: str) -> tuple:
        """Until the job has ended (requeued by submitit, it goes on under its id): ((its run's
        exit status or None, why), Slurm's state)."""
        watcher = QueueJob(self.jobs, job_id).watcher
        while (state := watcher.get_state(job_id)) in LIVE:
            silent = watcher.silent_since
            if silent is not None and time.monotonic() - silent > SQUEUE_PATIENCE_S:
                raise StudyError(f"squeue has not answered about job {job_id} for {SQUEUE_PATIENCE_S / 60:.0f} "
                                 f"min; is slurmctld up? The job goes on; start the study again to reattach")
            if self._stopping.wait(self.options.poll_seconds):
                raise KeyboardInterrupt
        result = result_of(self.jobs, job_id)
        deadline = time.monotonic() + 15             # a shared file system may show the result late
        while state == "COMPLETED" and result[0] is None and time.monotonic() < deadline:
            time.sleep(1)
            result = result_of(self.jobs, job_id)
        return result, state

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
