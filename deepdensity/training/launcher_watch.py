"""A rank of plain `horovodrun` under MPI whose launcher is gone.

horovodrun replaces itself with `/bin/sh -c mpirun ...`, so the process a user, a job runner,
`timeout` or a closing terminal signals is that shell: SIGTERM or SIGHUP ends it and left mpirun
and the ranks training in the background until the epoch cap (docs/training.md). So a rank that
horovodrun started under mpirun watches, from its first lines, mpirun (its parent) and the shell
horovodrun became (mpirun's parent). A bare mpirun is not watched: its parent is the user's own
shell, which `nohup mpirun ... &` is meant to outlive. When either is gone, the
rank sends itself the relayed interrupt (launch/signals.py RELAYED) and takes it as the ranks of
`deepdensity launch` take theirs: rank 0 writes where the run stands at the last whole epoch and
prints the command that continues it, every rank exits 0 (a non-zero exit would start mpirun's
kill of the ranks still saving), and mpirun ends with them. Under Gloo (horovodrun's own
processes signal the ranks) and under `deepdensity launch` (which relays) nothing is watched.
No TensorFlow here: it runs before TensorFlow is imported."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Mapping, Optional

from deepdensity.launch.controllers import started_by_mpirun
from deepdensity.launch.procs import MPI_LAUNCHERS, SHELLS, command_of, name_of, parent_of
from deepdensity.launch.signals import RELAYED
from deepdensity.training import interrupts
from deepdensity.utils.errors import LAUNCH_PREFIX_ENV

POLL_S = 0.2  # the watch's period: the ranks notice within a fifth of a second of each other


def is_horovodruns_shell(argv: list) -> bool:
    """Is this the shell plain horovodrun became: `/bin/sh -c 'mpirun ...'` (horovod/runner/mpi_run.py)?"""
    return (
        len(argv) >= 3
        and Path(argv[0]).name in SHELLS
        and argv[1] == "-c"
        and argv[2].lstrip().split(" ", 1)[0] in MPI_LAUNCHERS
    )


def watched(env: Mapping[str, str], pid: Optional[int] = None) -> Optional[tuple]:
    """(mpirun's pid, horovodrun's shell's pid) for a rank that plain horovodrun started under
    mpirun, else None: not under MPI, under `deepdensity launch`, under a bare mpirun, or with a
    parent that is not an MPI launcher (orted on another host: rank 0's exit there ends the job)."""
    if not started_by_mpirun(env) or env.get(LAUNCH_PREFIX_ENV):
        return None
    mpirun = parent_of(pid or os.getpid())
    if mpirun is None or name_of(mpirun) not in MPI_LAUNCHERS:
        return None
    launcher = parent_of(mpirun)
    return (mpirun, launcher) if launcher and launcher > 1 and is_horovodruns_shell(command_of(launcher)) else None


def launcher_gone(pid: int, mpirun: int, launcher: int) -> bool:
    """Has mpirun or its launcher ended? A process whose parent ends is given another parent."""
    return parent_of(pid) != mpirun or parent_of(mpirun) != launcher


def start(env: Mapping[str, str] = os.environ) -> bool:
    """Watch this rank's launcher in a thread of its own (True), where there is one to watch."""
    found = watched(env)
    if found is None:
        return False
    interrupts.take_relayed()
    pid = os.getpid()

    def watch():
        while not launcher_gone(pid, *found):
            time.sleep(POLL_S)
        os.kill(pid, RELAYED)

    threading.Thread(target=watch, name="deepdensity-launcher-watch", daemon=True).start()
    return True
