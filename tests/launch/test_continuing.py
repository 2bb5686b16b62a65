"""The line that says where an interrupted run stands, written by launch when no rank did
(launch/continuing.py): under Gloo horovodrun SIGKILLs a rank 5 s after its SIGTERM, and on a
loaded host rank 0 was killed before its line (issue 70); the run folder's checkpoint says it."""

import os
import signal
import subprocess
import sys
import time

import pytest

from deepdensity.launch import continuing
from deepdensity.training.cli import where_to_continue
from tests.support import ROOT

# `horovodrun --check-build` of a build with Gloo, then a job whose rank never says a word: on
# SIGTERM it ends as horovodrun does once its SIGKILL ended the ranks (exit 1), having said nothing
SILENT_HOROVODRUN = """#!/bin/sh
[ "$1" = --check-build ] && { printf "Available Controllers:\\n    [X] MPI\\n    [X] Gloo\\n"; exit 0; }
trap 'exit 1' TERM
touch "$STARTED"
while :; do sleep 0.05; done
"""


@pytest.fixture(autouse=True)
def no_batch_job(monkeypatch):
    for name in (continuing.RELAUNCH_ENV, continuing.REQUEUE_JOB_ENV):
        monkeypatch.delenv(name, raising=False)


def checkpointed(folder, epoch_index: int):
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(f'{{"epoch": {epoch_index}, "checkpoint": "ckpt/ckpt-{epoch_index}"}}')
    return folder


@pytest.mark.parametrize(
    "command",
    [
        ["python", "train.py", "--mode", "weak", "--out", "OUT"],
        ["/usr/bin/python3", "/home/u/deepdensity/train.py", "--mode", "weak", "--out=OUT"],
        ["python", "-m", "deepdensity", "train", "--mode", "weak", "--out", "OUT"],
        ["/venv/bin/deepdensity", "train", "--mode", "weak", "--out", "OUT"],
    ],
)
def test_launch_says_what_rank_0_would_have_said_from_the_checkpoint(tmp_path, command):
    out = checkpointed(tmp_path / "run", 3)
    command = [w.replace("OUT", str(out)) for w in command]
    words = command[command.index("train") + 1 :] if "train" in command else command[command.index("--mode") :]
    line = continuing.unsaid_line(command, "python -m deepdensity launch -np 2 ")
    # rank 0's own words for the same folder and launch (training/cli.py), with its prefix
    rank0 = where_to_continue(out, words)
    assert line == "interrupted: " + rank0.replace(
        "continue with: python train.py", "continue with: python -m deepdensity launch -np 2 python train.py"
    )
    assert line == (
        f"interrupted: at epoch 4, checkpointed in {out}; continue with: python -m deepdensity launch "
        f"-np 2 python train.py --mode weak {words[-1] if '=' in words[-1] else '--out ' + str(out)} "
        f"--resume"
    )


def test_without_a_checkpoint_or_a_training_command_launch_says_nothing_of_a_run(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    assert continuing.unsaid_line(["python", "train.py", "--out", str(empty)], "") is None
    assert continuing.unsaid_line(["python", "train.py", "--mode", "weak"], "") is None  # no --out
    out = checkpointed(tmp_path / "run", 0)
    assert continuing.unsaid_line(["python", "other.py", "--out", str(out)], "") is None
    assert continuing.out_of(["--out", "a", "--out=b"]) == "b" and continuing.out_of(["--out"]) is None


def test_a_run_that_had_finished_was_not_interrupted(tmp_path):
    """A signal after the ranks finished (result.json written, the state's status final): launch
    says nothing of continuing it; a run resumed from such a state says where it stands again
    once its first new checkpoint is "running"."""
    out = checkpointed(tmp_path / "run", 5)
    (out / "result.json").write_text('{"status": "max_epochs", "epochs": 6}')
    (out / "state.json").write_text('{"epoch": 5, "checkpoint": "ckpt/epoch-0006", "status": "max_epochs"}')
    assert continuing.unsaid_line(["python", "train.py", "--out", str(out)], "") is None
    (out / "state.json").write_text('{"epoch": 6, "checkpoint": "ckpt/epoch-0007", "status": "running"}')
    assert continuing.unsaid_line(["python", "train.py", "--out", str(out)], "").startswith("interrupted: at epoch 7, ")


def test_a_requeueing_job_says_so_as_rank_0_would(tmp_path, monkeypatch):
    out = checkpointed(tmp_path / "run", 6)
    monkeypatch.setenv(continuing.REQUEUE_JOB_ENV, "42")
    assert (
        continuing.unsaid_line(["python", "train.py", "--out", str(out)], "")
        == f"interrupted: at epoch 7, checkpointed in {out}; Slurm job 42 requeues itself and continues it"
    )


def _launch_silent_job_and_stop_it(tmp_path, out) -> subprocess.CompletedProcess:
    """`deepdensity launch --gloo -np 2 python train.py ... --out OUT` over a horovodrun whose
    ranks never speak, stopped by SIGTERM once it runs."""
    stand_in = tmp_path / "horovodrun"
    stand_in.write_text(SILENT_HOROVODRUN)
    stand_in.chmod(0o755)
    started = tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DEEPDENSITY_HOROVODRUN": str(stand_in), "STARTED": str(started)}
    env.pop(continuing.RELAUNCH_ENV, None)
    env.pop(continuing.REQUEUE_JOB_ENV, None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deepdensity",
            "launch",
            "--gloo",
            "-np",
            "2",
            "python",
            "train.py",
            "--mode",
            "strong",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists(), proc.communicate(timeout=30)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_a_job_whose_rank_0_was_killed_before_its_line_gets_the_line_from_launch(tmp_path):
    out = checkpointed(tmp_path / "run", 3)
    proc = _launch_silent_job_and_stop_it(tmp_path, out)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.splitlines() == [
        f"interrupted: at epoch 4, checkpointed in {out}; continue with: python -m deepdensity launch --gloo -np 2 "
        f"python train.py --mode strong --out {out} --resume"
    ], proc.stderr


def test_a_job_stopped_before_any_checkpoint_is_started_again_with_the_same_command(tmp_path):
    proc = _launch_silent_job_and_stop_it(tmp_path, tmp_path / "run")
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.splitlines() == [
        "interrupted before the workers started: start again with the same command: python -m deepdensity launch "
        f"--gloo -np 2 python train.py --mode strong --out {tmp_path / 'run'}"
    ], proc.stderr
