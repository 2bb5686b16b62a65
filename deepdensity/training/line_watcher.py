"""Rank 0's last word under mpirun, said by a process of its own. No TensorFlow here.

An interrupted mpirun SIGKILLs its ranks 1 s after its SIGTERM, and rank 0 must have said where
the run stands by then. Its main thread can be where no Python code runs: in C++ (the first
step's graph optimised and run), or in C that keeps Python's lock (GIL) for seconds on a loaded
host: `import tensorflow` reads and relocates its 1 GB library holding the lock (a 10.3 s
stretch with a cold page cache on a 2-core AMD EPYC; ml_dtypes' module set-up 0.6-0.8 s with a
warm one; measured with a thread ticking every 5 ms). No thread of the rank runs there. So a small
process, started before TensorFlow is imported, says the line for it: the signal wakes it
(`signal.set_wakeup_fd`, which the C handler writes whatever the main thread is doing); if the
main thread has not said the line LAST_WORD_S later and is in a window where the handler would
raise at once (code an exception may cut anywhere, nothing of the run being written), and
outside every held section, the watcher writes the line the rank prepared as that window opened,
then removes the run's .running mark if the rank wrote it. The rank then ends as it can: at its
next Python point as interrupted, in silence, or by mpirun's kill.

The two share one page: the windows and held sections open, the line, and who said it. Only one
of them writes the line: its claim is a byte set under a POSIX lock on the page (utils/errors.py
asks it through `claim`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from deepdensity.utils.files import remove_pid_mark

# How long rank 0's main thread has to take an interrupt before the watcher says the line for
# it: inside OpenMPI's 1 s between its SIGTERM and its SIGKILL.
LAST_WORD_S = 0.5

# the page: opens, holds, said (a byte each), then the line's length and its bytes
_HEAD = struct.Struct("=BBBxI")
PAGE = 16384
_LINE_MAX = PAGE - _HEAD.size


class Page:
    """The page rank 0 and its watcher share, on a file descriptor both hold."""

    def __init__(self, fd: Optional[int] = None):
        if fd is None:
            fd = os.memfd_create("deepdensity-line-watcher") if hasattr(os, "memfd_create") else _unlinked_file()
            os.ftruncate(fd, PAGE)
        self.fd = fd
        self.map = mmap.mmap(fd, PAGE)

    def publish(self, opens: int, holds: int) -> None:
        self.map[0], self.map[1] = min(opens, 255), min(holds, 255)

    def may_say(self) -> bool:
        """Is the rank in a window where the line may be said for it, outside held sections?"""
        return bool(self.map[0]) and not self.map[1]

    def prepare(self, line: bytes) -> None:
        data = line[:_LINE_MAX]
        with self._locked():
            self.map[_HEAD.size : _HEAD.size + len(data)] = data
            struct.pack_into("=I", self.map, 4, len(data))

    def line(self) -> bytes:
        with self._locked():
            return self._line()

    def _line(self) -> bytes:
        (length,) = struct.unpack_from("=I", self.map, 4)
        return bytes(self.map[_HEAD.size : _HEAD.size + length])

    def claim(self) -> bool:
        """True for the first of the two processes to ask: that one writes the line."""
        with self._locked():
            first, self.map[2] = not self.map[2], 1
        return first

    def say(self, err: int) -> bool:
        """The watcher's claim, and the line written to `err` under the same lock, so that the
        rank, ending, never stops its watcher between the two (`stop`). False when the rank
        claimed it first, or prepared no line (its own words are then the only ones)."""
        with self._locked():
            line = self._line()
            if self.map[2] or not line:
                return False
            self.map[2] = 1
            with contextlib.suppress(OSError):
                os.write(err, line)
        return True

    @contextlib.contextmanager
    def _locked(self):
        fcntl.lockf(self.fd, fcntl.LOCK_EX)  # POSIX locks: the two processes exclude each other
        try:
            yield
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)


def _unlinked_file() -> int:
    fd, path = tempfile.mkstemp(prefix="deepdensity-line-watcher-")
    os.unlink(path)
    return fd


def start(page: Page, wake: int, err: int, mark: Optional[Path], signals) -> subprocess.Popen:
    """The watcher of this process: it reads the wakeup pipe `wake` and writes the line to the
    file descriptor `err` (the rank's own stderr), then removes the run's `mark` if the rank
    wrote it. In a session of its own, so that a signal to the rank's process group never
    reaches it; it ends when the rank does (the pipe's write end closes). Imports only this
    module and utils/files.py."""
    package = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")]))}
    numbers = ",".join(str(int(s)) for s in signals)
    args = [str(wake), str(page.fd), str(err), str(os.getpid()), str(mark or ""), numbers]
    return subprocess.Popen(
        [sys.executable, "-c", "from deepdensity.training.line_watcher import watch; watch()", *args],
        pass_fds=(wake, page.fd, err),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


def watch(argv: Optional[list] = None) -> None:
    """The watcher's program (start): wait for one of the signals, then say the line if rank 0
    has not and may not."""
    wake, fd, err, rank, mark, signals = (argv or sys.argv[1:])[:6]
    wake, err, rank, signals = int(wake), int(err), int(rank), {int(s) for s in signals.split(",")}
    for s in signals:
        signal.signal(s, signal.SIG_IGN)
    _die_with_the_rank()
    page = Page(int(fd))
    if not _woken(wake, rank, signals):
        return
    deadline = time.monotonic() + LAST_WORD_S
    while time.monotonic() < deadline or not page.may_say():
        if os.getppid() != rank:
            return
        time.sleep(0.02)
    if page.say(err) and mark:
        remove_pid_mark(mark, rank)


def stop(page: Page, watcher: subprocess.Popen) -> None:
    """At the rank's end (atexit): end its watcher, never between its claim and its line. A rank
    that ends without its exit handlers (os._exit, a kill) takes the watcher with it too: the
    kernel kills it then (`_die_with_the_rank`)."""
    with page._locked():
        watcher.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watcher.wait(timeout=5)


def _die_with_the_rank() -> None:
    """Linux's PR_SET_PDEATHSIG: the kernel SIGKILLs this process as its parent ends, so that no
    process naming the run folder outlives the rank, not even by the moment a poll would take."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG


def _woken(wake: int, rank: int, signals: set) -> bool:
    """Wait for one of `signals` on the wakeup pipe: False when the rank is gone first."""
    while os.getppid() == rank:
        if select.select([wake], [], [], 1.0)[0]:
            data = os.read(wake, 64)
            if not data:
                return False
            if any(s in signals for s in data):
                return True
    return False
