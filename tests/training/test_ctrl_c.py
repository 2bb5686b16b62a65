"""Ctrl-C typed on a terminal under `horovodrun -np 2` (issue 47), 30 times, at moments spread
over a run: while the ranks import TensorFlow or start Horovod, before the first step, during
the first step's compilation, during steps, validation and checkpoints, while a resumed run
restores. Each time: no traceback and no noise from any rank, rank 1 silent, rank 0's one line
says where the run stands and the command that continues it, no worker left, a run folder whose
rows and checkpoint agree. The interrupts form a chain, each one run on the command the one
before printed, as pasted by a user; the last command, left to finish, ends with the losses of
the same run never interrupted. `deepdensity launch` in a chain of its own, which also shows
'^C' on a line of its own and nothing after rank 0's line."""
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deepdensity.training import controllers
from tests.support import ROOT, SMOKE, horovodrun
from tests.training.terminal import Terminal, rank_pids

EPOCHS = 48            # more than the chain's interrupts can use up (each moves it at most two epochs)
WIDE = 1000            # columns: no line of the ranks wraps, so each screen line is one line written
# a rank's tag: Gloo's [rank], mpirun's [job,rank] (horovodrun runs under MPI where it is built)
RANK0 = r"\[(?:1,)?0\]"
RANK_LINE = re.compile(r"^\[(?:\d+,)?(\d+)\]<std(?:out|err)>:(.*)$")
EPOCH_LINE = re.compile(rf"^{RANK0}<stdout>:epoch +\d+  loss ")
INTERRUPTED = re.compile(rf"^{RANK0}<stderr>:interrupted: ")
NOISE = re.compile(r"Traceback|Error|MISMATCH|Terminated|Killed|absl|XLA|oneDNN|cpu_feature_guard|SetPriority|"
                   r"is slow compared|^[IWEF]\d{4} |^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
# horovodrun's own last words after a rank exited non-zero (runner/gloo_run.py), which plain
# horovodrun prints and `deepdensity launch` drops (docs/training.md says why); its threads may
# print two exit notes on one line
HOROVODRUN_END = re.compile(r"^((?:Process \d+ exit with status code 143\.)+|Traceback \(most recent call last\):|  .*|"
                            r"RuntimeError: Horovod detected that one or more processes exited with non-zero status.*|"
                            r"Process name: \d+|Exit code: 143|)$")

# (what the interrupt waits for, seconds after it); "ranks": both rank processes exist;
# "line": a pattern of the output; "file": a new file in the run folder matching a pattern
# (a rank's first ~0.03 s, Python's own start before train.py's first line, is out of reach:
# docs/training.md)
RANKS_IMPORTING = [("ranks", 1.0), ("ranks", 2.0)]
BEFORE_STEPS = [("line", rf"{RANK0}<stdout>:threads per process", 0.0),      # model built, weights broadcast
                ("line", rf"{RANK0}<stdout>:threads per process", 1.5)]      # the first step, compiling
RESTORING = [("line", rf"{RANK0}<stdout>:resumed from epoch", 0.0), ("line", rf"{RANK0}<stdout>:resumed from epoch", 1.0)]
EPOCHS_ON = [("line", rf"{RANK0}<stdout>:epoch +\d+ ", d) for d in (0.0, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3)]
CHECKPOINTS = [("file", "ckpt/*.index", 0.0)] * 3      # a new checkpoint on disk, state.json not yet moved on
PLAIN = RANKS_IMPORTING + BEFORE_STEPS + [EPOCHS_ON[0]] + RESTORING + EPOCHS_ON[1:] + CHECKPOINTS \
    + [("ranks", 1.5), RESTORING[1], EPOCHS_ON[2], CHECKPOINTS[0], EPOCHS_ON[4], ("ranks", 3.0)]
LAUNCH = [("start", 1.0), ("ranks", 1.0), BEFORE_STEPS[1], EPOCHS_ON[0], RESTORING[0], EPOCHS_ON[3],
          CHECKPOINTS[0], EPOCHS_ON[5]]


def test_the_chains_hold_thirty_interrupts_at_every_moment():
    assert len(PLAIN) + len(LAUNCH) == 30
    kinds = {k for k, *_ in PLAIN + LAUNCH}
    assert kinds == {"start", "ranks", "line", "file"}


def user_env() -> dict:
    """A user's shell with the venv activated: its python and horovodrun first on PATH, and no
    TF_CPP_MIN_LOG_LEVEL of the tests' own."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    path = f"{Path(horovodrun()).parent}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return {**env, "PATH": path, "PYTHONPATH": str(ROOT)}


def train_words(data, out) -> list:
    return ["python", "train.py", "--mode", "strong", "--config", SMOKE, "--set", f"data_path={data}",
            "--set", f"max_epochs={EPOCHS}", "--out", str(out)]


def plain_start() -> list:
    """Plain horovodrun's chain runs under Gloo: its rank tags and its closing lines after a
    Ctrl-C are Gloo's (HOROVODRUN_END); where the build has MPI, horovodrun's default, Gloo is
    asked for by --gloo. (Under MPI, mpirun forwards a rank's stdout and stderr apart, so rank 0's
    last line can come before its epoch lines; `deepdensity launch` puts it last.)"""
    return ["horovodrun", "--gloo"] if "mpi" in controllers.built(horovodrun()) else ["horovodrun"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, smoke_data):
    """metrics.jsonl of the same run under horovodrun -np 2 (the launcher words given), never
    interrupted; one run per launcher."""
    done = {}

    def run_once(start: tuple) -> list:
        if start not in done:
            out = tmp_path_factory.mktemp("uninterrupted") / "run"
            proc = subprocess.run([*start, "-np", "2", *train_words(smoke_data, out)], cwd=ROOT, env=user_env(),
                                  capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
            done[start] = rows(out)
        return done[start]
    return run_once


def rows(out: Path) -> list:
    path = out / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def interrupt(command: list, moment: tuple, out: Path) -> Terminal:
    """Run `command` on a terminal, type Ctrl-C at `moment`, read to the end."""
    kind, arg = moment[0], moment[1] if len(moment) == 3 else None
    delay = moment[-1]
    before = set(out.glob(arg)) if kind == "file" else set()
    term = Terminal(command, ROOT, user_env(), columns=WIDE)
    came = {"start": lambda t: True,
            "ranks": lambda t: len(rank_pids(str(out))) >= 2,
            "line": lambda t: re.search(arg, t.raw, re.M) is not None,
            "file": lambda t: bool(set(out.glob(arg)) - before)}[kind]
    assert term.wait_for(came, 300), f"{moment} never came:\n{term.raw[-3000:]}"
    time.sleep(delay)
    term.ctrl_c()
    term.finish(180)
    return term


def check_the_ending(term: Terminal, out: Path, launch: bool) -> list:
    """What the interrupt printed, checked; returns the command it says continues the run."""
    lines = [line for line in term.screen() if line.strip()]
    said = "\n".join(lines[-40:])
    noise = [line for line in lines if RANK_LINE.match(line) and NOISE.search(RANK_LINE.match(line)[2])]
    assert noise == [], said
    assert not [line for line in lines if RANK_LINE.match(line) and RANK_LINE.match(line)[1] == "1"], \
        f"rank 1 printed:\n{said}"
    if launch:      # horovodrun's own TensorFlow banners too (launch passes TF_CPP_MIN_LOG_LEVEL on)
        assert not [line for line in lines if not RANK_LINE.match(line) and NOISE.search(line)], said
    caret = next(i for i, line in enumerate(lines) if "^C" in line)
    after = [lines[caret].split("^C", 1)[1]] + lines[caret + 1:]
    ranks = [line for line in after if RANK_LINE.match(line)]
    early = launch and not ranks          # Ctrl-C before horovodrun started a rank
    if early:
        assert after == ["", after[1]] and after[1].startswith("interrupted before the workers started"), said
        assert term.code == 130 and not (out / "state.json").exists() and rows(out) == [], said
        return shlex.split(after[1].split("start again with the same command: ", 1)[1])
    # horovodrun passes the Ctrl-C on to the ranks a moment after the terminal echoed it: an
    # epoch that ended meanwhile still prints its line; then rank 0's one line, its last
    *epochs, last = ranks
    assert all(EPOCH_LINE.match(line) for line in epochs), said
    assert INTERRUPTED.match(last), said
    if launch:
        assert lines[caret] == "^C" and after == ["", *ranks] and term.code == 130, said
    else:
        assert all(HOROVODRUN_END.match(line) for line in after[after.index(last) + 1:]), said
        # 1 from its RuntimeError, or 0 when horovodrun lost the ranks' 143 (docs/training.md)
        assert term.code in (0, 1), said
    assert rank_pids(str(out)) == [], "no rank left running"
    check_the_folder(out, last)
    words = re.split(r"continue with: |start again with the same command: ", last, maxsplit=1)[1]
    return shlex.split(words)


def check_the_folder(out: Path, line: str) -> None:
    """The folder holds whole epochs: as many rows as the checkpoint state.json names, which the
    line names too; nothing half-written."""
    assert not list(out.glob("**/*.tmp*")), "no temporary file left behind"
    state = json.loads((out / "state.json").read_text()) if (out / "state.json").exists() else None
    epochs = state["epoch"] + 1 if state else 0
    assert [r["epoch"] for r in rows(out)] == list(range(1, epochs + 1)), line
    if state:
        assert f"at epoch {epochs}, checkpointed in {out}" in line and (out / f"{state['checkpoint']}.index").exists()
    else:
        assert "no epoch finished" in line


@pytest.mark.slow
@pytest.mark.parametrize("launch, moments", [(False, PLAIN), (True, LAUNCH)], ids=["horovodrun", "launch"])
def test_ctrl_c_at_any_moment_ends_cleanly_and_the_printed_command_continues_the_run(
        tmp_path, smoke_data, uninterrupted, launch, moments):
    out = tmp_path / "run"
    start = ["python", "-m", "deepdensity", "launch"] if launch else plain_start()
    command = [*start, "-np", "2", *train_words(smoke_data, out)]
    for n, moment in enumerate(moments):
        term = interrupt(command, moment, out)
        try:
            command = check_the_ending(term, out, launch)
        except (AssertionError, StopIteration, IndexError) as e:
            raise AssertionError(f"interrupt {n + 1} of {len(moments)} at {moment}: {e}") from None
        # rank 0's line names the controller horovodrun ran the ranks under: Gloo (its default
        # only where the build has no MPI)
        printed = start if launch else ["horovodrun", "--gloo"]
        assert command[:len(printed)] == printed and command[-1] in ("--resume", str(out)), command
    done = Terminal(command, ROOT, user_env(), columns=WIDE)
    assert done.finish(900) == 0, done.raw[-3000:]
    assert f"stopped at the epoch cap ({EPOCHS}) after {EPOCHS} epochs" in done.raw
    got = rows(out)
    assert [r["epoch"] for r in got] == list(range(1, EPOCHS + 1)), "each epoch once, none lost, none twice"
    for mine, theirs in zip(got, uninterrupted(tuple(start))):
        assert (mine["loss"], mine["val_loss"]) == (theirs["loss"], theirs["val_loss"]), (mine, theirs)
