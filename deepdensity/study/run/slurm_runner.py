"""The study's runs as Slurm jobs: `deepdensity repro --executor slurm`, and the Slurm lines of
its plan (`plan_lines`).

Each run (one cell, one seed) is one batch job that trains into its own run folder on the
shared file system, exactly the command the local executor runs. The jobs go through
submitit (launch/slurm_jobs.py): it submits them (the runs that become ready together as one
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
import shlex
import threading
import time
from pathlib import Path
from typing import Optional

from deepdensity.config import Config
from deepdensity.launch.slurm_jobs import (
    COMMENT,
    SlurmOptions,
    Submitter,
    TrainJob,
    find,
    job_parameters,
    log_of,
    log_path,
    result_of,
    sbatch_text,
    time_hours,
)
from deepdensity.launch.slurm_queue import LEFT, LIVE, QueueJob
from deepdensity.scaling import policies
from deepdensity.study.core.request import RunRequest
from deepdensity.study.plan.study_plan import CLOCK_MINUTES, run_counts
from deepdensity.study.run.runner import StudyRunner
from deepdensity.study.run.timing import CLOCK_JOB, CLOCK_PROCESSES, clock_cpus, current_timing
from deepdensity.utils.errors import StudyError
from deepdensity.utils.files import read_json_object, write_atomic
from deepdensity.utils.templates import fill

EXIT_SIGTERM = 143  # the job's run ended by SIGTERM: the scheduler's doing (scancel, preemption)
# How long squeue may fail in a row (a controller restarting) before the driver gives up waiting.
SQUEUE_PATIENCE_S = 600


class SlurmRunner(StudyRunner):
    """StudyRunner whose runs are Slurm batch jobs (submitit, launch/slurm_jobs.py) instead of
    local subprocesses."""

    def __init__(
        self,
        root: Path,
        train_yaml: Path,
        runner: Optional[str],
        options: SlurmOptions,
        threads: int,
        study_name: str,
        say=print,
        submitter: Optional[Submitter] = None,
    ):
        super().__init__(root, train_yaml, runner, parallel=options.max_jobs, say=say)
        self.options, self.threads, self.study_name = options, threads, study_name
        self.jobs = root / ".slurm"
        self._stopping = threading.Event()
        self.submitter = submitter or Submitter(self.jobs, f"dd-{study_name}", options.retries, options.max_jobs)
        QueueJob.watcher._delay_s = options.poll_seconds

    def _new(self, runner: Optional[str], parallel: int) -> "SlurmRunner":
        options = dataclasses.replace(self.options, max_jobs=parallel)
        return SlurmRunner(
            self.root, self.train_yaml, runner, options, self.threads, self.study_name, self.say, self.submitter
        )

    runs_as_jobs = True

    def _train(self, cmd: list, name: str = "", workers: int = 1) -> tuple:
        return self.job(cmd, name, self.cpus(workers))

    def job(self, cmd: list, name: str, cpus: int) -> tuple:
        """(exit status, log) of `cmd` run as the Slurm job `name` of `cpus` CPUs on one node:
        a job the last driver submitted under this name is attached to, never submitted again;
        one the scheduler ended is submitted again (`cmd --resume`), up to `retries` times."""
        record = read_json_object(self.jobs / f"{name}.json") or {}
        attempt, job_id = self._live_job(record, name)
        while True:
            if not job_id:
                attempt += 1
                job_id = self._submit(cmd, name, cpus, attempt)
            else:
                self.say(f"  {name}: attached to Slurm job {job_id} ({QueueJob(self.jobs, job_id).state.lower()})")
            (code, why), state = self._wait(job_id)
            log = log_of(self.jobs, job_id)
            if code is not None and code != EXIT_SIGTERM:  # finished, bad input (2) or a failed run
                return code, log
            state = state if state != LEFT else "no longer listed by the controller"
            if attempt > self.options.retries:
                raise StudyError(
                    f"run {name}: Slurm job {job_id} ended by the scheduler ({state}) on each of "
                    f"{attempt} submissions; see {log_path(self.jobs, job_id)}"
                )
            self.say(
                f"  {name}: Slurm job {job_id} was ended by the scheduler ({state}), not by the run"
                + (f" ({why})" if why else "")
                + f"; submitting it again from its checkpoint "
                f"({attempt} of {self.options.retries + 1})"
            )
            cmd = cmd if "--resume" in cmd else [*cmd, "--resume"]
            job_id = ""

    def forget(self, name: str) -> None:
        """The job `name` ended and was read (a failure, said): the next driver submits it again
        instead of reading the same end (its earlier jobs stay on record)."""
        record = read_json_object(self.jobs / f"{name}.json") or {}
        if record.get("job_id"):
            write_atomic(self.jobs / f"{name}.json", json.dumps({**record, "job_id": ""}))

    def _live_job(self, record: dict, name: str) -> tuple:
        """(submissions so far, the id of this run's job still listed by the controller, or
        ended but not yet read; else ''). A submission the last driver began finds its job by
        the token in the job's --comment."""
        pending = record.get("submitting")
        if pending:
            job_id = find(pending["token"], pending["index"])
            if job_id is None:  # never submit twice: without squeue, it cannot be known
                raise StudyError(
                    f"run {name}: squeue does not answer, so whether its job was submitted cannot be "
                    f"told; start the study again when slurmctld answers"
                )
            if job_id:
                self._write_record(name, job_id, pending["attempt"], record.get("jobs", []), record["command"])
                return pending["attempt"], job_id
            return record.get("attempts", 0), ""
        job_id = record.get("job_id", "")
        if job_id and (QueueJob(self.jobs, job_id).state != LEFT or result_of(self.jobs, job_id)[1] != "no result"):
            return record.get("attempts", 0), job_id  # queued, running, unknown for now, or ended unread
        return record.get("attempts", 0), ""

    def _write_record(self, name: str, job_id: str, attempt: int, jobs: list, cmd: list) -> None:
        write_atomic(
            self.jobs / f"{name}.json",
            json.dumps({"job_id": job_id, "attempts": attempt, "jobs": [*jobs, job_id], "command": cmd}),
        )

    def _submit(self, cmd: list, name: str, cpus: int, attempt: int) -> str:
        self.jobs.mkdir(parents=True, exist_ok=True)
        path = self.jobs / f"{name}.json"
        jobs = (read_json_object(path) or {}).get("jobs", [])

        def before(token: str, index: int) -> None:  # written before sbatch
            write_atomic(
                path,
                json.dumps(
                    {
                        "attempts": attempt - 1,
                        "jobs": jobs,
                        "command": cmd,
                        "submitting": {"token": token, "index": index, "attempt": attempt},
                    }
                ),
            )

        params = job_parameters(self.options, cpus, time_hours(self.options.time))
        job_id = self.submitter.submit(name, TrainJob(cmd, self._job_env()), params, before)
        self._write_record(name, job_id, attempt, jobs, cmd)
        self.say(f"  {name}: submitted as Slurm job {job_id}" + (f" (attempt {attempt})" if attempt > 1 else ""))
        return job_id

    def _job_env(self) -> dict:
        return {"TF_CPP_MIN_LOG_LEVEL": "2", **{k: str(v) for k, v in self.run_env().items()}}

    def batch_script(self, name: str, workers: int, cpus: Optional[int] = None) -> str:
        """The batch script submitit submits for this run's job (alone; in an array, with
        --array and the array's name); `cpus`: a job's other than a run's of `workers`."""
        params = job_parameters(self.options, cpus or self.cpus(workers), time_hours(self.options.time))
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
                raise StudyError(
                    f"squeue has not answered about job {job_id} for {SQUEUE_PATIENCE_S / 60:.0f} "
                    f"min; is slurmctld up? The job goes on; start the study again to reattach"
                )
            if self._stopping.wait(self.options.poll_seconds):
                raise KeyboardInterrupt
        result = result_of(self.jobs, job_id)
        deadline = time.monotonic() + 15  # a shared file system may show the result late
        while state == "COMPLETED" and result[0] is None and time.monotonic() < deadline:
            time.sleep(1)
            result = result_of(self.jobs, job_id)
        return result, state

    def stop(self, grace_s: float = 0.0) -> None:
        """The driver stops following its jobs; the jobs go on, and the next driver reattaches."""
        self._stopping.set()
        self.say(f"the Slurm jobs of this study go on; start the study again to follow them ({self.jobs})")


