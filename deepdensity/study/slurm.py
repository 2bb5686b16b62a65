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
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.preset import StudyError
from deepdensity.study.runner import StudyRunner
from deepdensity.study.slurm_jobs import (COMMENT, LEFT, LIVE, QueueJob, Submitter, TrainJob, find, job_parameters,
                                          log_of, log_path, result_of, sbatch_text)
from deepdensity.utils.errors import shell_word
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


# scripts/slurm/train.sbatch's own defaults: an option equal to them is not repeated
SBATCH_SCRIPT = "scripts/slurm/train.sbatch"
SBATCH_JOB_NAME = "deepdensity"
SBATCH_OUTPUT = "slurm-%j.out"
# The knobs of train.sbatch read from the environment (docs/cluster.md): a resubmission sets
# them as the job had them.
SBATCH_ENV = ("PYTHON", "HOROVOD_ARGS", "REQUEUE")
# Fields of `scontrol show job` that take their whole line (their values may hold spaces).
_WHOLE_LINE = ("Command", "WorkDir", "Comment", "AdminComment", "SystemComment", "StdErr", "StdIn", "StdOut")
_UNSET = ("", "(null)", "N/A", "None", "*")


def parse_show_job(text: str) -> dict:
    """`scontrol show job ID` (several lines, not -o) as {field: value}."""
    fields = {}
    for line in text.splitlines():
        line = line.strip()
        key, sep, value = line.partition("=")
        if sep and key in _WHOLE_LINE:
            fields[key] = value.rstrip()
        elif line.startswith("JobId=") and " JobName=" in line:     # a job name may hold spaces
            head, _, name = line.partition(" JobName=")
            fields["JobId"], fields["JobName"] = head.split()[0].partition("=")[2], name
        else:
            for token in line.split():
                k, s, v = token.partition("=")
                if s:
                    fields.setdefault(k, v)
    return fields


def _fields_from_env(env) -> dict:
    """What the job's environment says of its submission, when scontrol cannot (no time limit)."""
    names = {"Partition": "SLURM_JOB_PARTITION", "Account": "SLURM_JOB_ACCOUNT", "QOS": "SLURM_JOB_QOS",
             "NumNodes": "SLURM_JOB_NUM_NODES", "NumTasks": "SLURM_NTASKS", "CPUs/Task": "SLURM_CPUS_PER_TASK",
             "JobName": "SLURM_JOB_NAME", "JobId": "SLURM_JOB_ID"}
    fields = {k: env[v] for k, v in names.items() if env.get(v)}
    if env.get("SLURM_NTASKS_PER_NODE"):
        fields["NtasksPerN:B:S:C"] = f"{env['SLURM_NTASKS_PER_NODE']}:0:*:*"
    return fields


def submitted_script(command: str, args: list, submit_dir: str) -> str:
    """The batch script's path as submitted, from the job's Command= (the script's path as
    sbatch resolved it, then its arguments joined by spaces); a relative one from the folder
    sbatch ran in. '' when it cannot be told."""
    joined = " ".join(args)
    if joined and command.endswith(" " + joined):
        path = command[: -len(joined) - 1]
    elif not joined or Path(command).is_file():
        path = command
    else:
        path = ""
    if path and not os.path.isabs(path) and submit_dir:
        path = os.path.join(submit_dir, path)
    return path


def resubmit_command(job: dict, args: list, env) -> str:
    """The `sbatch` command that submits train.sbatch again as this job was submitted: its
    script by the path the user gave (not Slurm's spool copy, which `$0` names inside the
    job), every resource option the job has (`scontrol show job`: partition, account, QoS, time,
    nodes, tasks, CPUs, memory, GPUs, constraints, node lists, output files, ...), its working
    folder, and the script's environment knobs. train.py adds its own arguments after it."""
    job_id = job.get("JobId") or env.get("SLURM_JOB_ID", "")
    submit_dir = env.get("SLURM_SUBMIT_DIR", "")
    script = submitted_script(job.get("Command", ""), args, submit_dir)
    if not script or not Path(script).is_file() or Path(script).name == "slurm_script":
        fallback = Path(submit_dir or ".") / SBATCH_SCRIPT
        script = str(fallback.resolve()) if fallback.is_file() else ""
    if not script:
        raise StudyError(f"cannot tell the path job {job_id} was submitted with (Command={job.get('Command', '')!r})")

    def value(key: str) -> str:
        v = job.get(key, "")
        return "" if v in _UNSET else v

    opts = _resource_options(value)

    def add(flag: str, v: str) -> None:
        if v:
            opts.append(f"{flag}={v}")
    work_dir = value("WorkDir") or submit_dir
    # output files: the job's, its id back to %j (the next job writes its own); the script's
    # default (slurm-%j.out in the working folder) is left to the script
    out, err = value("StdOut"), value("StdErr")
    default_out = os.path.join(work_dir, SBATCH_OUTPUT.replace("%j", job_id)) if job_id else ""
    as_pattern = (lambda path: re.sub(rf"(?<![0-9]){job_id}(?![0-9])", "%j", path)) if job_id else str  # noqa: E731
    if out and out != default_out:
        add("--output", as_pattern(out))
    if err and err != out:
        add("--error", as_pattern(err))
    if value("StdIn") not in ("", "/dev/null"):
        add("--input", value("StdIn"))
    add("--chdir", work_dir)       # train.py is relative to it: the command works pasted anywhere
    knobs = [f"{k}={shell_word(env[k])}" for k in SBATCH_ENV if env.get(k)]
    return " ".join([*knobs, "sbatch", *(shell_word(o) for o in opts), shell_word(script)])


