"""The study's clock (timing.py) where the study's runs train: on this host under the local
executor, and as one Slurm job on a compute node under `--executor slurm` (issue 47: every stage
that trains, the clock's real `horovodrun -np 1/2/4` epochs included, runs as a job, never on
the login node the driver runs on).

The job runs this module on the node:

    python -m deepdensity.study.run.clock_job --runs RUNS --n-train N --n-val N

which is measure_timing itself: it writes RUNS/timing.json (and, round by round,
timing-rounds.json) on the shared file system, and the driver reads timing.json when the job has
ended. The job goes through the runner's own job handling (SlurmRunner.job): recorded in
RUNS/.slurm/clock.json before and after sbatch, so that a driver started again attaches to it and
never submits it twice; near its time limit it is requeued, and the requeued job resumes at the
first round not yet kept. A timing.json of this clock version already there submits nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

from deepdensity.study.core.errors import StudyError
from deepdensity.study.run.timing import current_timing, measure_timing, PROBE_NS, REAL_NS
from deepdensity.utils.args import parser
from deepdensity.utils.errors import command

CLOCK_JOB = "clock"                      # the job's name (dd-PRESET-clock) and its record (.slurm/clock.json)
CLOCK_PROCESSES = max(*REAL_NS, *PROBE_NS)   # the most processes the clock runs at once: horovodrun -np 4


def clock_cpus(options, threads: int) -> int:
    """CPUs of the clock's job: those of the study's real strong-scaling job at the clock's
    largest N (horovodrun -np 4): the runs' threads, or the preset's cpus_per_task, a process."""
    return max(1, options.cpus_per_task or threads) * CLOCK_PROCESSES


def clock_command(root: Path, n_train: int, n_val: int) -> list:
    """What the clock's job runs: this module, on the runs folder (absolute: the job's own cwd)."""
    return [sys.executable, "-m", "deepdensity.study.run.clock_job", "--runs", str(Path(root).resolve()),
            "--n-train", str(n_train), "--n-val", str(n_val)]


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
    say(f"timing: the clock as one Slurm job on one node ({cpus} CPUs, {runner.options.time} at most; "
        f"one-process epochs and horovodrun -np {' and '.join(str(n) for n in REAL_NS[1:])} there)")
    code, log = runner.job(clock_command(s.root, s.n_train, s.n_val), CLOCK_JOB, cpus)
    timing = current_timing(s.root)
    if code != 0 or timing is None:
        runner.forget(CLOCK_JOB)          # read and said: the study started again submits it afresh
        tail = "\n".join(log.strip().splitlines()[-15:])
        raise StudyError(f"the clock's Slurm job failed (exit {code})"
                         + ("" if code != 0 else f", and wrote no timing.json in {s.root}") + f":\n{tail}")
    say(f"timing: the clock's job wrote {s.root / 'timing.json'}")
    return timing


@command
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.study.run.clock_job")
    ap.add_argument("--runs", required=True, help="the study's runs folder (its train.yaml and data)")
    ap.add_argument("--n-train", type=int, required=True, help="training cubes the runs train on")
    ap.add_argument("--n-val", type=int, required=True, help="validation cubes")
    ap.add_argument("--resume", action="store_true",
                    help="(a job submitted again: the rounds kept in timing-rounds.json are resumed either way)")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)      # the job's log shows each round as it goes
    from deepdensity.config import load
    root = Path(args.runs)
    train_yaml = root / "train.yaml"
    if not train_yaml.is_file():
        raise StudyError(f"{train_yaml}: no such file; --runs names a study's runs folder")
    measure_timing(root, train_yaml, load(str(train_yaml)), args.n_train, args.n_val)
    print(f"timing: {root / 'timing.json'} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
