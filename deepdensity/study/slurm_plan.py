"""The Slurm lines of a study's plan (`repro --executor slurm`, and its --dry-run): where
each stage runs, the jobs (how many, how large, their script), what they may cost, and whether
this host can submit them. Submits nothing and writes nothing."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.slurm_options import SlurmOptions, time_hours
from deepdensity.study.slurm_runner import SlurmRunner


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
    cmd = jobs.train_command(example, policies.STRONG, 1, {}, resume=False)
    script = jobs.batch_script(example, 1)
    return ([f"  Slurm job script: submitit's, {jobs.jobs}/JOBID_submission.sh; for {example}:"]
            + [f"      {line}" for line in script.rstrip("\n").splitlines() if line]
            + [f"  Slurm job's run (submitit's {jobs.jobs}/JOBID_submitted.pkl): {shlex.join(cmd)} --set ... "
               f"(the run's settings: lr, target, cap, seed)"])