def _resource_options(value) -> list:
    """The job's resource options as sbatch flags, from `value(key)` of `scontrol show job`."""
    opts = []

    def add(flag: str, v: str) -> None:
        if v:
            opts.append(f"{flag}={v}")
    for flag, key in (("--partition", "Partition"), ("--account", "Account"), ("--qos", "QOS"),
                      ("--reservation", "Reservation"), ("--time", "TimeLimit"), ("--time-min", "TimeMin"),
                      ("--nodes", "NumNodes"), ("--ntasks", "NumTasks")):
        add(flag, value(key))
    per_node = value("NtasksPerN:B:S:C").split(":")[0]
    add("--ntasks-per-node", per_node if per_node not in ("", "0") else "")
    cpus = value("CPUs/Task")
    add("--cpus-per-task", cpus if cpus not in ("", "1") else "")
    for flag, key in (("--mem", "MinMemoryNode"), ("--mem-per-cpu", "MinMemoryCPU"), ("--tmp", "MinTmpDiskNode")):
        add(flag, value(key) if value(key) not in ("0", "0M") else "")
    for flag, key in (("--gres", "TresPerNode"), ("--gpus", "TresPerJob"), ("--gpus-per-task", "TresPerTask"),
                      ("--gpus-per-socket", "TresPerSocket"), ("--cpus-per-gpu", "CpusPerTres"),
                      ("--mem-per-gpu", "MemPerTres")):
        add(flag, _tres(value(key), gres=flag == "--gres"))
    for flag, key in (("--constraint", "Features"), ("--nodelist", "ReqNodeList"), ("--exclude", "ExcNodeList"),
                      ("--licenses", "Licenses"), ("--network", "Network"), ("--comment", "Comment")):
        add(flag, value(key))
    if value("MailType") not in ("", "NONE"):
        add("--mail-type", value("MailType"))
        add("--mail-user", value("MailUser"))
    add("--nice", value("Nice") if value("Nice") not in ("", "0") else "")
    opts += ["--contiguous"] * (value("Contiguous") == "1") + ["--no-requeue"] * (value("Requeue") == "0")
    opts += {"NO": ["--exclusive"], "USER": ["--exclusive=user"], "MCS": ["--exclusive=mcs"],
             "YES": ["--oversubscribe"]}.get(value("OverSubscribe"), [])
    add("--job-name", value("JobName") if value("JobName") != SBATCH_JOB_NAME else "")
    return opts


def _tres(value: str, gres: bool) -> str:
    """A TRES request as scontrol shows it (`gres:gpu:2`, `gres/gpu:a100:2`, several comma-
    separated) as sbatch takes it: `gpu:2` for --gres, and for --gpus*, the GPU part alone."""
    parts = []
    for item in filter(None, value.split(",")):
        item = item.split(":", 1)[1] if item.startswith("gres:") else item.split("/", 1)[1] \
            if item.startswith("gres/") else item
        if gres:
            parts.append(item)
        elif item.startswith("gpu:"):
            parts.append(item[len("gpu:"):])
    return ",".join(parts)


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


