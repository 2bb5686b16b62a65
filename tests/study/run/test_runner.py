"""The study's runner reuses a finished run only when it ran with what the study asks for now,
on the same data; it never reuses a stale one."""

import json

import pytest
import yaml

from deepdensity.study.run.runner import StudyRunner
from deepdensity.training.runs import data_fingerprint
from deepdensity.utils.errors import StudyError
from tests.support import ROOT


def _finished_run(root, data, **settings):
    run = root / "seq-s0"
    run.mkdir(parents=True)
    config = {
        "data_path": str(data),
        "stall_patience": 3,
        "base_lr": 0.002,
        "seed": 0,
        "max_epochs": 4,
        "data_fingerprint": data_fingerprint(data),
        **settings,
    }
    (run / "config.json").write_text(json.dumps(config))
    (run / "result.json").write_text(json.dumps({"status": "reached_target", "epochs": 3, "seconds": 1.0}))
    return run


def test_data_fingerprint_is_size_and_content(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    a.write_bytes(b"cubes" * 1000)
    b.write_bytes(b"cubes" * 999 + b"cubeZ")
    assert data_fingerprint(a).startswith("5000:") and data_fingerprint(a) != data_fingerprint(b)
    assert data_fingerprint(a) == "5000:" + __import__("hashlib").sha256(b"cubes" * 1000).hexdigest()


def test_a_finished_run_is_reused_only_with_the_same_settings_and_data(tmp_path):
    data = tmp_path / "data.h5"
    data.write_bytes(b"the study's cubes")
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"data_path": str(data), "stall_patience": 3}))
    _finished_run(tmp_path / "runs", data)
    runner = StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None)
    asked = {"base_lr": 0.002, "seed": 0, "max_epochs": 4}
    assert runner.run("seq-s0", "strong", 1, asked)["epochs"] == 3 and runner.reused == {"seq-s0"}
    with pytest.raises(StudyError, match=r"seed 0 -> 1"):
        runner.run("seq-s0", "strong", 1, {**asked, "seed": 1})
    with pytest.raises(StudyError, match=r"base_lr 0.002 -> 0.003"):
        runner.run("seq-s0", "strong", 1, {**asked, "base_lr": 0.003})
    data.write_bytes(b"other cubes, same path")
    with pytest.raises(StudyError, match="the data in .*data.h5 changed"):
        StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None).run("seq-s0", "strong", 1, asked)


@pytest.mark.slow
def test_a_run_the_stall_rule_stopped_is_continued_from_its_checkpoint_on_the_same_path(tmp_path, smoke_data):
    """The stall check's continuation (design.stall_check): the stopped run's folder resumed with
    the rule off follows, epoch for epoch, the path of a run trained from the start with the rule
    off, and does not train its first epochs again. At lr 0.05 the smoke model's loss settles
    on a plateau within 3 epochs, so a patience of 1 stops it. Exact equality: the same process
    configuration with deterministic kernels, and a resume restores weights and Adam's state."""
    from deepdensity.training.runs import read_metrics

    settings = {
        **yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text()),
        "data_path": str(smoke_data),
        "target_loss": 1e-6,
        "base_lr": 0.05,
    }
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(settings))
    root = tmp_path / "runs"
    runner = StudyRunner(root, train_yaml, None, say=lambda *a: None)
    stopped = runner.run("s0", "strong", 1, {"max_epochs": 6, "stall_patience": 1})
    assert stopped["status"] == "stalled" and stopped["epochs"] < 6, stopped
    continued = runner.run("s0-to-cap", "strong", 1, {"max_epochs": 6, "stall_patience": 0}, continue_from="s0")
    fresh = runner.run("fresh", "strong", 1, {"max_epochs": 6, "stall_patience": 0})
    assert continued["status"] == fresh["status"] == "max_epochs" and continued["epochs"] == 6

    def path(name):
        return [(r["epoch"], r["loss"], r["val_loss"]) for r in read_metrics(root / name)]

    assert path("s0-to-cap") == path("fresh")
    head = stopped["epochs"]
    assert [r["seconds"] for r in read_metrics(root / "s0-to-cap")[:head]] == [
        r["seconds"] for r in read_metrics(root / "s0")
    ], "the stopped run's epochs, not trained again"
    assert json.loads((root / "s0" / "result.json").read_text())["status"] == "stalled", "the stopped run is kept"
    # asked for again under its own name with the rule off (the batch sweep, docs/beyond.md): it
    # trains on in its own folder, from its checkpoint, along the same path
    head_seconds = [r["seconds"] for r in read_metrics(root / "s0")]
    again = runner.run("s0", "strong", 1, {"max_epochs": 6, "stall_patience": 0})
    assert again["status"] == "max_epochs" and again["epochs"] == 6 and path("s0") == path("fresh")
    assert [r["seconds"] for r in read_metrics(root / "s0")[:head]] == head_seconds