def plan_lines(
    name: str,
    study,
    options: SlurmOptions,
    runs: Path,
    runner: Optional[str],
    no_train: bool,
    unavailable: Optional[str],
    earlier: Optional[dict],
    missing: Optional[int] = None,
) -> list:
    """What `repro --executor slurm` will submit, for the plan (and --dry-run; templates/slurm_plan.txt):
    where each stage runs, the jobs (how many, how large, their script), what they may cost, and
    whether this host can submit them. `missing`: the count of the plan's "missing runs" line (None
    where it has none), which the jobs and their cost are given for first. Submits nothing and
    writes nothing."""
    jobs = SlurmRunner(runs, runs / "train.yaml", runner or None, options, study.runs.intra_op_threads, name)
    fewest, most = run_counts(study, bool(runner))
    launched = [] if runner else [(n, jobs.sibling("horovodrun -np {n}", 1).cpus(n)) for n in study.real_strong]
    clock = 0 if current_timing(runs) is not None else clock_cpus(options, jobs.threads)
    hours = time_hours(options.time)
    reserved, how = _reserved(jobs, study, runner, most, launched, clock, hours)
    example = f"seq-s{study.sequential_seeds()[0]}"
    try:
        last_minutes = earlier["provenance"]["runs_minutes"]
    except (KeyError, TypeError):
        last_minutes = None
    text = fill(
        "slurm_plan.txt",
        name=name,
        study=study,
        options=options,
        runs=runs,
        runner=runner,
        no_train=no_train,
        unavailable=unavailable,
        missing=missing,
        fewest=fewest,
        most=most,
        per_run=jobs.cpus(1),
        launched=launched,
        clock_cpus=clock,
        clock_job=CLOCK_JOB,
        clock_processes=CLOCK_PROCESSES,
        clock_minutes=CLOCK_MINUTES,
        hours=hours,
        bounded=hours != float("inf"),
        reserved=reserved,
        how=how,
        last_minutes=last_minutes,
        jobs=jobs,
        example=example,
        script=[line for line in jobs.batch_script(example, 1).splitlines() if line],
        command=shlex.join(jobs.train_command(RunRequest(example, policies.STRONG, 1, Config(), ()), resume=False)),
    )
    return text.splitlines()


def _reserved(
    jobs: SlurmRunner, study, runner: Optional[str], most: int, launched: list, clock: int, hours: float
) -> tuple:
    """(the CPU-hours the study's jobs reserve at their time limit, how they add up)."""
    if runner:
        reserved, how = most * hours * jobs.cpus(max(study.workers)), f"at {jobs.cpus(max(study.workers))} CPUs a job"
    else:
        reserved = ((most - len(launched)) * jobs.cpus(1) + sum(c for _, c in launched)) * hours
        how = f"{jobs.cpus(1)} CPU(s) each" + (
            "; the real strong-scaling jobs " + " and ".join(str(c) for _, c in launched) if launched else ""
        )
    return reserved + clock * hours, how + (f"; the clock's job {clock}" if clock else "")
