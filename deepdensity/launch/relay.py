"""How `deepdensity launch` passes an interrupt on to a job's ranks.

launch runs horovodrun in a process group of its own, so that a terminal's Ctrl-C reaches launch
alone (SIGTERM and SIGHUP reach it alone anyway), and passes every interrupt on itself:

- under Gloo, and under MPI before horovodrun has started mpirun, to horovodrun, whose handler
  SIGTERMs every rank and SIGKILLs a rank still running 5 s later (runner/gloo_run.py);
- under MPI, as SIGUSR1 to mpirun, which forwards it to every rank on every host at once
  (signals.RELAYED: a rank takes it as any interrupt and exits 0), again every half second
  for a rank mpirun started since. mpirun's own answer to SIGINT or SIGTERM would SIGKILL a
  rank 2 s later, before a rank compiling its first step had said where the run stands. A job
  still running ESCALATE_AFTER_S after the interrupt gets mpirun's SIGTERM, which ends it.

horovodrun execs `/bin/sh -c 'mpirun ...'` under MPI (runner/mpi_run.py), so a signal to its
pid reaches the shell, not mpirun: hence a search of horovodrun's process group.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Optional

from deepdensity.launch import signals
from deepdensity.launch.procs import MPI_LAUNCHERS, SHELLS, name_of, stat_of

# how long a job may take to end after an interrupt before mpirun is asked to kill it: a rank
# saves nothing after the signal (its checkpoint is the last epoch's), so this is the time to
# reach a point that takes the signal, Horovod's shutdown, and the exit handlers (Slurm's
# KillWait default is the same 30 s)
ESCALATE_AFTER_S = 30.0
RESEND_EVERY_S = 0.5


def to_horovodrun(signum: int) -> int:
    """The signal horovodrun's own handler is given for `signum`: Ctrl-C stays Ctrl-C, SIGTERM
    and SIGHUP are SIGTERM (horovodrun has no handler of its own for SIGHUP)."""
    return signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM


def group_members(pgid: int) -> list:
    """(pid, command name) of every process in process group `pgid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        stat = stat_of(entry) if entry.isdigit() else None  # None: ended meanwhile
        if stat is not None and int(stat[1][2]) == pgid and stat[1][0] != "Z":
            found.append((int(entry), stat[0]))
    return found


def mpirun_of(pgid: int) -> Optional[int]:
    """The pid of the mpirun in horovodrun's process group `pgid`, or None (Gloo, or not yet)."""
    return next((pid for pid, name in group_members(pgid) if name in MPI_LAUNCHERS), None)


def take_interrupts(passing_on: "Relay", on_interrupt) -> list:
    """Ctrl-C, SIGTERM and SIGHUP reach launch alone (horovodrun runs in a group of its own):
    the first is passed on to the job, each is recorded and `on_interrupt()` called, and launch
    keeps reading until horovodrun has ended, so that the ranks' last lines (where the run was
    saved, how to continue) are not cut off. A Ctrl-C's '^C' is put on a line of its own.
    Returns the signals received, as they come."""
    received = []

    def on_signal(signum, frame):
        if not received:
            signals.tidy_terminal(signum)
        received.append(signum)
        on_interrupt()
        passing_on.start(signum)

    for signum in signals.CODES:
        signal.signal(signum, on_signal)
    return received


class Relay:
    """Passes the first interrupt launch receives on to the job of horovodrun `proc`, which runs
    in a process group of its own, until `ended` is set (horovodrun's output closed). Made, and
    its handlers set (take_interrupts), before horovodrun starts, so that no signal falls between
    the two (it left horovodrun running on its own); `attach` gives it horovodrun once started."""

    def __init__(self, ended: threading.Event):
        self.proc, self.ended, self.started, self.attached = None, ended, False, threading.Event()

    def attach(self, proc) -> None:
        self.proc = proc
        self.attached.set()

    def start(self, signum: int) -> None:
        if not self.started:
            self.started = True
            threading.Thread(target=self._pass_on, args=(signum,), name="deepdensity-relay", daemon=True).start()

    def _pass_on(self, signum: int) -> None:
        self.attached.wait()  # a signal before horovodrun started: passed on once it has
        deadline, told_horovodrun, mpirun = time.monotonic() + ESCALATE_AFTER_S, False, None
        while not self.ended.is_set():
            mpirun = mpirun or mpirun_of(self.proc.pid)  # found once: its pid stays the job's
            if mpirun is not None:
                # Horovod: under MPI, every rank on every host at once, through mpirun
                late = time.monotonic() > deadline
                if not _send(mpirun, signal.SIGTERM if late else signals.RELAYED) or late:
                    return  # mpirun has ended, or ends the job now
            elif not told_horovodrun and self.proc.poll() is None and not _is_shell(self.proc.pid):
                told_horovodrun = _send(self.proc.pid, to_horovodrun(signum))  # Gloo, or MPI not yet started
            self.ended.wait(RESEND_EVERY_S)


def _is_shell(pid: int) -> bool:
    """Has horovodrun become the shell that starts mpirun?"""
    return name_of(pid) in SHELLS


def _send(pid: int, signum: int) -> bool:
    try:
        os.kill(pid, signum)
        return True
    except ProcessLookupError:
        return False
