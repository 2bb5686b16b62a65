"""A terminal for tests: a command run in a pseudo-terminal the way a shell runs a foreground
job, Ctrl-C typed as a key (the terminal's line discipline echoes ^C and sends SIGINT to the
job's whole process group, horovodrun's included), and the screen as a person reads it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from pathlib import Path

COLUMNS = 120
CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


class Terminal:
    """One command on a terminal of COLUMNS columns; `raw` is everything it wrote."""

    def __init__(self, argv: list, cwd, env: dict, columns: int = COLUMNS):
        self.raw, self.columns, self.code = "", columns, None
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the session leader, the terminal's foreground job
            try:
                os.chdir(cwd)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.started = time.monotonic()

    def read(self, seconds: float) -> bool:
        """Take what the command writes for up to `seconds`; False once it closed the terminal."""
        ready, _, _ = select.select([self.fd], [], [], max(seconds, 0))
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: every process of the job closed the terminal
            return False
        self.raw += data.decode("utf-8", "replace")
        return bool(data)

    def wait_for(self, condition, timeout: float) -> bool:
        """Read until condition(self) holds (True) or the command ends or the time is up (False)."""
        deadline = time.monotonic() + timeout
        while not condition(self):
            if time.monotonic() > deadline or not self.read(0.005):
                return False
        return True

    def drain(self) -> None:
        """Take what the command has written so far: what its screen shows now."""
        while select.select([self.fd], [], [], 0)[0] and self.read(0):
            pass

    def ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")

    def finish(self, timeout: float) -> int:
        """Read to the end; the command's exit status as a shell reports it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.read(0.1):
            pass
        end = time.monotonic() + max(deadline - time.monotonic(), 1)
        while time.monotonic() < end:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.code = os.waitstatus_to_exitcode(status)
                os.close(self.fd)
                return self.code if self.code >= 0 else 128 - self.code
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"{self.raw[-3000:]}\n(still running after {timeout:.0f} s)")

    def screen(self) -> list:
        return screen(self.raw, self.columns)


def screen(raw: str, columns: int = COLUMNS) -> list:
    """The lines a terminal shows after `raw`: carriage returns, erasing to the end of the line
    (ESC [K) or the whole line (ESC [2K), the cursor up (ESC [A) and wrapping at `columns`;
    other escape sequences are dropped."""
    lines, row, col = [""], 0, 0

    def put(ch):
        nonlocal row, col
        if col >= columns:  # the terminal wraps before the next character
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        line = lines[row].ljust(col)
        lines[row] = line[:col] + ch + line[col + 1 :]
        col += 1

    i = 0
    while i < len(raw):
        m = CSI.match(raw, i)
        if m:
            arg, op = m.group(1), m.group(2)
            if op == "K":
                lines[row] = "" if arg == "2" else lines[row][:col]
            elif op == "A":
                row = max(0, row - int(arg or 1))
            i = m.end()
            continue
        ch = raw[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row += 1
            if row == len(lines):
                lines.append("")
            col = 0
        elif ch >= " " or ch == "\t":
            put(ch)
        i += 1
    return [line.rstrip() for line in lines]


def rank_pids(marker: str) -> list:
    """The training processes (python train.py ...) whose command line holds `marker` (a run
    folder): horovodrun's ranks once started, not horovodrun nor the shells around them."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if (
            len(argv) > 1
            and os.path.basename(argv[0]).startswith("python")
            and argv[1].endswith("train.py")
            and any(marker in a for a in argv)
        ):
            pids.append(int(entry.name))
    return pids


def run_pids(marker: str) -> list:
    """Every process whose command line holds `marker` (a run folder): the ranks, and horovodrun,
    mpirun and the shell between them, which carry the ranks' command line. Not this one."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in argv:
            pids.append(int(entry.name))
    return pids
