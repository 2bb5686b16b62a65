"""The Slurm lines of a study's plan (`repro --executor slurm`, and its --dry-run): where
each stage runs, the jobs (how many, how large, their script), what they may cost, and whether
this host can submit them. Submits nothing and writes nothing."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.run.slurm_options import SlurmOptions, time_hours
from deepdensity.study.run.slurm_runner import SlurmRunner


def plan_lines(name: str, study, options: SlurmOptions, runs: Path, runner: Optional[str], no_train: bool,
               unavailable: Optional[str], earlier: Optional[dict], missing: Optional[int] = None) -> list:
    """What `repro --executor slurm` will submit, for the plan (and --dry-run): where each stage
    runs, the jobs (how many, how large, their script), what they may cost, and whether this
    host can submit them. `missing`: the count of the plan's "missing runs" line (None where it
    has none), which the jobs and their cost are given for first. Submits nothing and writes
    nothing."""
    from deepdensity.study.plan.study_plan import run_counts
    threads = int(study.train.get("intra_op_threads", 1))
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
    from deepdensity.study.run.clock_job import clock_cpus, CLOCK_JOB, CLOCK_PROCESSES
    from deepdensity.study.run.timing import current_timing
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