def _with_curve(run, status, val_losses):
    (run / "result.json").write_text(json.dumps({"status": status, "epochs": len(val_losses), "seconds": 1.0}))
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"epoch": e + 1, "val_loss": v}) + "\n" for e, v in enumerate(val_losses))
    )
    (run / "state.json").write_text(
        json.dumps({"epoch": len(val_losses) - 1, "status": status, "elapsed_s": 1.0, "checkpoint": "ckpt-x"})
    )


def test_a_finished_run_the_rules_now_in_force_would_cut_sooner_is_refused(tmp_path):
    """Reached at epoch 5 with no stall rule, but a patience of 2 would have stopped it at epoch
    4 (0.6 and 0.7 are no better than 0.5): the folder's result is not what the study asks for,
    and the runner cannot cut a folder, so it says so instead of reusing it."""
    data = tmp_path / "data.h5"
    data.write_bytes(b"the study's cubes")
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"data_path": str(data), "target_loss": 0.2}))
    run = _finished_run(tmp_path / "runs", data, stall_patience=0, target_loss=0.2, max_epochs=6)
    _with_curve(run, "reached_target", [0.9, 0.5, 0.6, 0.7, 0.1])
    runner = StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None)
    asked = {"base_lr": 0.002, "seed": 0, "max_epochs": 6}
    assert runner.run("seq-s0", "strong", 1, {**asked, "stall_patience": 0})["epochs"] == 5, "the same rules: reused"
    with pytest.raises(StudyError, match="end it stalled at epoch 4"):
        runner.run("seq-s0", "strong", 1, {**asked, "stall_patience": 2})


def test_a_run_stopped_by_a_rule_no_longer_asked_for_is_left_whole_when_nothing_may_train(tmp_path):
    """Stalled at epoch 5 under a patience of 3; asked for with the rule off (the batch sweep,
    docs/beyond.md) the run must train on, which --no-train forbids: NotHeld, and the folder
    keeps its result."""
    from deepdensity.study.run.runner import NotHeld

    data = tmp_path / "data.h5"
    data.write_bytes(b"the study's cubes")
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"data_path": str(data), "target_loss": 0.2}))
    run = _finished_run(tmp_path / "runs", data, target_loss=0.2, max_epochs=6)
    _with_curve(run, "stalled", [0.9, 0.5, 0.6, 0.7, 0.8])
    runner = StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None)
    runner.may_train = False
    with pytest.raises(NotHeld, match="no longer asked for"):
        runner.run("seq-s0", "strong", 1, {"base_lr": 0.002, "seed": 0, "max_epochs": 6, "stall_patience": 0})
    assert json.loads((run / "result.json").read_text())["status"] == "stalled"
    assert json.loads((run / "state.json").read_text())["status"] == "stalled"