def plan_lines(name: str, study, options: SlurmOptions, runs: Path, runner: Optional[str], no_train: bool,
               unavailable: Optional[str], earlier: Optional[dict]) -> list:
    """What `repro --executor slurm` will submit, for the plan (and --dry-run): where each stage
    runs, the jobs (how many, how large, their script), what they may cost, and whether this
    host can submit them. Submits nothing and writes nothing."""
    from deepdensity.study.plan import CLOCK_MINUTES, run_counts
    threads = int(study.train.get("intra_op_threads", 1))
    jobs = SlurmRunner(runs, runs / "train.yaml", runner or None, options, threads, name)
    here = ["the data set"]
    if not runner:
        here.append("the clock (timing.json: held from an earlier invocation with --no-train)" if no_train else
                    f"the clock (one-process epochs and horovodrun -np 2 and 4, about {CLOCK_MINUTES[0]}-"
                    f"{CLOCK_MINUTES[1]} min; on a cluster run the driver where that may run, or copy the "
                    f"timing.json of a study run there into {runs})")
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
    lines.append(f"  Slurm jobs: {counted} runs{' and the lr search' if study.base_lr == 'edge' else ''}, one batch "
                 f"job each unless the ledger or the runs folder holds it already, submitted through submitit "
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
    hours = time_hours(options.time)
    if runner:
        reserved, how = most * hours * jobs.cpus(max(study.workers)), f"at {jobs.cpus(max(study.workers))} CPUs a job"
    else:
        reserved = ((most - len(launched)) * per_run + sum(c for _, c in launched)) * hours
        how = f"{per_run} CPU(s) each" + ("; the real strong-scaling jobs " + " and ".join(str(c) for _, c in launched)
                                          if launched else "")
    cost = (f"  Slurm cost: at most {reserved:.0f} CPU-hours reserved ({most} jobs at their {options.time} limit, "
            f"{how}); a job ends with its run, most far sooner" if hours != float("inf") else
            "  Slurm cost: no bound (time UNLIMITED)")
    try:
        minutes = earlier["provenance"]["runs_minutes"]
        cost += (f"; the last study of this preset: its runs' own clocks add up to {minutes} min, about "
                 f"{minutes / 60 * per_run:.1f} CPU-hours at {per_run} CPU(s) a run")
    except (KeyError, TypeError):
        pass
    lines.append(cost)
    return lines + _example_script(jobs, study) + [
        "  Slurm here: " + (f"no, {unavailable}; the study would refuse to start on this host" if unavailable
                            else "sbatch and squeue answer, and Slurm accepts a job with these options "
                                 "(sbatch --test-only, nothing submitted)")]


def _example_script(jobs: "SlurmRunner", study) -> list:
    """The plan's lines showing one job's script, for the first sequential run."""
    example = f"seq-s{study.sequential_seeds()[0]}"
    cmd = jobs._command(example, policies.STRONG, 1, {}, resume=False)
    script = jobs.batch_script(example, 1)
    return ([f"  Slurm job script: submitit's, {jobs.jobs}/JOBID_submission.sh; for {example}:"]
            + [f"      {line}" for line in script.rstrip("\n").splitlines() if line]
            + [f"  Slurm job's run (submitit's {jobs.jobs}/JOBID_submitted.pkl): {shlex.join(cmd)} --set ... "
               f"(the run's settings: lr, target, cap, seed)"])


def _read_record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _main(argv: list) -> int:
    """`python -m deepdensity.study.slurm resubmit-command [--] ARGS...`, inside a job of
    scripts/slurm/train.sbatch (ARGS: the script's arguments as submitted): the command that
    submits it again, on stdout. The job's record comes from `scontrol show job`, else
    (scontrol failing) from the job's environment, which has no time limit: said on stderr."""
    if argv[:1] != ["resubmit-command"]:
        print("usage: python -m deepdensity.study.slurm resubmit-command [--] ARGS...", file=sys.stderr)
        return 2
    args = argv[1:]
    args = args[1:] if args[:1] == ["--"] else args
    env = os.environ
    job = {}
    if env.get("SLURM_JOB_ID"):
        try:
            proc = subprocess.run(["scontrol", "show", "job", env["SLURM_JOB_ID"]], capture_output=True, text=True,
                                  timeout=60)
            job = parse_show_job(proc.stdout) if proc.returncode == 0 else {}
        except (OSError, subprocess.TimeoutExpired):
            job = {}
    if not job.get("Command"):
        print(f"deepdensity: warning: `scontrol show job {env.get('SLURM_JOB_ID', '')}` did not answer; the "
              f"resubmit command carries the job's partition, account, nodes and tasks from its environment, "
              f"not its time limit or other options", file=sys.stderr)
        job = {**_fields_from_env(env), "WorkDir": os.getcwd(), **job}     # the job starts in its working folder
    try:
        print(resubmit_command(job, args, env))
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
