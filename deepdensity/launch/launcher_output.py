"""horovodrun's output passed on as it comes, less what a rank's own lines already say: the launcher's
traceback for a process that exited non-zero (LauncherTraceback), its notes on a process whose exit
code its last line explains (ProcessExits); rank 0's interrupt note held to the last (LastWords)."""

from __future__ import annotations

import re

from deepdensity.launch.controllers import EXPLAINED

# horovodrun's own last words when a process exited non-zero (Horovod 0.28, runner/gloo_run.py)
LAUNCHER_FAILURE = "RuntimeError: Horovod detected that one or more processes exited with non-zero status"
# what horovodrun prints on stdout for a process that exited non-zero (gloo_run.py: _exec_command)
PROCESS_EXIT = re.compile(rb"^Process (\d+) exit with status code (-?\d+)\.\r?\n?$")
# what a rank wrote, as the launcher tags it: Gloo's [rank], mpirun --tag-output's [job,rank]
RANK_LINE = re.compile(r"^\[\d+(?:,\d+)?\]<std(?:out|err)>:(.*)", re.S)
PROCESS_FAILURE = re.compile(rb"^Terminating remaining workers after failure of Process (\d+)\.\r?\n?$")
# horovodrun prints those notes from one thread per process, and print() writes the newline
# apart: two at once come out as one line, then an empty one ("Process 0 exit … 143.Process 1 exit …")
JOINED_NOTES = re.compile(rb"(?<=\.)(?=Process \d+ exit with status code|Terminating remaining workers)")
# rank 0's interrupt note, its last line (utils/errors.py: "interrupted: at epoch 10, checkpointed in ...")
RANK0_INTERRUPTED = re.compile(r"^\[(?:\d+,)?0\]<stderr>:interrupted\b")


class LauncherTraceback:
    """Passes horovodrun's stderr on line by line, less the launcher's own traceback for a
    process that exited non-zero; keeps that process's exit code. A traceback starts at the
    start of a line (the ranks' lines carry a '[rank]<stderr>:' prefix), so it is held back
    until it shows whose it is: the launcher's ends in LAUNCHER_FAILURE and the process's name
    and exit code; any other is passed on whole."""

    def __init__(self, write):
        self.write, self.held, self.exit_code, self.in_failure = write, [], None, False
        # after a Ctrl-C horovodrun's own lines go (a traceback or a fatal error of its start-up cut
        # short, its exit report): rank 0's line says where the run stands, or launch says it
        self.quiet_own = False
        self.ranks_seen = self.rank_interrupted = False

    def quiet(self) -> None:
        """From now on horovodrun's own lines go (an interrupt came)."""
        self.quiet_own = True

    def feed(self, line: str) -> None:
        if self.in_failure:
            if line.startswith("Exit code:") and line.split(":", 1)[1].strip().lstrip("-").isdigit():
                self.exit_code = int(line.split(":", 1)[1])
                return
            if line.startswith("Process name:") or not line.strip():
                return
            self.in_failure = False
        if self.held:
            if line.startswith(LAUNCHER_FAILURE):
                self.held, self.in_failure = [], True
                return
            if line.startswith(" "):  # a frame of the traceback held back
                self.held.append(line)
                return
            self.flush()
        if line.startswith("Traceback (most recent call last):"):
            self.held = [line]
        else:
            self._say(line)

    def flush(self) -> None:
        for line in self.held:
            self._say(line)
        self.held = []

    def _say(self, line: str) -> None:
        rank = RANK_LINE.match(line)
        if rank:
            self.ranks_seen = True
            self.rank_interrupted = self.rank_interrupted or rank[1].startswith("interrupted")
        elif self.quiet_own:
            return
        self.write(line)


class LastWords:
    """Passes the ranks' stderr on, less rank 0's interrupt note, which it holds until
    horovodrun has ended (flush). The note is the rank's last line, but mpirun forwards a
    rank's stdout and stderr on channels of their own and does not keep their order: under MPI
    "interrupted: at epoch 10, ..." came out before the rank's lines of epochs 7 to 10."""

    def __init__(self, write):
        self.write_on, self.held = write, []

    def write(self, line: str) -> None:
        if RANK0_INTERRUPTED.match(line):
            self.held.append(line)
        else:
            self.write_on(line)

    def flush(self) -> None:
        for line in self.held:
            self.write_on(line)
        self.held = []


class ProcessExits:
    """Passes horovodrun's stdout on, less its notes on a process that exited with a code its
    own last line explains (EXPLAINED: rank 0's error line, or where an interrupted run stands):
    'Process 0 exit with status code 143.' and 'Terminating remaining workers after failure of
    Process 0.' Others stay: a rank that crashed is named."""

    def __init__(self, write):
        self.write, self.explained, self.ranks_seen, self.ended = write, set(), False, False
        self.newlines_owed = 0  # the empty lines that follow notes printed as one line

    def feed(self, line: bytes) -> None:
        if self.newlines_owed and line.strip() == b"":
            self.newlines_owed -= 1
            return
        if RANK_LINE.match(line.decode(errors="replace")):  # a rank's own words are never split
            self._feed_one(line)
            return
        notes = JOINED_NOTES.split(line)
        self.newlines_owed += len(notes) - 1
        for note in notes[:-1]:
            self._feed_one(note + b"\n")
        self._feed_one(notes[-1])

    def _feed_one(self, line: bytes) -> None:
        self.ranks_seen = self.ranks_seen or RANK_LINE.match(line.decode(errors="replace")) is not None
        ended = PROCESS_EXIT.match(line)
        self.ended = self.ended or ended is not None
        if ended and int(ended[2]) in EXPLAINED:
            self.explained.add(ended[1])
            return
        failed = PROCESS_FAILURE.match(line)
        if failed and failed[1] in self.explained:
            return
        self.write(line)
