"""Ctrl-C, SIGTERM and SIGHUP in a training process. No TensorFlow here: the handlers are in place
before TensorFlow is imported.

Under horovodrun a terminal's Ctrl-C reaches horovodrun alone: each rank runs in a session of its
own (runner/common/util/safe_shell_exec.py: the middleman calls os.setsid), so the terminal's
SIGINT never reaches it. horovodrun's handler (gloo_run.py: register_shutdown_event) sets an
event on which every rank's middleman sends SIGTERM to the rank, waits 5 s
(GRACEFUL_TERMINATION_TIME_S) and then SIGKILLs it. So the ranks get SIGTERM within milliseconds
of each other, but not at the same step: the first to stop leaves the other blocked in an
allreduce that fails ("Horovod has been shut down", or Gloo's closed connection). A handler that
raised at once, wherever the process was, could land while pybind11 was turning that failure
into a Python exception (pybind11 then raised "MISMATCH of original and normalized active
exception types"), or while TensorFlow built a data pipeline (a rank died of a segmentation
fault unwinding it). Hence:

- a signal is recorded, and taken (Interrupted raised) at the run's next point that says so
  (`take_pending`: between setup's phases, before and after every step and validation batch);
  the handler raises at once only in the `opened` windows where the process runs for seconds
  between such points in code an exception may cut anywhere (importing TensorFlow, making the
  default data, tracing a fit's first step), never inside a `held` section (the epoch's end:
  Horovod's metric averaging, the stop the ranks decide together, the row of metrics.jsonl and
  the checkpoint), so a run stops between epochs' records, never inside one;
- after a signal, whatever error ends the run is the signal's doing, and the run ends as
  interrupted (`settle`);
- a rank that finds its peers gone before its own signal arrived waits a moment for it
  (`PEER_WAIT_S`, inside horovodrun's 5 s), so that it too ends as interrupted, in silence.

Under MPI no signal of the terminal reaches a rank either (mpirun starts each in a process group
of its own), and mpirun's own answer to SIGINT or SIGTERM is to SIGTERM the ranks 1 s later and
SIGKILL them 1 s after that (OpenMPI's odls_base_sigkill_timeout), too soon for a rank compiling
its first step, which died without a word. `deepdensity launch` passes an interrupt on instead as
SIGUSR1 (RELAYED), which mpirun forwards to every rank at once, on every host; a rank takes it
as any interrupt and exits 0, because a non-zero exit starts the same kill on the ranks still
saving. launch reports the interrupt's own exit status (horovodrun.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from deepdensity.launch import continuing
from deepdensity.launch.controllers import started_by_mpirun
from deepdensity.launch.signals import CODES, RELAYED, tidy_terminal
from deepdensity.training import line_watcher
from deepdensity.utils.errors import (
    EXIT_SIGINT,
    LAUNCH_PREFIX_ENV,
    Interrupted,
    launcher_prefix,
    launcher_rank,
    launcher_size,
    share_the_interrupted_line,
)

_relayed_taken = False  # a rank that watches its launcher (launcher_watch.py) takes RELAYED


def _codes() -> dict:
    """The signals this process takes, with the exit status of each."""
    return {**CODES, RELAYED: 0} if os.environ.get(LAUNCH_PREFIX_ENV) or _relayed_taken else CODES


def take_relayed() -> None:
    """From here RELAYED interrupts this process as under `deepdensity launch` (exit 0): what a
    rank whose launcher is gone sends itself (launcher_watch.py)."""
    global _relayed_taken
    _relayed_taken = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(RELAYED, _on_signal)


# How long a rank whose peers are gone waits for its own signal: horovodrun signals every rank at
# once, and kills a rank still running 5 s after its SIGTERM.
PEER_WAIT_S = 3.0


class _Published:
    """A count of _State that rank 0's line watcher is told of whenever it changes (_publish)."""

    def __set_name__(self, owner, name) -> None:
        self.name = "_" + name

    def __get__(self, state, owner=None):
        return self if state is None else getattr(state, self.name, 0)

    def __set__(self, state, n: int) -> None:
        setattr(state, self.name, n)
        state._publish()


class _State:
    signum: Optional[int] = None  # the first signal received
    before_run: Optional[list] = None  # train.py's words while it imports (hold_early): a signal ends it at once
    settled = False  # the run ended as interrupted (settle): never raised again
    stuck = False  # a call left running in another thread (while_waiting)
    said_for_us = None  # rank 0's line watcher under mpirun (last_word): (its page, the line's words, it)
    holds = _Published()  # sections a signal must not cut
    opens = _Published()  # windows where the handler raises at once

    def _publish(self) -> None:
        """Tell rank 0's watcher where the process is; in a window, outside held sections, the
        line it would say (the run folder is whole there, and stays so until the window closes
        or a held section opens)."""
        if self.said_for_us is None:
            return
        page, line, _ = self.said_for_us
        if self.opens and not self.holds:
            with contextlib.suppress(Exception):  # the line prepared before stays
                page.prepare(interrupted_text(line()))
        page.publish(self.opens, self.holds)

    def reset(self) -> None:
        self.signum, self.holds, self.opens, self.settled, self.stuck = None, 0, 0, False, False
        self.before_run = None


