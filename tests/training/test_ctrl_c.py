"""Interrupts of a run under `horovodrun -np 2` (issues 47, 55 and 70), 34 in all, at moments
spread over a run: while the ranks import TensorFlow or start Horovod, before the first step,
during the first step's compilation, during steps, validation and checkpoints, while a resumed
run restores. Ctrl-C typed on a terminal, SIGTERM as a scheduler sends it to the launcher alone,
SIGHUP as a closed ssh session does. Each time: no traceback and no noise from any rank, rank 1
silent, rank 0's one line says where the run stands and the command that continues it, no
process of the run left, a run folder whose rows and checkpoint agree.
The interrupts form chains, each one run on the command the one before printed, as pasted by a
user; the last command, left to finish, ends with the losses of the same run never interrupted.
Plain horovodrun's chains: Ctrl-C under Gloo (docs/training.md says why SIGTERM and SIGHUP need
`deepdensity launch` there), and Ctrl-C, SIGTERM and SIGHUP under MPI, the build's default, where
the ranks notice their launcher is gone. launch's chains run under MPI and under Gloo, and also
show the signal's exit status, '^C' on a line of its own and nothing after rank 0's line."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deepdensity.launch import controllers
from tests.support import ROOT, SMOKE, horovodrun
from tests.training.terminal import Terminal, rank_pids, run_pids, screen

EPOCHS = 32  # more than a chain's interrupts can use up (each moves it at most two epochs)
WIDE = 1000  # columns: no line of the ranks wraps, so each screen line is one line written
# a rank's tag: Gloo's [rank], mpirun's [job,rank] (horovodrun runs under MPI where it is built)
RANK0 = r"\[(?:1,)?0\]"
RANK_LINE = re.compile(r"^\[(?:\d+,)?(\d+)\]<std(?:out|err)>:(.*)$")
EPOCH_LINE = re.compile(rf"^{RANK0}<stdout>:epoch +\d+  loss ")
RESUMED = re.compile(rf"^{RANK0}<stdout>:resumed from epoch \d+ of ")
INTERRUPTED = re.compile(rf"^{RANK0}<stderr>:interrupted: ")
TAG = re.compile(r"\[(?:\d+,)?\d+\]<std(?:out|err)>:")
NOISE = re.compile(
    r"Traceback|Error|MISMATCH|Terminated|Killed|absl|XLA|oneDNN|cpu_feature_guard|SetPriority|"
    r"is slow compared|^[IWEF]\d{4} |^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
)
# horovodrun's own last words after a rank exited non-zero (runner/gloo_run.py), which plain
# horovodrun prints and `deepdensity launch` drops (docs/training.md says why); its threads may
# print two exit notes on one line
HOROVODRUN_END = re.compile(
    r"^((?:Process \d+ exit with status code 143\.)+|Traceback \(most recent call last\):|  .*|"
    r"RuntimeError: Horovod detected that one or more processes exited with non-zero status.*|"
    r"Process name: \d+|Exit code: 143|)$"
)

# (what the interrupt waits for, seconds after it); "ranks": both rank processes exist;
# "line": a pattern of the output; "file": a new file in the run folder matching a pattern
# (a rank's first ~0.03 s, Python's own start before train.py's first line, is out of reach:
# docs/training.md)
RANKS_IMPORTING = [("ranks", 1.0), ("ranks", 2.0)]
BEFORE_STEPS = [
    ("line", rf"{RANK0}<stdout>:threads per process", 0.0),  # model built, weights broadcast
    ("line", rf"{RANK0}<stdout>:threads per process", 1.5),
]  # the first step, compiling
RESTORING = [
    ("line", rf"{RANK0}<stdout>:resumed from epoch", 0.0),
    ("line", rf"{RANK0}<stdout>:resumed from epoch", 1.0),
]
EPOCHS_ON = [("line", rf"{RANK0}<stdout>:epoch +\d+ ", d) for d in (0.0, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3)]
CHECKPOINTS = [("file", "ckpt/*.index", 0.0)] * 3  # a new checkpoint on disk, state.json not yet moved on
# the signals: a Ctrl-C typed, a scheduler's SIGTERM, a closed session's SIGHUP; the exit status of each
INT, TERM, HUP = signal.SIGINT, signal.SIGTERM, signal.SIGHUP
EXIT = {INT: 130, TERM: 143, HUP: 129}
PLAIN = [
    (INT, m) for m in RANKS_IMPORTING + BEFORE_STEPS + [EPOCHS_ON[0]] + RESTORING + EPOCHS_ON[1:6:2] + CHECKPOINTS[:2]
]
# under MPI: SIGTERM at eight moments, from the ranks' start to a resumed run's restore, and a
# Ctrl-C and a SIGHUP beside them (mid-epoch Ctrl-C and SIGHUP under MPI: PLAIN_MPI below)
LAUNCH_MPI = [
    (INT, ("start", 1.0)),
    (TERM, ("ranks", 1.0)),
    (TERM, BEFORE_STEPS[0]),
    (INT, BEFORE_STEPS[1]),
    (TERM, EPOCHS_ON[0]),
    (HUP, RESTORING[0]),
    (TERM, EPOCHS_ON[2]),
    (TERM, CHECKPOINTS[0]),
    (TERM, RESTORING[1]),
    (TERM, ("ranks", 2.0)),
    (TERM, CHECKPOINTS[0]),
]
LAUNCH_GLOO = [(TERM, BEFORE_STEPS[1]), (HUP, EPOCHS_ON[1]), (INT, RESTORING[0])]
# plain horovodrun under MPI, the README's own command (issue 70): a Ctrl-C typed on its terminal,
# SIGTERM and SIGHUP to the process the user started (the shell horovodrun became), from the
# ranks' start to a resumed run's restore; the ranks notice their launcher is gone
# (training/launcher_watch.py)
PLAIN_MPI = [
    (INT, RANKS_IMPORTING[0]),
    (TERM, BEFORE_STEPS[1]),
    (HUP, EPOCHS_ON[0]),
    (TERM, CHECKPOINTS[0]),
    (INT, RESTORING[0]),
    (TERM, EPOCHS_ON[3]),
    (HUP, RESTORING[1]),
    (TERM, EPOCHS_ON[5]),
]
# three chains: under Gloo plain horovodrun's, then the same run continued under `deepdensity
# launch --gloo` (a user who switches launchers); under MPI launch's, and plain horovodrun's
CHAINS = {
    "gloo": [("horovodrun", *m) for m in PLAIN] + [("launch", *m) for m in LAUNCH_GLOO],
    "mpi": [("launch", *m) for m in LAUNCH_MPI],
    "plain-mpi": [("horovodrun", *m) for m in PLAIN_MPI],
}
CONTROLLER = {"gloo": "gloo", "mpi": "mpi", "plain-mpi": "mpi"}


def test_the_chains_hold_interrupts_at_every_moment_and_eight_to_plain_horovodrun_under_mpi():
    every = [m for chain in CHAINS.values() for m in chain]
    assert len(every) == 34
    assert {k for _, _, (k, *_) in every} == {"start", "ranks", "line", "file"}
    assert {s for s, _ in LAUNCH_MPI} == {s for s, _ in LAUNCH_GLOO} == {s for s, _ in PLAIN_MPI} == {INT, TERM, HUP}
    assert sum(s == TERM for s, _ in LAUNCH_MPI) >= 8
    # plain horovodrun under MPI: at least 8, start-up and mid-epoch included (issue 70)
    assert len(PLAIN_MPI) >= 8 and RANKS_IMPORTING[0] in [m for _, m in PLAIN_MPI]
    assert {m for _, m in PLAIN_MPI} & set(EPOCHS_ON[1:]), "an interrupt inside an epoch"


def user_env() -> dict:
    """A user's shell with the venv activated: its python and horovodrun first on PATH, and no
    TF_CPP_MIN_LOG_LEVEL of the tests' own."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    path = f"{Path(horovodrun()).parent}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return {**env, "PATH": path, "PYTHONPATH": str(ROOT)}


