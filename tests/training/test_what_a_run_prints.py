"""What a run prints as a Keras user reads it: the epoch line's seconds are the epoch's own (the
run's total beside them), a resumed run says what it restored, and the messages about a run
folder agree with each other: a folder an interrupt left before epoch 1 is taken by the same
command again, and every command a message suggests runs as printed (the slow tests run them)."""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deepdensity.config import Config, load
from deepdensity.training.runs import continue_command, holds_nothing_to_resume
from deepdensity.utils.files import mark_folder
from tests.support import ROOT, SMOKE, run


class FakeClock:
    """time.perf_counter for the callbacks: it moves only when the test says, so the seconds
    on a line are known exactly (no test here depends on how fast the machine is)."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def epoch_lines(monkeypatch, elapsed_before=0.0, first_epoch=0):
    """The lines Progress prints for three epochs of known length, after EpochRow: the first one
    5 s after fit starts (tracing, the data pipeline), each epoch 0.5, 0.25 and 0.75 s long.
    Binary fractions, so the printed seconds are exact and compared as text."""
    import tensorflow as tf

    from deepdensity.scaling import policies
    from deepdensity.training import callbacks, progress

    clock = FakeClock()
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile(tf.keras.optimizers.legacy.Adam(0.001), "mse")
    record = callbacks.RunRecord(policies.plan("strong", 1), Config(max_epochs=50), 3, elapsed_before)
    said = []
    cbs = tf.keras.callbacks.CallbackList(
        [callbacks.EpochRow(record), progress.Progress(record, said.append, said.append, True)], model=model
    )
    cbs.on_train_begin()
    clock.now += 5.0
    for epoch, length in zip(range(first_epoch, first_epoch + 3), (0.5, 0.25, 0.75)):
        cbs.on_epoch_begin(epoch)
        clock.now += length
        cbs.on_epoch_end(epoch, {"loss": 0.5, "val_loss": 0.25})
    return said, record


def test_the_epoch_line_shows_the_epochs_own_seconds_and_the_total_beside_them(monkeypatch):
    said, record = epoch_lines(monkeypatch)
    assert said == [
        "epoch    1  loss 0.5  val_loss 0.25  lr 0.001     0.50s  (total 5.5s)",
        "epoch    2  loss 0.5  val_loss 0.25  lr 0.001     0.25s  (total 5.8s)",  # 5.75 rounds to even
        "epoch    3  loss 0.5  val_loss 0.25  lr 0.001     0.75s  (total 6.5s)",
    ]
    # metrics.jsonl keeps the run's clock (time to target is read from it), not the epoch's
    assert record.row["seconds"] == 6.5


def test_a_resumed_run_counts_its_total_from_the_runs_start_and_its_epochs_from_their_own(monkeypatch):
    said, _ = epoch_lines(monkeypatch, elapsed_before=100.0, first_epoch=17)
    assert said[0] == "epoch   18  loss 0.5  val_loss 0.25  lr 0.001     0.50s  (total 105.5s)"


# ------------------------------------------------------------------------------------------
# A folder left before epoch 1
# ------------------------------------------------------------------------------------------
def left_before_epoch_1(out: Path) -> Path:
    """What a run writes as it starts (its mark, run_folder.start_files), before its first checkpoint."""
    mark_folder(out, "run")
    (out / "config.json").write_text(json.dumps({**Config().to_dict(), "mode": "strong"}))
    (out / "metrics.jsonl").write_text("")
    (out / "ckpt").mkdir()
    return out


def test_a_folder_left_before_epoch_1_is_taken_again_without_resume(tmp_path):
    from deepdensity.training.run_folder import RunError, check_out_dir

    out = left_before_epoch_1(tmp_path / "run")
    assert holds_nothing_to_resume(out)
    assert check_out_dir(out, resume=False) is None  # a new run there, not "already holds a run"
    assert check_out_dir(out, resume=True) is None  # and --resume starts one too
    (out / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "val_loss": 0.1}) + "\n")
    assert not holds_nothing_to_resume(out)  # an epoch's row: refused, as before
    with pytest.raises(RunError, match="already holds a run"):
        check_out_dir(out, resume=False)
    (out / "metrics.jsonl").write_text("")
    (out / "state.json").write_text('{"epoch": 0, "elapsed_s": 1.0, "checkpoint": "ckpt/epoch-0001"}')
    with pytest.raises(RunError, match="already holds a run"):
        check_out_dir(out, resume=False)


def test_an_interrupt_before_epoch_1_suggests_the_same_command(tmp_path, monkeypatch):
    from deepdensity.training.cli import where_to_continue

    monkeypatch.delenv("DEEPDENSITY_RELAUNCH", raising=False)
    monkeypatch.delenv("DEEPDENSITY_LAUNCH_PREFIX", raising=False)
    out = left_before_epoch_1(tmp_path / "my run")
    argv = ["--mode", "strong", "--config", SMOKE, "--out", str(out)]
    said = where_to_continue(out, argv)
    assert said.startswith(f"no epoch finished, so {out} holds nothing to resume; start again with the same command: ")
    command = said.split("same command: ", 1)[1]
    assert shlex.split(command) == ["python", "train.py", *argv], "the very command, quoted for the shell"


# ------------------------------------------------------------------------------------------
# The command that finishes a run, from its config.json
# ------------------------------------------------------------------------------------------
def saved_run(cfg: Config, **over) -> dict:
    """config.json as a run writes it: the settings (tuples as lists), then the run's facts."""
    return json.loads(
        json.dumps(
            {
                **cfg.to_dict(),
                "mode": "warmup",
                "world_size": 1,
                "workers": 1,
                "emulated": False,
                "elastic": False,
                **over,
            }
        )
    )