@pytest.mark.parametrize(
    "runner, want",
    [
        (None, "one process"),
        ("horovodrun --gloo -np {n}", "horovodrun (gloo)"),
        ("horovodrun --mpi -np {n} -H node1:2,node2:2", "horovodrun (mpi)"),
        ("horovodrun --mpi -np {n} --host-discovery-script ./hosts.sh", "horovodrun (gloo)"),  # elastic: Gloo only
    ],
)
def test_a_real_run_is_keyed_by_the_controller_it_runs_under(tmp_path, runner, want, monkeypatch):
    """MPI's and Gloo's allreduces sum in their own orders, so a run under one is not the other's:
    the ledger keeps them apart, and says which ran each. DEEPDENSITY_CONTROLLER=mpi is ignored by
    plain horovodrun, so it changes none of these."""
    monkeypatch.setenv("DEEPDENSITY_CONTROLLER", "mpi")
    assert StudyRunner(tmp_path, tmp_path / "train.yaml", runner)._launcher() == want


def test_under_deepdensity_launch_the_controller_setting_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPDENSITY_CONTROLLER", "mpi")
    runner = "python -m deepdensity launch -np {n}"
    assert StudyRunner(tmp_path, tmp_path / "train.yaml", runner)._launcher() == "horovodrun (mpi)"


def test_a_sibling_runner_counts_its_runs_with_the_studys(tmp_path):
    """The instruction-set and stall checks and the real strong-scaling runs go through sibling
    runners; the record's "trained N run(s)" must count them (a study that trained only its
    AVX2 check said "trained 0 run(s)")."""
    from deepdensity.launch.slurm_jobs import SlurmOptions
    from deepdensity.study.run.slurm_runner import SlurmRunner

    data = tmp_path / "data.h5"
    data.write_bytes(b"the study's cubes")
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"data_path": str(data), "stall_patience": 3}))
    _finished_run(tmp_path / "runs", data)
    for study in (
        StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None),
        SlurmRunner(tmp_path / "runs", train_yaml, None, SlurmOptions(), 1, "tiny"),
    ):
        check = study.sibling(None, 1)
        check.trained.add("isa-avx2-seq-s0")
        check.run("seq-s0", "strong", 1, {"base_lr": 0.002, "seed": 0, "max_epochs": 4})
        assert study.trained == {"isa-avx2-seq-s0"} and study.reused == {"seq-s0"}
        assert type(check) is type(study), "a sibling is of its runner's kind (local, Slurm)"


@pytest.mark.parametrize(
    "saved, asked, aside_as",
    [
        ({"launch": {"controller": "gloo"}}, "horovodrun --mpi -np {n}", "gloo"),  # trained under Gloo, asked under MPI
        ({"launch": {"controller": "mpi"}}, "horovodrun --gloo -np {n}", "mpi"),
        ({}, "horovodrun --mpi -np {n}", "unrecorded"),  # from before runs recorded their controller
        ({"launch": {"controller": "gloo"}}, "horovodrun --gloo -np {n}", None),  # the same controller: reused
        ({"launch": {"controller": "gloo"}, "world_size": 1}, "horovodrun --mpi -np {n}", None),  # one process
    ],
)
def test_a_real_run_trained_here_under_another_controller_is_set_aside_not_reused(tmp_path, saved, asked, aside_as):
    """The study's real strong-scaling runs have one folder name under either controller. A
    folder trained under Gloo answered the study's request under MPI (and went into the ledger
    as MPI's); it is now moved aside, whole, and the run is looked up or trained afresh. One
    process has no allreduce: its folder is the same run under either."""
    from deepdensity.study.run.runner import NotHeld

    data = tmp_path / "data.h5"
    data.write_bytes(b"the study's cubes")
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"data_path": str(data), "stall_patience": 3}))
    run = _finished_run(tmp_path / "runs", data, **{"world_size": 2, **saved})
    runner = StudyRunner(tmp_path / "runs", train_yaml, asked, say=lambda *a: None)
    runner.may_train = False
    asked_settings = {"base_lr": 0.002, "seed": 0, "max_epochs": 4}
    if aside_as is None:
        assert runner.run("seq-s0", "strong", 2, asked_settings)["epochs"] == 3 and runner.reused == {"seq-s0"}
        return
    with pytest.raises(NotHeld, match="not in the ledger"):
        runner.run("seq-s0", "strong", 2, asked_settings)
    aside = tmp_path / "runs" / "set-aside" / f"seq-s0.{aside_as}"
    assert not run.exists() and json.loads((aside / "result.json").read_text())["epochs"] == 3
    assert json.loads((aside / "config.json").read_text()).get("launch") == saved.get("launch")
    if aside_as != "unrecorded":  # asked for under its own controller again, it comes back
        back = StudyRunner(tmp_path / "runs", train_yaml, f"horovodrun --{aside_as} -np {{n}}", say=lambda *a: None)
        assert back.run("seq-s0", "strong", 2, asked_settings)["epochs"] == 3 and not aside.exists()


