"""What each Slurm job of a study asks for (SlurmOptions: the preset's `slurm:`, then --slurm
KEY=VALUE; time_hours reads its time limit as Slurm does), and whether this host can submit
such a job (clients_unavailable), said before the study writes anything."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from deepdensity.utils.errors import StudyError


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
