"""train.py as a user runs it: outputs, stopping rules, resume, and bad input."""

import json
import sys

import numpy as np
import pytest

from tests.support import ROOT, SMOKE, run


def train(*args, data, check=True):
    return run(
        [sys.executable, str(ROOT / "train.py"), "--config", SMOKE, "--set", f"data_path={data}", *args], check=check
    )


def metrics(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_smoke_run_writes_every_output(tmp_path, smoke_data):
    out = tmp_path / "run"
    proc = train("--mode", "strong", "--out", str(out), data=smoke_data)
    assert "global_batch = 32" in proc.stdout and "per_worker_batch = 32" in proc.stdout
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["world_size"], cfg["global_batch"], cfg["per_worker_batch"], cfg["lr"]) == (1, 32, 32, 0.00105)
    assert cfg["n_components"] == 8, "the YAML's values are resolved into config.json"
    m = metrics(out)
    assert [r["epoch"] for r in m] == [1, 2, 3]
    assert all(
        set(r) == {"epoch", "loss", "val_loss", "lr", "seconds", "steps_seconds", "global_batch", "steps", "allreduces"}
        for r in m
    )
    assert {(r["global_batch"], r["steps"], r["allreduces"]) for r in m} == {(32, 4, 0)}, "128 cubes, one worker"
    assert m[-1]["val_loss"] < m[0]["val_loss"], "three epochs of Adam lower the loss"
    assert [r["seconds"] for r in m] == sorted(r["seconds"] for r in m)
    # an epoch's steps are part of it: between its start and its end (validation after them)
    starts = [0.0] + [r["seconds"] for r in m[:-1]]
    assert all(0 < r["steps_seconds"] < r["seconds"] - start for r, start in zip(m, starts))
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "max_epochs" and result["epochs"] == 3
    assert result["time_to_target_s"] is None
    assert result["final_val_loss"] == pytest.approx(m[-1]["val_loss"])
    assert (out / "weights.h5").stat().st_size > 0


@pytest.mark.slow
def test_stops_at_the_target(tmp_path, smoke_data):
    out = tmp_path / "run"
    # a target above the first epoch's loss is reached at once
    train("--mode", "weak", "--out", str(out), "--set", "target_loss=1.0", data=smoke_data)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "reached_target" and result["epochs"] == 1
    assert result["time_to_target_s"] == pytest.approx(metrics(out)[0]["seconds"])


def test_a_non_finite_epoch_stops_the_run_as_diverged(tmp_path):
    # A huge lr does not give NaN here (the bounded density saturates the loss at a
    # ceiling, like the paper's Fig. 3), so feed the callbacks a NaN epoch directly.
    from deepdensity.config import Config

    cfg = Config(max_epochs=50)
    cb, record, model = record_callbacks(cfg)
    cb.on_epoch_end(0, {"loss": 0.5, "val_loss": 0.4})
    assert not model.stop_training
    cb.on_epoch_end(1, {"loss": float("nan"), "val_loss": 0.4})
    assert model.stop_training
    result = record.result()
    assert result["status"] == "diverged" and result["epochs"] == 2
    assert result["final_loss"] is None and result["time_to_target_s"] is None


def record_callbacks(cfg, history=()):
    """The run's own callbacks that decide an epoch's row and whether to stop (EpochRow,
    Stopping), on a tiny model, as the trainer orders them; returns (callbacks, record, model)."""
    import tensorflow as tf

    from deepdensity.scaling import policies
    from deepdensity.training import callbacks

    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile(tf.keras.optimizers.legacy.Adam(0.001), "mse")
    record = callbacks.RunRecord(policies.plan("linear", 4), cfg, 3, 0.0, history)
    cb = tf.keras.callbacks.CallbackList([callbacks.EpochRow(record), callbacks.Stopping(record)], model=model)
    cb.on_train_begin()
    return cb, record, model


