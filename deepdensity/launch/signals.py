"""What a launcher and its ranks agree on about interrupts: the signals that interrupt a run, the
exit status of each, the signal `deepdensity launch` relays through mpirun, and the terminal's
'^C' line. The ranks' handling is training/interrupts.py; the relaying is relay.py."""

from __future__ import annotations

import os
import signal
import sys

from deepdensity.utils.errors import EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM, launcher_rank

# the signals that interrupt a run, and the exit status a shell reports for each
CODES = {signal.SIGINT: EXIT_SIGINT, signal.SIGTERM: EXIT_SIGTERM, signal.SIGHUP: EXIT_SIGHUP}
# an interrupt `deepdensity launch` passed on through mpirun (relay.py); a rank takes it only
# under launch, and exits 0 on it
RELAYED = signal.SIGUSR1


def tidy_terminal(signum: int) -> None:
    """On a terminal (rank 0's), the line the terminal echoed '^C' on is rewritten as '^C' alone:
    a progress bar it was echoed after is erased, and the lines that follow start below it.
    SIGTERM erases a bar only. Written to the file descriptor, not through sys.stderr, which the
    interrupted code may be in the middle of writing."""
    if launcher_rank() != 0:
        return
    try:
        fd = sys.stderr.fileno()
        if os.isatty(fd):
            os.write(fd, b"\r\x1b[K" + (b"^C\n" if signum == signal.SIGINT else b""))
    except (AttributeError, ValueError, OSError):
        pass
