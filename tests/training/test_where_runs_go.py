"""Where a run lands without --out: a new folder under runs/ (or $DEEPDENSITY_RUNS), named by
its policy, workers and start, printed at the start; rank 0 alone names one; --no-save for
none. On a terminal every epoch's line stays on the screen."""

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios

import pytest

from deepdensity.training import cli
from deepdensity.training.runs import new_run_folder
from tests.support import ROOT, SMOKE, run


def test_a_taken_name_gets_the_next_free_suffix(tmp_path):
    assert new_run_folder(tmp_path, "weak-n2-x") == tmp_path / "weak-n2-x"
    (tmp_path / "weak-n2-x").mkdir()
    (tmp_path / "weak-n2-x-2").mkdir()
    assert new_run_folder(tmp_path, "weak-n2-x") == tmp_path / "weak-n2-x-3"


def test_the_default_folder_names_the_launchers_workers_and_only_rank_0_has_one(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDENSITY_RUNS", str(tmp_path))
    for key in ("HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert cli._default_out("warmup", 8).parent == tmp_path
    assert cli._default_out("warmup", 8).name.startswith("warmup-n8-")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    monkeypatch.setenv("HOROVOD_RANK", "0")
    assert cli._default_out("weak", 1).name.startswith("weak-n2-")
    monkeypatch.setenv("HOROVOD_RANK", "1")
    assert cli._default_out("weak", 1) is None, "rank 1 writes nothing, so it names nothing"


def test_no_save_and_out_together_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--mode", "strong", "--no-save", "--out", "x"])
    assert e.value.code == 2 and "--no-save and --out exclude each other" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_without_out_lands_in_a_printed_folder_and_no_save_writes_nothing(tmp_path, smoke_data, monkeypatch):
    env_runs = tmp_path / "default-runs"
    base = [
        sys.executable,
        str(ROOT / "train.py"),
        "--mode",
        "strong",
        "--config",
        SMOKE,
        "--set",
        f"data_path={smoke_data}",
        "--set",
        "max_epochs=1",
    ]
    monkeypatch.setenv("DEEPDENSITY_RUNS", str(env_runs))  # run() passes os.environ on
    done = run(base)
    folders = list(env_runs.iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("strong-n1-")
    assert done.stdout.splitlines()[0] == f"run folder: {folders[0]} (--out to choose another, --no-save for none)"
    assert json.loads((folders[0] / "result.json").read_text())["epochs"] == 1
    run(base + ["--no-save"])
    assert len(list(env_runs.iterdir())) == 1, "--no-save made no folder"


@pytest.mark.slow
def test_on_a_terminal_every_epochs_line_stays(tmp_path, smoke_data):
    """Under a pseudo-terminal (as a person sees it) the epoch bar comes and goes, and the lines
    of epochs 1 and 2 are both in what was written to the screen."""
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "--mode",
        "strong",
        "--config",
        SMOKE,
        "--set",
        f"data_path={smoke_data}",
        "--set",
        "max_epochs=2",
        "--out",
        str(tmp_path / "run"),
    ]
    assert "train.py" in " ".join(cmd)  # a training command: this test is marked slow
    main_fd, term_fd = pty.openpty()
    # a terminal 100 columns wide: a new pseudo-terminal reports 0, and tqdm draws a bar that wide
    fcntl.ioctl(term_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        cmd,
        stdout=term_fd,
        stderr=term_fd,
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)},
    )
    os.close(term_fd)
    screen = b""
    while True:
        ready, _, _ = select.select([main_fd], [], [], 300)
        if not ready:
            break
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        screen += chunk
    assert proc.wait(timeout=60) == 0, screen.decode(errors="replace")[-2000:]
    text = screen.decode(errors="replace")
    assert "epoch    1  loss" in text and "epoch    2  loss" in text, text[-2000:]
    assert "strong N=1 epoch 1" in text, "the epoch's bar was drawn on the terminal"


def test_a_dry_run_prints_the_plan_and_trains_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from deepdensity.data.synth import write_synthetic

    monkeypatch.setenv("DEEPDENSITY_RUNS", str(tmp_path / "runs"))
    data = tmp_path / "d.h5"
    write_synthetic(data, 200, 40, 0)
    base = ["--config", SMOKE, "--set", f"data_path={data}", "--dry-run"]
    assert cli.main(["--mode", "weak", "--emulate-workers", "4", *base]) == 0
    out = capsys.readouterr().out
    # smoke: 128 of the 160 training cubes (max_train_cubes); weak N = 4: global batch 128, one
    # step a pass, and a per_worker epoch is N = 4 passes
    assert "global_batch = 128  per_worker_batch = 32" in out
    assert (
        f"data: {data}, 160 training cubes (128 used: max_train_cubes): "
        "4 steps an epoch (per_worker epochs), up to 3 epochs" in out
    )
    assert "n_components=8" in out and "dry run: nothing is trained or written" in out
    assert cli.main(["--mode", "strong", "--emulate-workers", "4", *base]) == 0
    assert "16 steps an epoch" in capsys.readouterr().out  # global batch 32: 4 steps a pass, 4 passes
    assert not (tmp_path / "runs").exists(), "the folder it names is not made"
