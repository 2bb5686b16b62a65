"""Processes as Linux's /proc shows them: what `deepdensity launch` relays to (relay.py) and what a
rank of plain horovodrun watches (training/launcher_watch.py) are found the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

SHELLS = ("sh", "dash", "bash")
# the names an MPI launcher's process has (OpenMPI 4's mpirun and orterun, OpenMPI 5's prterun)
MPI_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "prte"})


def stat_of(pid) -> Optional[tuple]:
    """(command name, the fields after it: state, ppid, pgrp, ...) of a live process, None where
    it is gone or unreadable. The name, in ( ), may hold spaces and parentheses."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def parent_of(pid: int) -> Optional[int]:
    stat = stat_of(pid)
    return None if stat is None else int(stat[1][1])


def name_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def command_of(pid: int) -> list:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []
