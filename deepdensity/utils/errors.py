"""The one way a command reports bad input: `error: <one line>` on stderr and exit status 2.

Every error a user can fix (a bad setting, a missing or damaged file, a preset that does not
parse) derives from UserError, so that one wrapper, `command`, handles them all the same.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import threading
from typing import Callable, Optional

EXIT_BAD_INPUT = 2
EXIT_SIGINT = 130  # 128 + SIGINT, as a shell reports a job ended by Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM, what a scheduler sends before it kills a job
EXIT_SIGHUP = 129  # 128 + SIGHUP, what a closed terminal or ssh session sends


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: raised where the program is, so that `finally` blocks and atomic
    writers clean up; `code` is the exit status a shell expects for that signal."""

    def __init__(self, code: int = EXIT_SIGINT, message: str = ""):
        super().__init__(*((message,) if message else ()))
        self.code = code


def raise_on_signals() -> None:
    """Make SIGTERM and SIGHUP end the program as Ctrl-C does (Python's default would end it at
    once, with no cleanup and no word). Only the main thread may set a handler; a command called
    from another thread keeps Python's default."""
    import signal
    import threading

    codes = {signal.SIGTERM: EXIT_SIGTERM, signal.SIGHUP: EXIT_SIGHUP}

    def handler(signum, frame):
        raise Interrupted(codes[signum])

    if threading.current_thread() is threading.main_thread():
        for signum in codes:
            signal.signal(signum, handler)


class UserError(ValueError):
    """Input the user can fix; the message is the whole story, so no traceback."""


class StudyError(UserError):
    """A study that cannot go on as asked: one line naming the file, the key or the run (raised
    by every stage of deepdensity/study: preset, clock, runner, Slurm, reports)."""


class _InterruptedLine:
    """A command's `interrupted` line is written once: by the main thread as the interrupt ends
    the command, or, for a training rank whose main thread could not take the signal in time,
    by the process that says it for it (training/line_watcher.py), which then claims it too."""

    lock = threading.Lock()
    said = False
    elsewhere: Optional[Callable[[], bool]] = None  # the claim shared with that process


def claim_the_interrupted_line() -> bool:
    """True for the first to ask since the command began: that one writes the line."""
    with _InterruptedLine.lock:
        first, _InterruptedLine.said = not _InterruptedLine.said, True
    return first and (_InterruptedLine.elsewhere is None or _InterruptedLine.elsewhere())


def share_the_interrupted_line(claim: Callable[[], bool]) -> None:
    """From here the line is also claimed by `claim`, which another process asks too."""
    _InterruptedLine.elsewhere = claim


def command(main=None, *, os_hint: str = ""):
    """Wrap a command's `main(argv) -> int` so that a UserError or an OSError becomes one
    `error:` line and exit 2, and Ctrl-C or SIGTERM one `interrupted` line and exit 130 or
    143 (a command that can say more, such as how to continue, raises `Interrupted` with
    its own message). `os_hint` is appended to an OSError's line (what to try)."""

    def wrap(fn):
        @functools.wraps(fn)
        def wrapped(argv=None) -> int:
            raise_on_signals()
            _InterruptedLine.said = False  # a program may run commands one after another
            try:
                return fn(argv) or 0
            except KeyboardInterrupt as e:
                code = getattr(e, "code", EXIT_SIGINT)
                if launcher_rank() == 0 and claim_the_interrupted_line():
                    print(f"interrupted{': ' + str(e) if str(e) else ''}", file=sys.stderr)
                return code
            except UserError as e:
                return _fail(str(e))
            except OSError as e:
                return _fail(_os_error_line(e, os_hint))

        return wrapped

    return wrap(main) if main is not None else wrap


def _os_error_line(e: OSError, os_hint: str) -> str:
    """One line for an OSError: the file, what went wrong, and for a full disk how much is free."""
    where = f"{e.filename}: " if e.filename else ""
    if e.errno == errno.ENOSPC:
        free = _free_mb(e.filename)
        return (
            f"{where}no space left on device"
            + (f" ({free:.0f} MB free there)" if free is not None else "")
            + "; free some space (or pass another output folder) and run the same command again"
        )
    return f"{where}{e.strerror or str(e)}" + (f"; {os_hint}" if os_hint else "")


