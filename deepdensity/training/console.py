"""What a training process shows: its own lines, not TensorFlow's C++ log. No TensorFlow here:
this runs first, before TensorFlow is imported.

TF_CPP_MIN_LOG_LEVEL (deepdensity/__init__.py sets 3 unless the user set it) keeps TensorFlow's
own C++ log lines (oneDNN's banner, cpu_feature_guard, XLA's "SetPriority unimplemented") from
being written at all. TensorFlow 2.15's XLA code logs through a copy of absl built into
libtensorflow_cc.so.2 with its symbols hidden: no environment variable reaches it, and its
absl::SetMinLogLevel cannot be called. Its lines ("WARNING: All log messages before
absl::InitializeLog() is called are written to STDERR", "I0000 ... device_compiler.h:186]
Compiled cluster using XLA!") came out in the middle of the first epoch's progress bar. So the
C++ side's stderr (file descriptor 2) passes through `grep -v` of absl's line format at the
severities TF_CPP_MIN_LOG_LEVEL silences, while Python's own stderr keeps the real one (a
terminal stays a terminal, and the progress bar with it).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from deepdensity.launch import controllers
from deepdensity.training import interrupts, launcher_watch
from deepdensity.utils.native_logs import native_log_pattern

_native_filter = None


def is_the_program(argv0: Optional[str] = None) -> bool:
    """Is this process a training command (train.py, deepdensity train, python -m deepdensity
    train), rather than a program that calls its main() (a test)? Only then is the process's
    stderr its to arrange."""
    prog = Path(sys.argv[0] if argv0 is None and sys.argv else argv0 or "")
    return prog.name in ("train.py", "deepdensity") or (
        prog.name == "__main__.py" and prog.parent.name == "deepdensity"
    )


def start() -> None:
    """A training process's first step: Ctrl-C, SIGTERM and SIGHUP recorded from here on (taken once
    the command runs: interrupts.handling), a rank of plain mpirun watching its launcher
    (launcher_watch.py), TensorFlow's C++ log kept off the screen."""
    interrupts.hold_early()
    launcher_watch.start()
    filter_native_logs()


def filter_native_logs() -> None:
    """Pass file descriptor 2 through grep of native_log_pattern; sys.stderr (Python's lines,
    tracebacks included) goes on writing to the stderr the process was given. grep runs in a
    session of its own, so that a terminal's Ctrl-C leaves it to pass on the last lines; it ends
    when the process's last copy of the descriptor closes. Nothing happens without grep."""
    global _native_filter
    pattern = native_log_pattern(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
    grep = shutil.which("grep")
    if pattern is None or grep is None or _native_filter is not None:
        return
    sys.stderr.flush()
    own = os.dup(2)
    _native_filter = subprocess.Popen(
        [grep, "-a", "--line-buffered", "-v", "-E", pattern],
        stdin=subprocess.PIPE,
        stdout=own,
        start_new_session=True,
        env={**os.environ, "LC_ALL": "C"},
    )
    os.dup2(_native_filter.stdin.fileno(), 2)
    _native_filter.stdin.close()
    encoding, errors = sys.stderr.encoding or "utf-8", sys.stderr.errors or "backslashreplace"
    # under mpirun a line must be one write: mpirun tags each chunk it reads, and a printed line
    # whose newline came apart ended "... --resume[1,0]<stderr>:" (controllers.under_mpirun)
    mpi = controllers.started_by_mpirun(os.environ)
    stream = io.TextIOWrapper(
        io.FileIO(own, "w"), encoding=encoding, errors=errors, line_buffering=True, write_through=not mpi
    )
    sys.stderr = controllers.whole_lines(stream) if mpi else stream