_state = _State()


def _on_signal(signum, frame) -> None:
    if _state.before_run is not None:
        _end_before_the_run(signum, _state.before_run)
    if _state.signum is None:
        _state.signum = signum
        tidy_terminal(signum)
    if _state.opens:
        take_pending()


def take_pending() -> None:
    """Raise Interrupted for a signal received, outside every held section, until the run has
    ended as interrupted. Called at points of the run besides the handler: the handler's own
    raise can land where Python swallows it (a weakref callback of the import machinery printed
    "Exception ignored in ..." and the import went on), and the next such point raises again."""
    if _state.signum is not None and not _state.holds and not _state.settled:
        raise Interrupted(_codes().get(_state.signum, EXIT_SIGINT))


def pending() -> Optional[int]:
    """The exit code of the signal received (taken or not), or None."""
    return None if _state.signum is None else _codes().get(_state.signum, EXIT_SIGINT)


def open_window() -> None:
    """From here the handler raises at once (close_window ends it)."""
    _state.opens += 1


def close_window() -> None:
    _state.opens = max(0, _state.opens - 1)


@contextlib.contextmanager
def opened():
    """A block in which the handler raises at once (outside held sections); a signal taken or
    not, the block ends at a point that takes it."""
    open_window()
    try:
        yield
    finally:
        close_window()
    take_pending()


def hold() -> None:
    """Open a section a signal must not cut (release() closes it)."""
    _state.holds += 1


def release() -> None:
    """Close a held section; a signal received inside it is raised now."""
    _state.holds = max(0, _state.holds - 1)
    take_pending()


def unhold() -> None:
    """Close a held section without taking a signal received inside it (an error is on its way
    up, and `settle` decides what ended the run)."""
    _state.holds = max(0, _state.holds - 1)


@contextlib.contextmanager
def held():
    """A block a signal must not cut: one received inside is raised after it (not when the
    block ends in an error of its own, which goes on up first)."""
    hold()
    try:
        yield
    finally:
        unhold()
    take_pending()


