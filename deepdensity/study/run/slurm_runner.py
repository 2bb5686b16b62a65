"""The study's runs as Slurm jobs: `deepdensity repro --executor slurm`, and the Slurm lines of
its plan (`plan_lines`).

Each run (one cell, one seed) is one batch job that trains into its own run folder on the
shared file system, exactly the command the local executor runs. The jobs go through
submitit (training/slurm_jobs.py): it submits them (the runs that become ready together as one
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

from deepdensity.scaling import policies
from deepdensity.study.run.runner import StudyRunner
from deepdensity.training.slurm_jobs import (COMMENT, find, job_parameters, LEFT, LIVE, log_of, log_path, QueueJob,
                                             result_of, sbatch_text, SlurmOptions, Submitter, time_hours, TrainJob)
from deepdensity.utils.errors import StudyError
from deepdensity.utils.files import read_json_object, write_atomic

EXIT_SIGTERM = 143          # the job's run ended by SIGTERM: the scheduler's doing (scancel, preemption)
# How long squeue may fail in a row (a controller restarting) before the driver gives up waiting.
SQUEUE_PATIENCE_S = 600


class SlurmRunner(StudyRunner):
    """StudyRunner whose runs are Slurm batch jobs (submitit, training/slurm_jobs.py) instead of
    local subprocesses."""

    def __init__(self, root: Path, train_yaml: Path, runner: Optional[str], options: SlurmOptions,
                 threads: int, study_name: str, say=print, submitter: Optional[Submitter] = None):
        super().__init__(root, train_yaml, runner, parallel=options.max_jobs, say=say)
        self.options, self.threads, self.study_name = options, threads, study_name
        self.jobs = root / ".slurm"
        self._stopping = threading.Event()
        self.submitter = submitter or Submitter(self.jobs, f"dd-{study_name}", options.retries, options.max_jobs)
        QueueJob.watcher._delay_s = options.poll_seconds

    def _new(self, runner: Optional[str], parallel: int) -> "SlurmRunner":
        options = dataclasses.replace(self.options, max_jobs=parallel)
        return SlurmRunner(self.root, self.train_yaml, runner, options, self.threads, self.study_name, self.say,
                           self.submitter)

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

    def _submit(self, cmd: list, name: str, cpus: int, attempt: int) -> str:
        self.jobs.mkdir(parents=True, exist_ok=True)
        path = self.jobs / f"{name}.json"
        jobs = (read_json_object(path) or {}).get("jobs", [])

        def before(token: str, index: int) -> None:           # written before sbatch
            write_atomic(path, json.dumps({"attempts": attempt - 1, "jobs": jobs, "command": cmd,
                                           "submitting": {"token": token, "index": index, "attempt": attempt}}))
        params = job_parameters(self.options, cpus, time_hours(self.options.time))
        job_id = self.submitter.submit(name, TrainJob(cmd, self._job_env()), params, before)
        self._write_record(name, job_id, attempt, jobs, cmd)
        self.say(f"  {name}: submitted as Slurm job {job_id}" + (f" (attempt {attempt})" if attempt > 1 else ""))
        return job_id

    def _job_env(self) -> dict:
        return {"TF_CPP_MIN_LOG_LEVEL": "2", **{k: str(v) for k, v in self.env_extra.items()}}

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


def plan_lines(name: str, study, options: SlurmOptions, runs: Path, runner: Optional[str], no_train: bool,
               unavailable: Optional[str], earlier: Optional[dict], missing: Optional[int] = None) -> list:
    """What `repro --executor slurm` will submit, for the plan (and --dry-run): where each stage
    runs, the jobs (how many, how large, their script), what they may cost, and whether this
    host can submit them. `missing`: the count of the plan's "missing runs" line (None where it
    has none), which the jobs and their cost are given for first. Submits nothing and writes
    nothing."""
    from deepdensity.study.plan.study_plan import run_counts
    threads = study.runs.intra_op_threads
    jobs = SlurmRunner(runs, runs / "train.yaml", runner or None, options, threads, name)
    here = ["the data set"]
    if not runner and no_train:
        here.append("the clock (timing.json: held from an earlier invocation with --no-train)")
    if study.filter_modes:
        here.append("the data filter's features of the first sequential run")
    lines = ["  Slurm: on this host, not as jobs: " + ", ".join(here) + "; and the driver itself, which "
             "submits and follows the jobs (squeue every "
             f"{options.poll_seconds:g} s) and writes the reports"]
    if no_train:
        return lines + ["  Slurm jobs: none (--no-train trains nothing)"]
    fewest, most = run_counts(study, bool(runner))
    real = [] if runner else list(study.real_strong)
    per_run = jobs.cpus(1)
    launched = [(n, jobs.sibling("horovodrun -np {n}", 1).cpus(n)) for n in real]
    counted = f"{fewest}" + (f" to {most}" if most > fewest else "")
    lines.append(f"  Slurm jobs: {_of_missing(missing)}{counted} runs{' and the lr search' if study.base_lr == 'edge' else ''}, "
                 f"one batch job each unless the ledger or the runs folder holds it already, submitted through submitit "
                 f"(the runs that become ready together as one job array); up to "
                 f"{options.max_jobs} queued or running at once; each {options.time} at most, "
                 + (f"{per_run} CPU(s)" if not runner else f"{jobs.cpus(1)} CPU(s) per worker under --runner")
                 + (f", {options.gpus_per_task} GPU(s)" if options.gpus_per_task else "")
                 + (f", partition {options.partition}" if options.partition else ", the default partition")
                 + (f", account {options.account}" if options.account else "")
                 + ("; strong scaling for real: horovodrun -np " + ", ".join(str(n) for n, _ in launched)
                    + " inside one job each, on one node (" + ", ".join(f"{c}" for _, c in launched) + " CPUs)"
                    if launched else "")
                 + f"; a job near its time limit checkpoints and is requeued under its id, and a job the scheduler "
                 f"ends is submitted again from its checkpoint, each up to {options.retries} time(s)")
    clock, clock_cpus = _clock_job(name, jobs, options, runs)      # with or without --runner (run_study)
    hours = time_hours(options.time)
    if runner:
        reserved, how = most * hours * jobs.cpus(max(study.workers)), f"at {jobs.cpus(max(study.workers))} CPUs a job"
    else:
        reserved = ((most - len(launched)) * per_run + sum(c for _, c in launched)) * hours
        how = f"{per_run} CPU(s) each" + ("; the real strong-scaling jobs " + " and ".join(str(c) for _, c in launched)
                                          if launched else "")
    reserved, how = reserved + clock_cpus * hours, how + (f"; the clock's job {clock_cpus}" if clock_cpus else "")
    for_missing = "" if missing is None or hours == float("inf") else _missing_cost(missing, per_run * hours)
    cost = (f"  Slurm cost: {for_missing}at most {reserved:.0f} CPU-hours reserved ({most + bool(clock_cpus)} jobs at their "
            f"{options.time} limit, {how}); a job ends with its run, most far sooner" if hours != float("inf") else
            "  Slurm cost: no bound (time UNLIMITED)")
    lines += clock + [cost + _last_study(earlier, per_run)]
    return lines + _example_script(jobs, study) + [
        "  Slurm here: " + (f"no, {unavailable}; the study would refuse to start on this host" if unavailable
                            else "sbatch and squeue answer, and Slurm accepts a job with these options "
                                 "(sbatch --test-only, nothing submitted)")]


def _last_study(earlier: Optional[dict], per_run: int) -> str:
    """The cost line's end: what the last study of this preset took, where its record says."""
    try:
        minutes = earlier["provenance"]["runs_minutes"]
    except (KeyError, TypeError):
        return ""
    return (f"; the last study of this preset: its runs' own clocks add up to {minutes} min, about "
            f"{minutes / 60 * per_run:.1f} CPU-hours at {per_run} CPU(s) a run")