def test_the_continue_command_gives_back_every_setting_of_the_run():
    # the smoke config, plus values --set reads back only if written with care: a path YAML would
    # take for a number, a float in e-notation, a list; and a folder with a space in its name
    cfg = load(SMOKE, ['data_path="2024"', "epsilon=1e-08", "conv_filters=[4, 4, 4]", "warmup_epochs=0"])
    assert cfg.data_path == "2024"
    saved = saved_run(cfg, workers=8, emulated=True)
    words = shlex.split(continue_command("runs/w 8", saved))
    assert words[:4] == ["python", "-m", "deepdensity", "train"]
    assert words[words.index("--mode") + 1] == "warmup" and words[words.index("--out") + 1] == "runs/w 8"
    assert "--resume" in words and words[words.index("--emulate-workers") + 1] == "8"
    sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    assert load(None, sets) == cfg, "the resume's settings are the run's, so check_resume lets it through"
    assert len(sets) == len([k for k, v in Config().to_dict().items() if cfg.to_dict()[k] != v])


def test_a_run_of_several_processes_continues_under_horovodrun():
    command = continue_command("runs/x", saved_run(Config(), world_size=2, workers=2))
    assert command.startswith("horovodrun -np 2 python -m deepdensity train --mode warmup --out runs/x --resume")


def test_a_run_horovodrun_ran_under_gloo_continues_under_gloo():
    """On a build with MPI, plain horovodrun runs under MPI: a Gloo run's line says --gloo."""
    saved = {**saved_run(Config(), world_size=2, workers=2), "launch": {"controller": "gloo"}}
    assert continue_command("runs/x", saved).startswith("horovodrun --gloo -np 2 python -m deepdensity train ")
    saved = {**saved, "launch": {"controller": "mpi"}}
    assert continue_command("runs/x", saved).startswith("horovodrun -np 2 python -m deepdensity train ")


# ------------------------------------------------------------------------------------------
# The suggestions, run (slow: they train)
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_before_epoch_1_then_the_suggested_command_trains_the_run(tmp_path, smoke_data):
    import os

    out = tmp_path / "run"
    argv = ["--mode", "strong", "--config", SMOKE, "--set", f"data_path={smoke_data}", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # the interrupt lands once the run has written its start (config.json, an empty metrics.jsonl)
    # and before its first epoch ends: that epoch traces the model first, seconds after the files
    started = []
    for line in proc.stdout:
        started.append(line)
        if line.startswith("threads per process"):  # the last line before the files are written
            break
    # the smoke settings train on 128 of the file's 256 cubes, and the run says why
    assert any(" train 128 cubes  (256 in the file; max_train_cubes = 128)  val 64 " in x for x in started), started
    while proc.poll() is None and not (out / "metrics.jsonl").exists():
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "epoch    1" not in stdout, "the interrupt came after epoch 1: this test needs it before"
    said = [x for x in stderr.splitlines() if x.startswith("interrupted: ")]
    assert len(said) == 1 and "holds nothing to resume; start again with the same command: " in said[0], stderr
    command = shlex.split(said[0].split("same command: ", 1)[1])
    assert command == ["python", "train.py", *argv]
    again = run([sys.executable] + command[1:])
    assert "stopped at the epoch cap (3) after 3 epochs" in again.stdout
    assert [json.loads(x)["epoch"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


@pytest.mark.slow
def test_encode_on_an_unfinished_run_suggests_a_command_that_finishes_it(tmp_path, smoke_run, smoke_data, capsys):
    import shutil

    from deepdensity.tools import encode

    out = tmp_path / "run"
    shutil.copytree(smoke_run, out)
    # stopped after its last checkpoint, before its weights: training has not finished
    (out / "weights.h5").unlink()
    (out / "result.json").unlink()
    state = json.loads((out / "state.json").read_text())
    (out / "state.json").write_text(json.dumps({**state, "status": "running"}))
    argv = ["--run", str(out), "--data", str(smoke_data), "--out", str(tmp_path / "params.h5")]
    assert encode.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"error: {out} holds no weights.h5: its training has not finished (epoch 1 of 1 "
        f"checkpointed); finish it with: python -m deepdensity train "
    ), err
    command = shlex.split(err.split("finish it with: ", 1)[1])
    finished = run([sys.executable] + command[1:])  # the smoke config's settings come back as --set
    assert (
        f"resumed from epoch 1 of {out}: weights and optimizer state from ckpt/epoch-0001, 1 epoch of "
        f"metrics.jsonl, " in finished.stdout
    )
    assert "stopped at the epoch cap (1) after 1 epoch" in finished.stdout
    assert encode.main(argv) == 0