@contextlib.contextmanager
def handling(restore: bool = True):
    """Take the interrupting signals (`_codes`) as this module says for the block, then
    (`restore`) put back the handlers there were (else they stay, and what the block received
    stays `pending`). Only
    the main thread may set handlers; elsewhere the block runs as it is. A signal `hold_early`
    recorded is taken at the block's first `take_pending`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before, unraisable = {s: signal.getsignal(s) for s in _codes()}, sys.unraisablehook
    early = _state.signum
    _state.reset()
    _state.signum = early
    for s in _codes():
        signal.signal(s, _on_signal)
    sys.unraisablehook = _lost_raise_unsaid(unraisable)
    try:
        yield
    finally:
        if restore:  # and forget the block's signal: the next block is another run
            for s, handler in before.items():
                signal.signal(s, handler)
            sys.unraisablehook = unraisable
            _state.reset()


def _lost_raise_unsaid(hook):
    """sys.unraisablehook less what a signal caused where Python cannot raise (a weakref
    callback, a __del__), which it printed as "Exception ignored in ..." with a traceback: the
    handler's Interrupted itself, and, once a signal was received, any error, as `settle` takes
    the error that ends the run (the handler's raise inside the import machinery's lock
    callbacks came back as CPython's SystemError). take_pending raises it at the run's next point."""

    def quiet(unraisable):
        if not isinstance(unraisable.exc_value, Interrupted) and _state.signum is None:
            hook(unraisable)

    return quiet


def hold_early(words: Optional[list] = None) -> None:
    """For a program's first lines, before its imports: take the interrupting signals from now on
    (Python's defaults would print a KeyboardInterrupt traceback or end the process without a
    word). Given train.py's `words`, a signal ends the process at once, in its one line
    (`_end_before_the_run`), until `handling` begins; without, it is recorded, and `handling`
    takes it."""
    if threading.current_thread() is threading.main_thread():
        if words is not None:
            _state.before_run = list(words)
        for s in _codes():
            signal.signal(s, _on_signal)


def _end_before_the_run(signum: int, words: list) -> None:
    """An interrupt while train.py imports its modules: nothing of the run is written or shared
    yet (no run folder made, no Horovod), so the process ends here, rank 0 saying where the run
    stands. Taken at the run's first point instead, it came seconds later on a loaded host,
    after mpirun's own kill: on SIGINT or SIGTERM mpirun SIGTERMs the ranks 1 s later and
    SIGKILLs them 1 s after that (OpenMPI's odls_base_sigkill_timeout, measured), and a rank
    still importing died without a word. The line is one write to the file descriptor, not
    through sys.stderr, which the interrupted code may be writing to."""
    _state.before_run = None  # a second signal while this one ends the process is only recorded
    tidy_terminal(signum)
    code = _codes().get(signum, EXIT_SIGINT)
    if launcher_rank() == 0:
        _write_interrupted(continuing.before_the_run(words, launcher_prefix()))
    stay_for_rank_0(code)
    os._exit(code)


def interrupted_text(where: str) -> bytes:
    """Rank 0's line, "interrupted: " + `where`, as written to stderr's file descriptor."""
    return f"interrupted: {where}\n".encode(getattr(sys.stderr, "encoding", None) or "utf-8", "backslashreplace")


def _write_interrupted(where: str) -> None:
    """Rank 0's line as one write to stderr's file descriptor: not through sys.stderr, which the
    interrupted code (another thread, or the frame a handler cut into) may be writing to."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        os.write(sys.stderr.fileno(), interrupted_text(where))


# How long a rank other than 0 stays after an interrupt under mpirun (below): mpirun SIGKILLs
# every rank 1 s after its SIGTERM, so rank 0 has no longer than that to write its line anyway.
STAY_FOR_RANK_0_S = 0.8


def stay_for_rank_0(code: int) -> None:
    """Under mpirun, a rank other than 0 that ends on an interrupt it took itself stays a moment
    before it exits, so that rank 0's line gets out. An interrupted mpirun (a Ctrl-C, SIGTERM to
    it) SIGTERMs the ranks 1 s later, and once it has seen one of them end it drops what the
    others write: measured with stand-in ranks under `mpirun -np 2` (OpenMPI 4.1), rank 0's
    line written 0.02 s after rank 1 ended was lost 8 times in 8, and 0 times in 8 when rank 1
    stayed 0.3 s. That includes the relayed interrupt a rank's launcher watch sent it (exit 0):
    a Ctrl-C ends horovodrun's shell and interrupts its mpirun at once. Not launch's relayed
    interrupt: launch never interrupts mpirun."""
    if (code or _relayed_taken) and launcher_rank() != 0 and started_by_mpirun(os.environ):
        time.sleep(STAY_FOR_RANK_0_S)


def last_word(line: Callable[[], str], mark: Optional[Path]) -> bool:
    """Rank 0 under mpirun (not under `deepdensity launch`, which says the line from the run
    folder itself when no rank did): a process of its own that says where the run stands when
    the main thread cannot (training/line_watcher.py says why and how). `line()`: the run folder's
    words, prepared as each window opens; `mark`: the run folder's .running mark, which the
    watcher removes if this process wrote it. Returns whether the watcher was started."""
    if (
        launcher_rank() != 0
        or not started_by_mpirun(os.environ)
        or os.environ.get(LAUNCH_PREFIX_ENV)
        or threading.current_thread() is not threading.main_thread()
        or _state.said_for_us is not None
    ):
        return False
    wake_r, wake_w = os.pipe()
    try:
        page = line_watcher.Page()
        watcher = line_watcher.start(page, wake_r, sys.stderr.fileno(), mark, [*CODES, RELAYED])
    except (OSError, ValueError, AttributeError):  # no watcher: the main thread alone says the line
        os.close(wake_w)
        return False
    finally:
        os.close(wake_r)
    os.set_blocking(wake_w, False)  # kept open for the process's life: its end wakes the watcher
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    _state.said_for_us = (page, line, watcher)  # held: a Popen let go warns while its process runs
    _state._publish()
    share_the_interrupted_line(page.claim)
    atexit.register(line_watcher.stop, page, watcher)
    return True


def while_waiting(call):
    """call() in a thread of its own while this (main) thread waits for it, so that a signal is
    taken while it blocks. For Horovod's init: it waits in C++ until every rank has joined, where
    a signal handler cannot run, and a rank whose peer was interrupted before joining waited
    there, deaf to its own SIGTERM, until horovodrun killed it (exit 137, no word). A call left
    running marks the process `stuck`: its exit handlers would wait for it (Horovod's shutdown
    joins the thread that is still joining), so it ends without them."""
    done, finished = {}, threading.Event()

    def run():
        try:
            done["value"] = call()
        except BaseException as e:  # raised again in the waiting thread
            done["error"] = e
        finally:
            finished.set()

    threading.Thread(target=run, name="deepdensity-waited", daemon=True).start()
    try:
        while not finished.wait(0.05):
            take_pending()
    except BaseException:
        _state.stuck = not finished.is_set()
        raise
    if "error" in done:
        raise done["error"]
    return done["value"]


def stuck() -> bool:
    """Did an interrupt leave a call running in another thread (while_waiting)?"""
    return _state.stuck


def settle(error: BaseException) -> Optional[int]:
    """The exit code when `error` ended the run because of a signal, None when it is an error
    of its own. A rank whose peers are gone (their signal came first) waits for its own."""
    if isinstance(error, KeyboardInterrupt):
        _state.settled = True
        code = pending()
        return getattr(error, "code", EXIT_SIGINT if code is None else code)
    if _state.signum is None and peers_gone(error):
        _state.holds += 1  # the signal is awaited here, not raised
        try:
            deadline = time.monotonic() + PEER_WAIT_S
            while _state.signum is None and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            _state.holds -= 1
    _state.settled = _state.settled or _state.signum is not None
    return pending()


def peers_gone(error: BaseException) -> bool:
    """Does `error` say that Horovod's other ranks are gone (under a launcher of several)?"""
    text = f"{type(error).__name__} {error}".lower()
    return launcher_size() > 1 and ("horovod" in text or "gloo" in text)