def _of_missing(missing: Optional[int]) -> str:
    """The jobs line's start: the plan's missing runs (one count with its line), then the study's."""
    if missing is None:
        return ""
    if missing:
        return f"the {missing} missing run(s) above, and any run not counted there that the ledger lacks, of the study's "
    return "none of the missing runs above (there are none); only a run not counted there that the ledger lacks, of the study's "


def _missing_cost(missing: int, cpu_hours_a_run: float) -> str:
    """The cost line's start: the plan's missing runs at their time limit, then every run's."""
    if missing:
        return f"the {missing} missing run(s) above: at most {missing * cpu_hours_a_run:.0f} CPU-hours reserved; every run of the study: "
    return "the missing runs above: none, nothing reserved for them; every run of the study: "


def _clock_job(name: str, jobs: "SlurmRunner", options: SlurmOptions, runs: Path) -> tuple:
    """([the plan's line for the clock's job], its CPUs): the first of the study's jobs, none
    (0 CPUs) when the runs folder holds this clock's timing.json."""
    from deepdensity.study.plan.study_plan import CLOCK_MINUTES
    from deepdensity.study.run.timing import clock_cpus, CLOCK_JOB, CLOCK_PROCESSES, current_timing
    if current_timing(runs) is not None:
        return [f"  Slurm clock job: none, {runs / 'timing.json'} holds this clock (the study submits nothing for it)"], 0
    cpus = clock_cpus(options, jobs.threads)
    return [f"  Slurm clock job: the clock (timing.json: one-process epochs and horovodrun -np 2 and "
            f"{CLOCK_PROCESSES}, about {CLOCK_MINUTES[0]}-{CLOCK_MINUTES[1]} min) as one batch job "
            f"dd-{name}-{CLOCK_JOB} on one node, {cpus} CPUs, {options.time} at most, submitted first "
            f"and waited for before any run's job; it writes timing.json into {runs}, and a driver started again "
            f"attaches to it, never submits it twice"], cpus


def _example_script(jobs: "SlurmRunner", study) -> list:
    """The plan's lines showing one job's script, for the first sequential run."""
    example = f"seq-s{study.sequential_seeds()[0]}"
    cmd = jobs.train_command(example, policies.STRONG, 1, {}, resume=False)
    script = jobs.batch_script(example, 1)
    return ([f"  Slurm job script: submitit's, {jobs.jobs}/JOBID_submission.sh; for {example}:"]
            + [f"      {line}" for line in script.rstrip("\n").splitlines() if line]
            + [f"  Slurm job's run (submitit's {jobs.jobs}/JOBID_submitted.pkl): {shlex.join(cmd)} --set ... "
               f"(the run's settings: lr, target, cap, seed)"])