def _free_mb(filename) -> Optional[float]:
    import shutil

    try:
        folder = os.path.dirname(os.path.abspath(filename)) if filename else os.getcwd()
        return shutil.disk_usage(folder).free / 2**20
    except OSError:
        return None


def _fail(line: str) -> int:
    # Horovod: every rank meets the same bad input; rank 0 alone says so, as it alone prints.
    # Launchers name the rank in the environment (horovodrun: HOROVOD_RANK; mpirun: OMPI_*).
    if launcher_rank() == 0:
        print(f"error: {one_line(line)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def shown(path) -> str:
    """A path (or any text the user gave) as a message shows it: as given when every character
    prints as itself, else as Python's repr, so that a newline, a tab, a space at either end or
    an invisible character is seen for what it is ('data/a\\nb.h5', not a line break or a space)."""
    text = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else str(path)
    return text if text and text.isprintable() and text == text.strip() else repr(text)


def one_line(text: str) -> str:
    """`text` with its control characters escaped (a newline as \\n), so that an `error:` line is
    one line even when it quotes something the user gave without going through `shown`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shell_word(word) -> str:
    """`word` as a POSIX shell reads it back (shlex.quote); one holding a character that does not
    print as itself (a newline, a tab) as bash's and zsh's $'...', so that a command a message
    suggests stays on one line and, pasted, passes what was given."""
    import shlex

    text = os.fsdecode(word) if isinstance(word, (bytes, os.PathLike)) else str(word)
    if text.isprintable():
        return shlex.quote(text)
    escapes = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return (
        "$'"
        + "".join(
            escapes.get(c) or (c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}")
            for c in text
        )
        + "'"
    )


# set by `deepdensity launch` (launch/horovodrun.py) for its ranks: how they were started
LAUNCH_PREFIX_ENV = "DEEPDENSITY_LAUNCH_PREFIX"


def launcher_rank(environ=None) -> int:
    """This process's rank as its launcher set it (horovodrun, mpirun, PMI), before Horovod starts; 0 alone."""
    env = os.environ if environ is None else environ
    return next(
        (int(env[k]) for k in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK") if env.get(k, "").isdigit()), 0
    )


def launcher_size(environ=None) -> int:
    """How many processes the launcher started (horovodrun, mpirun, PMI); 1 alone."""
    env = os.environ if environ is None else environ
    return next(
        (int(env[k]) for k in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE") if env.get(k, "").isdigit()), 1
    )


def launcher_prefix(environ=None) -> str:
    """How this process was launched, as a command prefix a user can paste: what `deepdensity
    launch` said it ran (LAUNCH_PREFIX_ENV); else 'horovodrun -np N ' when a launcher started
    N > 1 processes (horovodrun: HOROVOD_SIZE; mpirun: OMPI_*; PMI), with --gloo where horovodrun
    ran them under Gloo (on a build with MPI, its default, the line would otherwise go on under
    MPI) and -H for the hosts it cannot know when they were several; '' for one process."""
    env = os.environ if environ is None else environ
    if env.get(LAUNCH_PREFIX_ENV):
        return env[LAUNCH_PREFIX_ENV]
    size = launcher_size(env)
    if size <= 1:
        return ""
    hosts = int(env["HOROVOD_CROSS_SIZE"]) if env.get("HOROVOD_CROSS_SIZE", "").isdigit() else 1
    # Horovod: horovodrun sets HOROVOD_CONTROLLER=gloo for the ranks it starts under Gloo
    return horovodrun_prefix(size, gloo=env.get("HOROVOD_CONTROLLER") == "gloo", several_hosts=hosts > 1)


def horovodrun_prefix(processes: int, gloo: bool, several_hosts: bool = False) -> str:
    """'horovodrun -np N ' for a pasted command, with --gloo for a run under Gloo (on a build
    with MPI, horovodrun's default is MPI) and -H placeholders for hosts it cannot name."""
    return (
        f"horovodrun{' --gloo' if gloo else ''} -np {processes}"
        + (" -H HOST1:SLOTS,HOST2:SLOTS" if several_hosts else "")
        + " "
    )
