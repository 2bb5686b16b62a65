"""The words that say where an interrupted run stands and how it goes on.

Rank 0 writes them as it stops (training/cli.py, `where_to_continue`). `deepdensity launch` writes
them from the run folder when no rank did: under Gloo horovodrun SIGKILLs a rank 5 s after its
SIGTERM (runner/common/util/safe_shell_exec.py), and on a loaded host rank 0 can be killed before
it reaches a point that takes the signal. Its last checkpoint is on disk either way (state.json is
replaced whole, utils/files.py), so the folder says what the rank would have said.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from deepdensity.utils.errors import shell_word

# set by scripts/slurm/train.sbatch under REQUEUE=1: the job that puts itself back in the queue
REQUEUE_JOB_ENV = "DEEPDENSITY_REQUEUE_JOB"
# set by a batch script (scripts/slurm/train.sbatch) to the command that submits it again
RELAUNCH_ENV = "DEEPDENSITY_RELAUNCH"


def _state(out) -> Optional[dict]:
    """The run folder's state.json, or None where it has none that reads."""
    try:
        state = json.loads((Path(out) / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _epochs(state: Optional[dict]) -> Optional[int]:
    try:
        return state["epoch"] + 1
    except (KeyError, TypeError):
        return None


def checkpointed_epoch(out) -> Optional[int]:
    """The number of epochs the run folder `out` holds checkpointed (state.json), or None."""
    return _epochs(_state(out))


def relaunch(launcher: str) -> str:
    """What goes in front of train.py's own words to run it again: the batch script's command
    (RELAUNCH_ENV), else `launcher` (e.g. 'horovodrun -np 2 ', '' for one process) and train.py."""
    again = os.environ.get(RELAUNCH_ENV)
    return f"{again} " if again else f"{launcher}python train.py "


def goes_on(requeued_does: str, command: str) -> str:
    """How the run goes on: a Slurm job that requeues itself (REQUEUE_JOB_ENV) `requeued_does`,
    else the user runs `command`."""
    job = os.environ.get(REQUEUE_JOB_ENV)
    return f"Slurm job {job} requeues itself and {requeued_does}" if job else command


def quoted(words: list) -> str:
    """train.py's words, quoted for a shell."""
    return " ".join(shell_word(w) for w in words)


def resumed_words(words: list) -> str:
    """train.py's words, quoted for a shell, with --resume."""
    return quoted(list(words) + ([] if "--resume" in words else ["--resume"]))


def at_checkpoint(out, epoch: int, words: list, launcher: str) -> str:
    """A run checkpointed at `epoch`: where it stands, and the command that continues it."""
    return f"at epoch {epoch}, checkpointed in {out}; " + goes_on(
        "continues it", f"continue with: {relaunch(launcher)}{resumed_words(words)}"
    )


def start_again(words: list, launcher: str) -> str:
    """A run with nothing to continue: the command that starts it again, the same one."""
    return goes_on("starts it again", f"start again with the same command: {relaunch(launcher)}{quoted(words)}")


def before_the_run(words: list, launcher: str) -> str:
    """Where a run stands when interrupted before it began (its process still importing, nothing
    of its own written yet): the checkpoint its --out folder holds from an earlier start, if
    any, else nothing done; and the command that goes on."""
    out = out_of(words)
    epoch = checkpointed_epoch(out) if out else None
    if epoch is not None:
        return at_checkpoint(out, epoch, words, launcher)
    return "no epoch finished; " + start_again(words, launcher)


def out_of(words: list) -> Optional[str]:
    """The run folder train.py's `words` name with --out (the last one, as argparse takes it)."""
    found = None
    for i, word in enumerate(words):
        if word == "--out" and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith("--out="):
            found = word.split("=", 1)[1]
    return found


def unsaid_line(command: list, launcher: str) -> Optional[str]:
    """The line rank 0 would have written for the interrupted `command` (`python train.py ...`,
    `python -m deepdensity train ...` or `deepdensity train ...`), read from its run folder's
    checkpoint; None for another command, a folder without a checkpoint (nothing there to
    continue) or a run that had finished."""
    words = next(
        (
            command[i + 1 :]
            for i, w in enumerate(command)
            if Path(w).name == "train.py" or (w == "train" and i and Path(command[i - 1]).name == "deepdensity")
        ),
        [],
    )
    out = out_of(words)
    state = _state(out) if out else None
    # a run that had ended (its state no longer "running", its result.json written) was not
    # interrupted: the signal came after it
    if state is None or (state.get("status") != "running" and (Path(out) / "result.json").exists()):
        return None
    epoch = _epochs(state)
    return None if epoch is None else "interrupted: " + at_checkpoint(out, epoch, words, launcher)


def say_where_it_stands(argv: list, cmd: list, launcher: str, spoke: bool) -> bool:
    """For `deepdensity launch argv` (running `cmd` with `launcher` as its prefix), interrupted
    and no rank said where the run stands: rank 0's words from the run folder's checkpoint, or,
    for a job whose ranks never spoke, that it starts again with the same command. Returns
    whether a line was printed."""
    # Horovod: under Gloo horovodrun SIGKILLs a rank 5 s after its SIGTERM, which on a loaded host
    # can come before rank 0 said where the run stands: its checkpoint does
    unsaid = unsaid_line(cmd, launcher)
    if unsaid:
        print(unsaid, file=sys.stderr)
    elif not spoke:
        # Horovod: horovodrun was stopped before any rank said a word
        print(
            f"interrupted before the workers started: start again with the same command: "
            f"{shlex.join(['python', '-m', 'deepdensity', 'launch', *argv])}",
            file=sys.stderr,
        )
    return bool(unsaid) or not spoke