def test_a_set_aside_run_comes_back_over_a_folder_the_ledger_wrote_but_not_over_a_trained_one(tmp_path):
    """A folder written from the ledger holds no checkpoint, and the ledger rewrites it at will;
    a folder with a checkpoint was trained here, and is never replaced."""
    from deepdensity.study.core import ledger
    from deepdensity.study.run import run_folders

    out = tmp_path / "real-strong-n2-s3"
    aside = tmp_path / "set-aside" / "real-strong-n2-s3.mpi"
    aside.mkdir(parents=True)
    (aside / "state.json").write_text('{"epoch": 6}')
    out.mkdir()
    (out / ledger.MARKER).write_text("{}")
    assert run_folders.take_back(out, "mpi") and (out / "state.json").read_text() == '{"epoch": 6}'
    assert not aside.exists()
    run_folders.set_aside(out, "mpi")
    out.mkdir()
    (out / "state.json").write_text('{"epoch": 2}')
    assert not run_folders.take_back(out, "mpi") and aside.exists()
    assert (out / "state.json").read_text() == '{"epoch": 2}'


def test_the_second_looks_pin_is_in_a_runs_environment_and_entry_but_not_its_key(tmp_path, monkeypatch):
    """isa_pin (second_look.py) holds oneDNN to the first look's set: the run's environment has
    ONEDNN_MAX_CPU_ISA and its ledger entry's machine names the pin and the set oneDNN used under
    it, while its key stays the default study's (a cap the ISA check sets is keyed)."""
    from deepdensity.study.core import ledger
    from deepdensity.utils import machine

    seen = {"": "AMX", "AVX512_CORE_BF16": "BF16", "AVX2": "AVX2"}
    monkeypatch.setattr(machine, "onednn_isa", lambda cap="": seen[cap])
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    import h5py
    import numpy as np

    data = tmp_path / "data.h5"
    with h5py.File(data, "w") as f:
        f.create_group("train")["cubes"] = np.zeros((2, 4, 4, 4), np.float32)
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"data_path": str(data)}))
    runner = StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None)
    runner.ledger = ledger.Ledger(tmp_path / "ledger.jsonl")
    asked = runner.ask("weak-n4-s8", "weak", 4, {"seed": 8})
    plain = runner._request(asked)
    runner.isa_pin = "AVX512_CORE_BF16"
    assert runner.run_env() == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    assert runner._request(asked)["key"] == plain["key"] and plain["isa_cap"] == ""
    assert runner._machine("")["onednn_isa"] == "BF16" and runner._machine("")["isa_pin"] == "AVX512_CORE_BF16"
    runner.isa_pin = ""
    assert (
        runner.run_env() == {} and "isa_pin" not in runner._machine("") and runner._machine("")["onednn_isa"] == "AMX"
    )
    runner.env_extra = {"ONEDNN_MAX_CPU_ISA": "AVX2"}  # the ISA check's cap: in the key
    assert runner._request(asked)["key"] != plain["key"]
