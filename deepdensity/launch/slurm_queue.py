"""A Slurm job's state as `squeue` tells it, for submitit's jobs. submitit reads it with `sacct`,
which needs Slurm's accounting database: without one a job the scheduler ended before it wrote its
result (scancel, a node lost) stays UNKNOWN and is waited for forever (docs/cluster.md)."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Optional

from submitit.slurm.slurm import SlurmExecutor, SlurmInfoWatcher, SlurmJob

# Slurm's job states in which the job is still to run, running, or to run again (requeued)
LIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "COMPLETING",
    "CONFIGURING",
    "PREEMPTED",
    "SUSPENDED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "RESV_DEL_HOLD",
    "UNKNOWN",
}
# squeue answered and no longer lists the job: the controller has forgotten it (MinJobAge after its end)
LEFT = "LEFT"


class QueueWatcher(SlurmInfoWatcher):
    """submitit's job-state reader, on `squeue -t all` (every registered job in one call)
    instead of `sacct`. A job squeue no longer lists is LEFT (ended, and forgotten by the
    controller); while squeue fails (a controller restarting) nothing changes, and a job is
    never taken for ended because of that: `silent_since` says since when it failed."""

    def __init__(self, delay_s: int = 60) -> None:
        super().__init__(delay_s=delay_s)
        self.silent_since: Optional[float] = None
        self._update_lock = threading.RLock()

    def _make_command(self) -> Optional[list]:
        ids = sorted(self._registered - self._finished)
        return ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-j", ",".join(ids)] if ids else None

    def update_if_long_enough(self, mode: str) -> None:
        with self._update_lock:  # one squeue at a time for the driver's threads
            super().update_if_long_enough(mode)

    def update(self) -> None:
        command = self._make_command()
        if command is None:
            return
        self._num_calls += 1
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        # squeue -j naming one job the controller forgot fails with "Invalid job id"; with several, lists the rest
        if proc is not None and (proc.returncode == 0 or "Invalid job id" in proc.stderr):
            listed = dict(line.strip().split("|", 1) for line in proc.stdout.splitlines() if "|" in line)
            for job_id in command[-1].split(","):
                self._info_dict[job_id] = {"State": listed.get(job_id, LEFT).split()[0]}
            self.silent_since = None
        else:
            self.silent_since = self.silent_since or time.monotonic()
        self._last_status_check = time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        return self.get_state(job_id, mode=mode) not in LIVE


class QueueJob(SlurmJob):
    """submitit's Slurm job, its state read by QueueWatcher."""

    watcher = QueueWatcher(delay_s=10)


class QueueExecutor(SlurmExecutor):
    """submitit's Slurm executor whose jobs are QueueJobs (arrays included)."""

    job_class = QueueJob

    def _internal_process_submissions(self, delayed_submissions: list) -> list:
        jobs = super()._internal_process_submissions(delayed_submissions)
        return [j if isinstance(j, QueueJob) else QueueJob(self.folder, j.job_id) for j in jobs]