@pytest.mark.parametrize("resumed", [0, 2])
def test_a_run_that_rose_to_a_ceiling_stops_as_stalled(resumed):
    """Fig. 3's shape, epoch by epoch through the trainer's callback; the epochs before a
    resume count (they come from metrics.jsonl)."""
    from deepdensity.config import Config

    curve = [0.05, 0.03, 0.08, 0.2, 0.2, 0.2, 0.2]
    cb, record, model = record_callbacks(Config(max_epochs=50, target_loss=0.001, stall_patience=3), curve[:resumed])
    for epoch in range(resumed, len(curve)):
        cb.on_epoch_end(epoch, {"loss": 0.1, "val_loss": curve[epoch]})
        assert model.stop_training == (epoch == 4), epoch
        if model.stop_training:
            break
    assert record.result()["status"] == "stalled" and record.result()["epochs"] == 5


def test_the_stall_rule_is_off_by_default_and_spares_a_slow_decrease():
    from deepdensity.config import Config

    assert Config().stall_patience == 0
    cb, record, model = record_callbacks(Config(max_epochs=50, target_loss=0.001))
    for epoch in range(10):
        cb.on_epoch_end(epoch, {"loss": 0.1, "val_loss": 0.2})
    assert not model.stop_training
    cb, record, model = record_callbacks(Config(max_epochs=50, target_loss=0.001, stall_patience=2))
    for epoch in range(40):
        cb.on_epoch_end(epoch, {"loss": 0.1, "val_loss": 0.01 * 0.999**epoch})
    assert not model.stop_training