def train_words(data, out) -> list:
    return [
        "python",
        "train.py",
        "--mode",
        "strong",
        "--config",
        SMOKE,
        "--set",
        f"data_path={data}",
        "--set",
        f"max_epochs={EPOCHS}",
        "--out",
        str(out),
    ]


def plain_start() -> list:
    """Plain horovodrun's chain runs under Gloo: its rank tags and its closing lines after a
    Ctrl-C are Gloo's (HOROVODRUN_END); where the build has MPI, horovodrun's default, Gloo is
    asked for by --gloo. (Under MPI, mpirun forwards a rank's stdout and stderr apart, so rank 0's
    last line can come before its epoch lines; `deepdensity launch` puts it last.)"""
    return ["horovodrun", "--gloo"] if "mpi" in controllers.built(horovodrun()) else ["horovodrun"]


LAUNCH_WORDS = ["python", "-m", "deepdensity", "launch"]


def start_words(launcher: str, controller: str) -> list:
    """The words that start a command: plain horovodrun or launch, and the controller."""
    if controller == "mpi" and "mpi" not in controllers.built(horovodrun()):
        pytest.skip("this Horovod was built without MPI")
    if launcher == "horovodrun":
        return plain_start() if controller == "gloo" else ["horovodrun"]  # MPI: its default where built
    return LAUNCH_WORDS if controller == "mpi" else [*LAUNCH_WORDS, "--gloo"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, smoke_data):
    """metrics.jsonl of the same run under `deepdensity launch -np 2`, never interrupted; one run
    per controller (plain horovodrun's chain and launch's under Gloo run the same ranks)."""
    done = {}

    def run_once(controller: str) -> list:
        if controller not in done:
            out = tmp_path_factory.mktemp("uninterrupted") / "run"
            words = [*LAUNCH_WORDS, f"--{controller}", "-np", "2", *train_words(smoke_data, out)]
            proc = subprocess.run(words, cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
            done[controller] = rows(out)
        return done[controller]

    return run_once


def rows(out: Path) -> list:
    path = out / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def interrupt(command: list, signum: int, moment: tuple, out: Path) -> tuple:
    """Run `command` on a terminal, at `moment` type Ctrl-C (SIGINT) or send the launcher
    `signum`, read to the end. Returns the terminal and how much it had written by the signal."""
    kind, arg = moment[0], moment[1] if len(moment) == 3 else None
    delay = moment[-1]
    before = set(out.glob(arg)) if kind == "file" else set()
    term = Terminal(command, ROOT, user_env(), columns=WIDE)
    came = {
        "start": lambda t: True,
        "ranks": lambda t: len(rank_pids(str(out))) >= 2,
        # a line has come once it is whole: a read can end inside a launcher's write
        "line": lambda t: re.search(arg + r"[^\n]*\n", t.raw, re.M) is not None,
        "file": lambda t: bool(set(out.glob(arg)) - before),
    }[kind]
    assert term.wait_for(came, 300), f"{moment} never came:\n{term.raw[-3000:]}"
    time.sleep(delay)
    term.drain()  # what reached the terminal by the signal, read or not
    written = len(term.raw)
    if signum == INT:
        term.ctrl_c()
    else:
        os.kill(term.pid, signum)  # the launcher alone, as a scheduler or a closed session does
    term.finish(180)
    return term, written


def lines_after(term: Terminal, signum: int, written: int) -> tuple:
    """(every non-empty line on the screen, the lines from the signal on). After a Ctrl-C, from
    the terminal's '^C' (the part of its line after it first); after another signal, from the
    line the output had reached when it was sent."""
    lines = [line for line in term.screen() if line.strip()]
    if signum == INT:
        caret = next(i for i, line in enumerate(lines) if "^C" in line)
        return lines, [lines[caret].split("^C", 1)[1]] + lines[caret + 1 :]
    seen = [line for line in screen(term.raw[:written], term.columns) if line.strip()]
    whole = term.raw[:written].endswith("\n")
    return lines, lines[len(seen) - (0 if whole or not seen else 1) :]


def check_the_ending(term: Terminal, signum: int, written: int, out: Path, launch: bool, mpi: bool = False) -> list:
    """What the interrupt printed, checked; returns the command it says continues the run.
    `mpi`: plain horovodrun under MPI, whose mpirun forwards a rank's stdout and stderr apart, so
    that rank 0's line can come before its last epochs' lines."""
    lines, after = lines_after(term, signum, written)
    said = "\n".join(lines[-40:])
    noise = [line for line in lines if RANK_LINE.match(line) and NOISE.search(RANK_LINE.match(line)[2])]
    assert noise == [], said
    # a line whose newline left in a write of its own shows the next chunk's tag at its end
    torn = [line for line in lines if RANK_LINE.match(line) and TAG.search(RANK_LINE.match(line)[2])]
    assert torn == [], said
    assert not [line for line in lines if RANK_LINE.match(line) and RANK_LINE.match(line)[1] == "1"], (
        f"rank 1 printed:\n{said}"
    )
    if launch:  # horovodrun's own TensorFlow banners too (launch passes TF_CPP_MIN_LOG_LEVEL on)
        assert not [line for line in lines if not RANK_LINE.match(line) and NOISE.search(line)], said
    # under launch a Ctrl-C's '^C' stands on a line of its own: what follows it on its line is
    # empty (under plain horovodrun, rank 0's line goes on there)
    told = after[1:] if signum == INT and launch else after
    assert not (signum == INT and launch) or after[0] == "", said
    ranks = [line for line in told if RANK_LINE.match(line)]
    early = launch and not ranks  # an interrupt before any rank spoke: launch's own line
    if early and not (out / "state.json").exists():
        assert len(told) == 1 and told[0].startswith("interrupted before the workers started"), said
        assert term.code == EXIT[signum] and rows(out) == [], said
        return shlex.split(told[0].split("start again with the same command: ", 1)[1])
    if launch and told and told[-1].startswith("interrupted: at epoch "):
        # no rank said where the run stands (a resumed run's ranks still starting, or rank 0
        # killed before its line): launch says it in rank 0's words, from the checkpoint
        # (launch/continuing.py)
        epochs, last = ranks, told[-1]
        assert [line for line in told if not RANK_LINE.match(line)] == [last] and term.code == EXIT[signum], said
    elif mpi and not launch:
        # plain horovodrun under MPI: rank 0's one line, wherever mpirun put it among the epochs'
        said_where = [line for line in ranks if INTERRUPTED.match(line)]
        assert len(said_where) == 1, said
        epochs, last = [line for line in ranks if line not in said_where], said_where[0]
        assert [line for line in told if not RANK_LINE.match(line)] == [], f"exit {term.code}:\n{said}"
    else:
        # the launcher passes the interrupt on to the ranks a moment after it came: an epoch
        # that ended meanwhile still prints its line, a resume that finished restoring its own;
        # then rank 0's one line, its last
        *epochs, last = ranks
        assert INTERRUPTED.match(last), said
        if launch:
            assert told == ranks and term.code == EXIT[signum], f"exit {term.code}:\n{said}"
        else:
            assert all(HOROVODRUN_END.match(line) for line in told[told.index(last) + 1 :]), said
            # 1 from its RuntimeError, or 0 when horovodrun lost the ranks' 143 (docs/training.md)
            assert term.code in (0, 1), said
    assert all(EPOCH_LINE.match(line) or RESUMED.match(line) for line in epochs), said
    check_nothing_left(out)
    check_the_folder(out, last)
    words = re.split(r"continue with: |start again with the same command: ", last, maxsplit=1)[1]
    return shlex.split(words)


def check_nothing_left(out: Path) -> None:
    """No process of the run (a rank, mpirun, horovodrun, a shell between them: any whose
    command line names its folder) is alive 10 s after the launcher ended."""
    deadline = time.monotonic() + 10
    while run_pids(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run_pids(str(out)) == [], "a process of the run was left running"


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
@pytest.mark.parametrize("name", list(CHAINS))
def test_an_interrupt_at_any_moment_ends_cleanly_and_the_printed_command_continues_the_run(
    tmp_path, smoke_data, uninterrupted, name
):
    out = tmp_path / "run"
    chain, controller = CHAINS[name], CONTROLLER[name]
    command = [*start_words(chain[0][0], controller), "-np", "2", *train_words(smoke_data, out)]
    for n, (launcher, signum, moment) in enumerate(chain):
        start, launch = start_words(launcher, controller), launcher == "launch"
        if command[: len(start)] != start:  # the user goes on under launch: the same words after it
            command = [*start, *command[command.index("-np") :]]
        term, written = interrupt(command, signum, moment, out)
        try:
            command = check_the_ending(term, signum, written, out, launch, mpi=name == "plain-mpi")
        except (AssertionError, StopIteration, IndexError) as e:
            # what the terminal received, and how much of it by the signal, for a look afterwards
            # (make test-all keeps the tests' folders)
            kept = tmp_path / f"interrupt{n + 1}.terminal.json"
            kept.write_text(json.dumps({"raw": term.raw, "written": written, "code": term.code}))
            raise AssertionError(
                f"interrupt {n + 1} of {len(chain)}, {signal.Signals(signum).name} under {launcher} at {moment} "
                f"(the terminal's bytes: {kept}): {e}"
            ) from None
        # rank 0's line names the controller horovodrun ran the ranks under: Gloo (its default
        # only where the build has no MPI), or MPI, horovodrun's default where built
        printed = start if launch else ["horovodrun", "--gloo"] if controller == "gloo" else ["horovodrun", "-np"]
        assert command[: len(printed)] == printed and command[-1] in ("--resume", str(out)), command
    done = Terminal(command, ROOT, user_env(), columns=WIDE)
    assert done.finish(900) == 0, done.raw[-3000:]
    assert f"stopped at the epoch cap ({EPOCHS}) after {EPOCHS} epochs" in done.raw
    got = rows(out)
    assert [r["epoch"] for r in got] == list(range(1, EPOCHS + 1)), "each epoch once, none lost, none twice"
    for mine, theirs in zip(got, uninterrupted(controller)):
        assert (mine["loss"], mine["val_loss"]) == (theirs["loss"], theirs["val_loss"]), (mine, theirs)
