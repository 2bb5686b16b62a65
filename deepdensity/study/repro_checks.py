"""A `repro` invocation's options checked before the study writes, builds or times anything: the
--runner template, the --stack-check venv, and Slurm's clients under --executor slurm, each
refused in one line rather than part-way through a study."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from deepdensity.launch import slurm_jobs
from deepdensity.study.core.preset import Study
from deepdensity.study.run.design import venv_stack
from deepdensity.study.run.session import StudyOptions
from deepdensity.study.run.timing import clock_cpus, current_timing
from deepdensity.utils.errors import StudyError


def check_runner(runner: Optional[str]) -> None:
    """A --runner template must name the worker count as {n} and nothing else in braces."""
    if not runner:
        return
    try:
        filled = runner.format(n=2)
        shlex.split(filled)
    except (KeyError, IndexError, ValueError) as e:
        raise StudyError(
            f"--runner {runner!r} is not a template with {{n}} for the worker count ({e!r}), "
            f"e.g. 'horovodrun -np {{n}}'"
        ) from None
    if filled == runner:
        raise StudyError(
            f"--runner {runner!r} does not use {{n}}: every cell would run on the same workers; "
            f"e.g. 'horovodrun -np {{n}}'"
        )


def check_stack_check(options: StudyOptions) -> Optional[dict]:
    """--stack-check VENV: one-process runs on this host, from a venv that answers for its stack
    (checked before the plan, so that a wrong VENV is one line, not an error after the study);
    its stack (design.venv_stack), or None without --stack-check."""
    if not options.stack_check:
        return None
    if options.runner or options.executor == "slurm":
        raise StudyError(
            "--stack-check trains its runs as one process on this host: not with --runner or --executor slurm"
        )
    return venv_stack(options.stack_check)


def slurm_clients(study: Study, options: StudyOptions, runs: Path) -> Optional[tuple]:
    """(options, why this host cannot submit or None) under --executor slurm, else None. Slurm's
    clients are checked first: a host that cannot submit the jobs is told so in one line before
    the study writes, builds or times anything (a dry run shows it instead)."""
    if options.executor != "slurm":
        return None
    slurm_options = slurm_jobs.SlurmOptions.parse(study.slurm, options.slurm)
    unavailable = (
        None
        if options.no_train
        else slurm_jobs.clients_unavailable(
            slurm_options, _largest_job_cpus(study, slurm_options, options.runner, runs)
        )
    )
    if unavailable and not options.dry_run:
        raise StudyError(f"--executor slurm: {unavailable}; nothing was written")
    return slurm_options, unavailable


def _largest_job_cpus(study: Study, slurm_options, runner: Optional[str], runs: Path) -> int:
    """The CPUs of the largest job the study submits, which Slurm is asked to accept before
    anything starts: the clock's (horovodrun -np 4) unless the runs folder holds its timing.json,
    a real strong-scaling run's, or under --runner a run at the largest N; each rank the runs'
    threads or cpus_per_task."""
    threads = study.runs.intra_op_threads
    per_rank = max(1, slurm_options.cpus_per_task or threads)  # SlurmRunner.cpus: a rank's
    clock = [] if current_timing(runs) is not None else [clock_cpus(slurm_options, threads)]
    return max([per_rank * n for n in (1, *([max(study.workers)] if runner else study.real_strong))] + clock)