@pytest.mark.slow
def test_resume_continues_exactly_where_it_stopped(tmp_path, smoke_data):
    full, part = tmp_path / "full", tmp_path / "part"
    train("--mode", "warmup", "--emulate-workers", "2", "--out", str(full), "--set", "warmup_epochs=2", data=smoke_data)
    # the same run killed after epoch 2 (max_epochs=2), then resumed to 3
    train(
        "--mode",
        "warmup",
        "--emulate-workers",
        "2",
        "--out",
        str(part),
        "--set",
        "warmup_epochs=2",
        "--set",
        "max_epochs=2",
        data=smoke_data,
    )
    train(
        "--mode",
        "warmup",
        "--emulate-workers",
        "2",
        "--out",
        str(part),
        "--resume",
        "--set",
        "warmup_epochs=2",
        data=smoke_data,
    )
    a, b = metrics(full), metrics(part)
    assert [r["epoch"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5)
        assert y["val_loss"] == pytest.approx(x["val_loss"], rel=1e-5)
        assert y["lr"] == pytest.approx(x["lr"], rel=1e-7)
    assert b[2]["seconds"] > b[1]["seconds"], "time since start carries over a resume"
    assert {f.name.split(".")[0] for f in (part / "ckpt").iterdir()} == {"epoch-0003"}, (
        "the checkpoint the resume started from is gone once a newer one is written"
    )
    # a finished run is not trained again
    proc = train(
        "--mode",
        "warmup",
        "--emulate-workers",
        "2",
        "--out",
        str(part),
        "--resume",
        "--set",
        "warmup_epochs=2",
        data=smoke_data,
    )
    assert "finished run" in proc.stdout
    assert len(metrics(part)) == 3


@pytest.mark.slow
def test_warmup_lr_reaches_n_eta_as_horovods_callback_does(tmp_path, smoke_data):
    out = tmp_path / "w"
    train(
        "--mode",
        "warmup",
        "--emulate-workers",
        "4",
        "--out",
        str(out),
        "--set",
        "warmup_epochs=2",
        "--set",
        "max_train_cubes=256",
        data=smoke_data,
    )
    eta, n, W = 0.00105, 4, 2  # 256 cubes / global batch 128 = 2 steps per epoch
    # Horovod's formula at the last batch of epoch e: eta * ((e + 1) * (n - 1) / W + 1)
    want = [eta * ((e + 1) * (n - 1) / W + 1) if e < W else n * eta for e in range(3)]
    assert [r["lr"] for r in metrics(out)] == [pytest.approx(w, rel=1e-6) for w in want]
    assert json.loads((out / "config.json").read_text())["global_batch"] == 128


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "bogus=1"], "unknown config key 'bogus'"),
        (["--set", "batch_size=big"], "batch_size expects an integer"),
        (["--emulate-workers", "3"], "3 does not divide 32"),
        (["--set", "data_path=/nonexistent/x.h5"], "does not exist"),
        (["--set", "max_train_cubes=16"], "fewer than one batch of 32"),
        (["--set", "max_train_cubes=16", "--set", "epoch_definition=global"], "fewer than one global batch"),
        (["--set", "epoch_definition=pass"], "epoch_definition must be one of per_worker, global"),
        (["--set", "stall_patience=-1"], "stall_patience must be >= 0"),
    ],
)
@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(smoke_data, args, message):
    proc = train("--mode", "strong", *args, data=smoke_data, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_unusable_output_folder_and_reused_folder(tmp_path, smoke_data):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = train("--mode", "strong", "--out", str(blocker / "sub"), data=smoke_data, check=False)
    assert proc.returncode == 2 and "cannot write to output folder" in proc.stderr
    out = tmp_path / "run"
    train("--mode", "strong", "--out", str(out), "--set", "max_epochs=1", data=smoke_data)
    proc = train("--mode", "strong", "--out", str(out), data=smoke_data, check=False)
    assert proc.returncode == 2 and "already holds a run" in proc.stderr


@pytest.mark.parametrize(
    "args", [["--set", "data_path=/nonexistent/x.h5"], ["--set", "max_train_cubes=16"], ["--emulate-workers", "3"]]
)
@pytest.mark.slow
def test_a_refused_run_leaves_no_empty_output_folder(tmp_path, smoke_data, args):
    out = tmp_path / "run"
    proc = train("--mode", "strong", "--out", str(out), *args, data=smoke_data, check=False)
    assert proc.returncode == 2 and not out.exists()


@pytest.mark.slow
def test_wrong_cube_shape_is_rejected(tmp_path):
    import h5py

    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f["train/cubes"] = np.zeros((64, 16, 16, 12), "f4")
        f["val/cubes"] = np.zeros((8, 16, 16, 12), "f4")
    proc = train("--mode", "strong", data=bad, check=False)
    assert proc.returncode == 2 and "expected (N, G, G, G)" in proc.stderr


def refused(proc, *phrases):
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(p in lines[0] for p in phrases), lines[0]


@pytest.mark.parametrize(
    "args, phrases",
    [
        (
            ["--mode", "linear", "--emulate-workers", "2", "--set", "base_lr=0.01"],
            ["mode 'strong' -> 'linear'", "workers 1 -> 2", "base_lr 0.00105 -> 0.01", "only max_epochs"],
        ),
        (["--mode", "strong", "--set", "n_components=4"], ["n_components 8 -> 4"]),
        (["--mode", "strong", "--set", "max_train_cubes=64"], ["max_train_cubes 128 -> 64"]),
    ],
)
@pytest.mark.slow
def test_a_resume_that_would_change_the_path_is_refused_and_changes_nothing(
    tmp_path, smoke_run, smoke_data, args, phrases
):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(smoke_run, run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    proc = train(*args, "--out", str(run_dir), "--resume", "--set", "max_epochs=2", data=smoke_data, check=False)
    refused(proc, *phrases)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def damage_state(run_dir):
    text = (run_dir / "state.json").read_text()
    (run_dir / "state.json").write_text(text[: len(text) // 2])


def delete_checkpoint(run_dir):
    for f in (run_dir / "ckpt").iterdir():
        f.unlink()


def truncate_checkpoint(run_dir):
    data = next((run_dir / "ckpt").glob("*.data-*"))
    data.write_bytes(data.read_bytes()[:100])


def delete_config(run_dir):
    (run_dir / "config.json").unlink()


@pytest.mark.parametrize(
    "damage, phrase",
    [
        (damage_state, "state.json is damaged"),
        (delete_checkpoint, "is missing"),
        (truncate_checkpoint, "is damaged"),
        (delete_config, "config.json is missing"),
    ],
)
@pytest.mark.slow
def test_a_damaged_run_folder_is_refused_with_what_to_do(tmp_path, smoke_run, smoke_data, damage, phrase):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(smoke_run, run_dir)
    damage(run_dir)
    proc = train(
        "--mode", "strong", "--out", str(run_dir), "--resume", "--set", "max_epochs=2", data=smoke_data, check=False
    )
    refused(proc, phrase, "start afresh")


@pytest.mark.slow
def test_quiet_still_prints_how_the_run_ended(smoke_data):
    proc = train("--mode", "strong", "--quiet", "--set", "max_epochs=1", data=smoke_data)
    assert proc.stdout.splitlines() == ["stopped at the epoch cap (1) after 1 epoch"], proc.stdout


@pytest.mark.slow
def test_a_resume_on_other_data_at_the_same_path_is_refused(tmp_path, smoke_run, smoke_data):
    """The run records its data file's fingerprint; the same path with other cubes in it is
    another optimisation path, refused like any other change. The same cubes resume."""
    import shutil

    from deepdensity.data.synth import write_synthetic

    for case in ("same", "other"):
        data, run_dir = tmp_path / f"{case}.h5", tmp_path / f"run-{case}"
        shutil.copy(smoke_data, data)
        shutil.copytree(smoke_run, run_dir)
        config = json.loads((run_dir / "config.json").read_text())
        assert config["data_fingerprint"].startswith(f"{smoke_data.stat().st_size}:")
        (run_dir / "config.json").write_text(json.dumps({**config, "data_path": str(data)}))
        if case == "other":
            data.unlink()
            write_synthetic(data, 320, 64, seed=7)  # smoke_data's sizes, other cubes
        proc = train(
            "--mode", "strong", "--out", str(run_dir), "--resume", "--set", "max_epochs=2", data=data, check=False
        )
        if case == "same":
            assert proc.returncode == 0, proc.stderr
            assert len(metrics(run_dir)) == 2
        else:
            refused(proc, "was trained on other data than", "holds now")
            assert len(metrics(run_dir)) == 1


@pytest.mark.slow
def test_a_run_at_the_collapse_level_stops_as_collapsed_and_stays_finished(tmp_path, smoke_data):
    """Every loss of the smoke run (0.006-0.008) is above a collapse level of 0.001, so the rule
    ends the run after its patience of 2 epochs; a resume then finds it finished, as a stalled run."""
    out = tmp_path / "run"
    proc = train(
        "--mode",
        "strong",
        "--out",
        str(out),
        "--set",
        "max_epochs=6",
        "--set",
        "collapse_loss=0.001",
        "--set",
        "collapse_patience=2",
        data=smoke_data,
    )
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "collapsed" and result["epochs"] == 2
    assert "stopped: val_loss at the collapse level 0.001 for 2 epochs (collapsed) after 2 epochs" in proc.stdout
    again = train(
        "--mode",
        "strong",
        "--out",
        str(out),
        "--set",
        "max_epochs=6",
        "--set",
        "collapse_loss=0.001",
        "--set",
        "collapse_patience=2",
        "--resume",
        data=smoke_data,
    )
    assert "holds a finished run" in again.stdout


@pytest.mark.slow
def test_validating_every_pass_leaves_the_path_alone_and_reads_the_sequential_run(tmp_path, smoke_data):
    """Strong scaling on 2 emulated workers, validated at every pass: its epoch rows equal the
    same run's without it to the bit (validation only reads the weights, and does not reset the
    running training loss), and the loss it validates after pass 1 is the sequential run's after
    its first epoch (one pass), the path strong scaling follows. Tolerance: the same weights, the
    validation mean summed in another order (Keras' evaluate against ours), 1e-6."""
    with_passes, without, seq = tmp_path / "p", tmp_path / "q", tmp_path / "s"
    common = ["--set", "max_epochs=2", "--quiet"]
    train(
        "--mode",
        "strong",
        "--emulate-workers",
        "2",
        "--out",
        str(with_passes),
        *common,
        "--set",
        "validate_every_pass=true",
        data=smoke_data,
    )
    train("--mode", "strong", "--emulate-workers", "2", "--out", str(without), *common, data=smoke_data)
    train("--mode", "strong", "--out", str(seq), "--set", "max_epochs=4", "--quiet", data=smoke_data)
    p, q, s = metrics(with_passes), metrics(without), metrics(seq)
    assert [(r["loss"], r["val_loss"]) for r in p] == [(r["loss"], r["val_loss"]) for r in q]
    assert [r["pass_val_losses"][0][0] for r in p] == [1.0, 3.0], "one pass inside each 2-pass epoch"
    assert "pass_val_losses" not in q[0]
    assert p[0]["pass_val_losses"][0][1] == pytest.approx(s[0]["val_loss"], rel=1e-6)
    assert p[1]["pass_val_losses"][0][1] == pytest.approx(s[2]["val_loss"], rel=1e-6)
    assert p[0]["val_loss"] == pytest.approx(s[1]["val_loss"], rel=1e-6)
