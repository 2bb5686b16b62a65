"""The ledger: a finished run is reused only where its settings match and its stopping rules,
replayed, say what the run asked for now would have recorded; a study on a second machine (a
fresh runs folder with the first one's ledger) trains nothing it already has."""

import json
import math

import h5py
import numpy as np
import pytest
import yaml

from deepdensity.config import Config
from deepdensity.study.core import ledger, ledger_lines
from deepdensity.study.core.data_identity import data_identity
from deepdensity.study.run.runner import StudyRunner

# what a run's config.json says it ran on (training/run_config.py `versions`)
STACK_RAN = {
    "python": "3.11.7",
    "tensorflow": "2.21.0",
    "keras": "tf_keras 2.21.0",
    "numpy": "1.26.4",
    "horovod": "0.28.1",
}
STOP = {
    "max_epochs": 64,
    "target_loss": 1.0,
    "stall_patience": 3,
    "stall_near": 0.0,
    "stall_near_patience": 0,
    "collapse_loss": 5.0,
    "collapse_patience": 3,
}


def _entry(vals, status, stopping=STOP, rows=True, n=1, passes=None):
    config = {**Config().to_dict(), **stopping}
    rows = (
        [{"epoch": i + 1, "loss": 1.0, "val_loss": v, "seconds": 10.0 * (i + 1)} for i, v in enumerate(vals)]
        if rows
        else None
    )
    result = {"status": status, "epochs": len(vals), "final_val_loss": vals[-1], "passes_to_target": passes}
    return ledger.entry_of("r", "weak", n, 0, "one process", "", "arrays:x", config, result, rows, vals, {}, "abc", "t")


def test_the_key_is_what_decides_a_runs_path():
    cfg = Config().to_dict()
    key = ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:a")
    # the stopping rules and the data's path are not in it: they are replayed, or named by the arrays
    for k, v in (
        ("data_path", "elsewhere.h5"),
        ("max_epochs", 3),
        ("target_loss", 0.5),
        ("stall_patience", 9),
        ("stall_near", 0.1),
        ("collapse_patience", 1),
    ):
        assert ledger.run_key({**cfg, k: v}, "weak", 2, "one process", "", "arrays:a") == key, k
    for k, v in (("seed", 1), ("base_lr", 0.002), ("intra_op_threads", 2), ("deterministic", not cfg["deterministic"])):
        assert ledger.run_key({**cfg, k: v}, "weak", 2, "one process", "", "arrays:a") != key, k
    assert ledger.run_key(cfg, "linear", 2, "one process", "", "arrays:a") != key
    assert ledger.run_key(cfg, "weak", 4, "one process", "", "arrays:a") != key
    assert ledger.run_key(cfg, "weak", 2, "horovodrun", "", "arrays:a") != key
    assert ledger.run_key(cfg, "weak", 2, "one process", "AVX2", "arrays:a") != key
    assert ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:b") != key


def test_replay_cuts_a_run_where_the_rules_asked_for_now_stop_it():
    falling = [4.0, 3.0, 2.0, 1.5, 1.2, 0.9]  # reaches the target 1.0 at epoch 6
    e = _entry(falling, "reached_target")
    assert ledger.replay(e, STOP) == ("reached_target", 6)
    assert ledger.replay(e, {**STOP, "max_epochs": 4}) == ("max_epochs", 4), "a lower cap cuts it"
    assert ledger.replay(e, {**STOP, "target_loss": 2.0}) == ("reached_target", 3), "a higher target: sooner"
    assert ledger.replay(e, {**STOP, "target_loss": 0.5}) is None, "a lower target: the run would have gone on"
    assert ledger.replay(e, {**STOP, "stall_near": 0.1, "stall_near_patience": 12}) == ("reached_target", 6)


def test_a_run_the_old_stall_rule_stopped_near_the_target_is_not_reused_under_the_new_one():
    creeping = [4.0, 1.05, 1.06, 1.07, 1.08]  # 5 % above the target, no new best for 3 epochs
    e = _entry(creeping, "stalled")
    assert ledger.replay(e, STOP) == ("stalled", 5)
    assert ledger.replay(e, {**STOP, "stall_near": 0.1, "stall_near_patience": 12}) is None


def test_collapsed_and_non_finite_runs_replay_as_such():
    assert ledger.replay(_entry([6.0, 6.0, 6.0], "collapsed"), STOP) == ("collapsed", 3)
    assert ledger.replay(_entry([3.0, 2.0, None], "diverged"), STOP) == ("diverged", 3)
    assert ledger.replay(_entry([3.0, 2.5, 2.0], "diverged"), {**STOP, "max_epochs": 2}) == ("max_epochs", 2)


def test_an_answer_recomputes_passes_from_rows_and_refuses_another_target_without_them():
    vals = [4.0, 2.0, 0.9]
    e = _entry(vals, "reached_target", n=2)
    e["rows"][1]["pass_val_losses"] = [[3, 1.8]]  # validated at pass 3, inside epoch 2
    got = ledger.answer(e, {**STOP, "target_loss": 1.9})
    # the run stops at an epoch's end (epoch 3: 0.9), but its passes count from the first validation
    # that met the target: pass 3, inside epoch 2 (epoch 2's end, pass 4, was back at 2.0)
    assert got["result"]["status"] == "reached_target" and got["result"]["epochs"] == 3
    assert got["result"]["passes_to_target"] == 3.0
    assert got["result"]["time_to_target_s"] == 30.0 and len(got["rows"]) == 3
    imported = _entry(vals, "reached_target", rows=False, n=2, passes=5.5)
    assert ledger.answer(imported, STOP)["result"]["passes_to_target"] == 5.5
    assert ledger.answer(imported, {**STOP, "target_loss": 1.9}) is None, "its passes are for its own target only"


def test_the_ledger_file_survives_a_crash_and_names_damage(tmp_path):
    path = tmp_path / "ledger.jsonl"
    book = ledger.Ledger(path)
    book.append(_entry([4.0, 0.9], "reached_target"))
    with open(path, "a") as f:
        f.write('{"format": 1, "key": "cut sho')  # a crash in the middle of a line
    assert len(ledger.read_entries(path)) == 1
    book.append(_entry([4.0, 2.0, 0.9], "reached_target"))  # the next run after the crash
    assert [len(e["val_losses"]) for e in ledger.read_entries(path)] == [2, 3], "the cut line dropped, not glued"
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(ledger_lines.LedgerError, match=r"ledger.jsonl:3: not a JSON line"):
        ledger.read_entries(path)


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"format": 1, "key": "k"}', "without a valid mode, n, seed, stopping, result, val_losses"),
        ('{"format": 2}', "not a ledger entry of format 1"),
        ("[1, 2]", "not a ledger entry of format 1"),
    ],
)
def test_a_damaged_ledger_line_is_one_error_line_naming_it(tmp_path, line, problem):
    """A hand-edited or merged-wrong ledger is a user error (one line, exit 2), not a KeyError
    deep in a study."""
    from deepdensity.utils.errors import UserError

    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(_entry([4.0, 0.9], "reached_target")) + "\n" + line + "\n")
    with pytest.raises(UserError) as e:
        ledger.read_entries(path)
    assert "ledger.jsonl:2: " in str(e.value) and problem in str(e.value) and "delete the line" in str(e.value)
    bad = {**_entry([4.0, 0.9], "reached_target"), "result": {"epochs": 2}}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(UserError, match="ledger.jsonl:1: an entry whose result has no status"):
        ledger.read_entries(path)


def test_a_ledger_changed_while_a_study_runs_is_read_again(tmp_path):
    own, other = tmp_path / "own.jsonl", tmp_path / "other.jsonl"
    book = ledger.Ledger(own, [other])
    assert book.entries == []
    e = _entry([4.0, 0.9], "reached_target")
    other.write_text(json.dumps(e) + "\n")
    assert book.find(e["key"], STOP)[1]["result"]["epochs"] == 2
    merged = tmp_path / "merged.jsonl"
    book.append(e)
    assert book.write_merged(merged) == 1, "the same run from two ledgers is kept once"


def test_data_identity_is_the_arrays_not_the_files_bytes(tmp_path):
    def write(path, cubes, note):
        with h5py.File(path, "w") as f:
            f.create_dataset("train/cubes", data=cubes)
            f.create_dataset("train/kind", data=np.array([b"solid", b"part-solid"], dtype=object))
            f.attrs["created_by"] = note

    cubes = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2)
    write(tmp_path / "a.h5", cubes, "one")
    write(tmp_path / "b.h5", cubes, "another")
    write(tmp_path / "c.h5", cubes + 1, "one")
    assert (tmp_path / "a.h5").read_bytes() != (tmp_path / "b.h5").read_bytes()
    assert data_identity(tmp_path / "a.h5") == data_identity(tmp_path / "b.h5")
    assert data_identity(tmp_path / "a.h5") != data_identity(tmp_path / "c.h5")


class CountingRunner(StudyRunner):
    """StudyRunner whose training writes the folder a finished run leaves (no TensorFlow), and counts."""

    def __init__(self, *a, curve=(4.0, 3.0, 2.0, 1.5, 1.2, 0.9, 0.8), **k):
        super().__init__(*a, say=lambda *_: None, **k)
        self.curve, self.trainings = curve, []

    def _train(self, cmd, name="", workers=1):
        out = self.root / name
        sets = dict(item.split("=", 1) for item in cmd[cmd.index("--set") + 1 :: 2] if "=" in item)
        cfg = {**yaml.safe_load(self.train_yaml.read_text()), **{k: yaml.safe_load(v) for k, v in sets.items()}}
        vals = []
        for e, v in enumerate(self.curve[: int(cfg["max_epochs"])]):
            vals.append(v)
            if v <= cfg["target_loss"]:
                break
        status = "reached_target" if vals[-1] <= cfg["target_loss"] else "max_epochs"
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({**Config().to_dict(), **cfg, "versions": STACK_RAN}))
        (out / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"epoch": i + 1, "loss": 1.0, "val_loss": v, "seconds": i + 1.0}) + "\n"
                for i, v in enumerate(vals)
            )
        )
        (out / "result.json").write_text(
            json.dumps(
                {
                    "status": status,
                    "epochs": len(vals),
                    "seconds": len(vals),
                    "time_to_target_s": None,
                    "final_val_loss": vals[-1],
                }
            )
        )
        (out / "state.json").write_text("{}")
        self.trainings.append(name)
        return 0, ""


def _study_folder(root, data):
    root.mkdir(parents=True)
    (root / "train.yaml").write_text(yaml.safe_dump({"data_path": str(data), "stall_patience": 3}))
    return root


def _tiny_data(tmp_path):
    data = tmp_path / "data.h5"
    with h5py.File(data, "w") as f:
        f.create_dataset("train/cubes", data=np.zeros((2, 2, 2, 2), np.float32))
    return data


def _runner(root, data, *others):
    """A CountingRunner in a new study folder with its own ledger, reading `others` too."""
    runner = CountingRunner(_study_folder(root, data), root / "train.yaml", None)
    runner.ledger = ledger.Ledger(root / "ledger.jsonl", list(others))
    return runner


@pytest.mark.medium
def test_a_second_machine_trains_nothing_the_ledger_holds(tmp_path):
    data = _tiny_data(tmp_path)
    first = _runner(tmp_path / "first", data)
    asked = {"seed": 0, "max_epochs": 64, "target_loss": 1.0}
    assert first.run("weak-n2-s0", "weak", 2, asked)["epochs"] == 6 and first.trainings == ["weak-n2-s0"]
    assert first.run("weak-n2-s0", "weak", 2, asked)["epochs"] == 6 and first.trainings == ["weak-n2-s0"]
    # another machine: a new runs folder (its own copy of the data) and the first one's ledger
    data2 = tmp_path / "data2.h5"
    data2.write_bytes(data.read_bytes())
    second = CountingRunner(_study_folder(tmp_path / "second", data2), tmp_path / "second" / "train.yaml", None)
    second.ledger = ledger.Ledger(tmp_path / "second" / "ledger.jsonl", [tmp_path / "first" / "ledger.jsonl"])
    got = second.run("weak-n2-s0", "weak", 2, asked)
    assert second.trainings == [] and got["epochs"] == 6 and got["status"] == "reached_target"
    assert (tmp_path / "second" / "weak-n2-s0" / ledger.MARKER).is_file(), "the folder says where it came from"
    assert [json.loads(row)["val_loss"] for row in (tmp_path / "second" / "weak-n2-s0" / "metrics.jsonl").open()] == [
        4.0,
        3.0,
        2.0,
        1.5,
        1.2,
        0.9,
    ]
    # what the ledger cannot answer is trained: another seed, and a lower target
    second.run("weak-n2-s1", "weak", 2, {**asked, "seed": 1})
    second.run("weak-n2-s0", "weak", 2, {**asked, "target_loss": 0.85})
    assert second.trainings == ["weak-n2-s1", "weak-n2-s0"]
    assert len(ledger.read_entries(tmp_path / "second" / "ledger.jsonl")) == 2
    # each entry names the TensorFlow and Keras its run's config.json says it ran on
    assert [e["stack"] for e in ledger.read_entries(tmp_path / "second" / "ledger.jsonl")] == [
        {"tensorflow": "2.21.0", "keras": "tf_keras 2.21.0", "numpy": "1.26.4"}
    ] * 2
    assert [ledger.stack_of(e) for e in ledger.read_entries(tmp_path / "second" / "ledger.jsonl")] == [
        ("2.21.0", "tf_keras 2.21.0", True)
    ] * 2
    # a run asked for with the weights it leaves behind is trained even when the ledger holds it
    third = CountingRunner(_study_folder(tmp_path / "third", data2), tmp_path / "third" / "train.yaml", None)
    third.ledger = ledger.Ledger(tmp_path / "third" / "ledger.jsonl", [tmp_path / "first" / "ledger.jsonl"])
    third.run("weak-n2-s0", "weak", 2, asked, need_weights=True)
    assert third.trainings == ["weak-n2-s0"]
    assert math.isclose(
        json.loads((tmp_path / "third" / "weak-n2-s0" / "result.json").read_text())["final_val_loss"], 0.9
    )


def test_the_plan_counts_the_runs_the_ledger_does_not_hold():
    from deepdensity.study.core.preset import Study
    from deepdensity.study.plan import missing as plan

    study = Study(workers=[1, 2, 4], modes=["strong", "weak"], seeds=[0, 1], base_lr=0.002, train={"stall_patience": 3})
    earlier = {"eta": 0.002, "target": 1.0, "cap": 64, "collapse_loss": 5.0}
    stop = {**STOP, "stall_patience": 3}
    held = _entry([4.0, 0.9], "reached_target", stopping=stop, n=2)
    held["config"]["base_lr"], held["seed"], held["run"] = 0.002, 1, "weak-n2-s1"
    other_eta = dict(held, config={**held["config"], "base_lr": 0.003}, seed=0, run="weak-n2-s0")
    lines = plan.missing_lines(study, [held, other_eta], earlier, parallel=2)
    # weak N = 2 seed 1 is held; seed 0 only at another eta; N = 4 not at all. Passes: N = 2's two
    # epochs x 2 for seed 0; N = 4 from N = 2's epochs, x 4 passes an epoch, for both seeds.
    assert (
        lines[0].startswith("  missing runs: 3 (about 20 passes")
        and "weak N = 2 seeds 0" in lines[0]
        and "weak N = 4 seeds 0, 1" in lines[0]
    )
    assert "h here at 5.00 s a pass" in lines[0], "seconds a pass from the entry's own clock: 20 s over 2 epochs x 2"
    # what the line does not look up, it says
    assert lines[0].endswith(
        "; not counted here: the sequential runs (and at 2 x eta), the target's calibration "
        "runs, the stall and instruction-set checks' runs (each reused where the ledger or the "
        "runs folder holds it)"
    )


def test_the_plan_counts_the_filters_and_the_batch_sweeps_runs_the_ledger_does_not_hold():
    """The beyond study's runs past its cells, looked up by name: the filter's on filtered and
    random data (their N read off the ones on record), the sweep's at each batch and lr rule
    for every sequential seed (the base batch's run is the sequential run). A filter run is
    not taken for a cell's run of the same mode, N and seed."""
    from deepdensity.study.core.preset import Study
    from deepdensity.study.plan import missing as plan

    study = Study(
        workers=[1, 2],
        modes=["strong", "weak"],
        seeds=[0, 1],
        base_lr=0.002,
        calibration_seeds=[100],
        train={"stall_patience": 3},
        filter_modes=["weak"],
        batch_sweep=[16, 32],
    )
    earlier = {"eta": 0.002, "target": 1.0, "cap": 64, "collapse_loss": 5.0}

    def named(run, n, seed, vals):
        e = _entry(vals, "reached_target", stopping={**STOP, "stall_patience": 3}, n=n)
        e["config"]["base_lr"], e["seed"], e["run"] = 0.002, seed, run
        return e

    entries = [named("weak-n2-network-s0", 2, 0, [4.0, 3.0, 0.9]), named("batch-b16-eta-s0", 1, 0, [4.0, 0.9])]
    line = plan.missing_lines(study, entries, earlier, parallel=1)[0]
    # cells: weak N = 2 seeds 0 and 1 (the filter's run is no cell's), at the cap: 2 x 64 x 2 passes;
    # filter: network seed 1, random seeds 0 and 1, each like network seed 0: 3 epochs x 2 passes;
    # sweep (sequential seeds 0, 1 here): b = 16 at eta seed 1 (2 epochs), at linear seeds 0, 1 (the cap)
    assert line.startswith("  missing runs: 8 (about 404 passes"), line  # 256 + 18 + 2 + 128
    assert "weak N = 2 seeds 0, 1" in line and "filter weak N = 2 on network data seeds 1" in line
    assert "filter weak N = 2 on random data seeds 0, 1" in line
    assert "batch sweep b = 16 at eta seeds 1;" in line and "batch sweep b = 16 at linear seeds 0, 1" in line
    assert "b = 32" not in line, "the base batch's run is the sequential run"
    assert "4 of them taken at the cap (64 epochs)" in line, line
    # without any filter run on record its N is not known, and said
    line = plan.missing_lines(study, entries[1:], earlier, parallel=1)[0]
    assert "4 not estimated" in line and "filter weak on network data seeds 0, 1" in line, line


def test_the_plan_holds_the_sweeps_linear_runs_and_judges_the_sweep_without_the_stall_rule():
    """The linear rule's sweep runs train at eta * b / B, not eta: they are held at that lr (the
    plan once counted every one of them missing). The sweep runs to the target or the cap
    (docs/beyond.md, amendment of 2026-11-27): a sweep run the stall rule ended is missing,
    while a cell's run the same rule ended is held."""
    from deepdensity.study.core.preset import Study
    from deepdensity.study.plan import missing as plan

    study = Study(
        workers=[1, 2],
        modes=["strong", "weak"],
        seeds=[0],
        base_lr=0.002,
        calibration_seeds=[100],
        train={"stall_patience": 3},
        batch_sweep=[16, 32],
    )
    earlier = {"eta": 0.002, "target": 1.0, "cap": 64, "collapse_loss": 5.0}

    def named(run, n, seed, lr, vals, status):
        e = _entry(vals, status, stopping={**STOP, "stall_patience": 3}, n=n)
        e["config"]["base_lr"], e["seed"], e["run"] = lr, seed, run
        return e

    stalls = [4.0, 2.0, 2.5, 2.5, 2.5]  # no new best for 3 epochs after 2.0, above the target 1.0
    entries = [
        named("weak-n2-s0", 2, 0, 0.002, stalls, "stalled"),
        named("batch-b16-eta-s0", 1, 0, 0.002, stalls, "stalled"),
        named("batch-b16-linear-s0", 1, 0, 0.002 * 16 / 32, [4.0, 0.9], "reached_target"),
    ]
    line = plan.missing_lines(study, entries, earlier, parallel=1)[0]
    assert line.startswith("  missing runs: 1 ") and "batch sweep b = 16 at eta seeds 0;" in line, line


@pytest.mark.medium
def test_a_study_that_trains_nothing_takes_what_the_ledger_holds_and_skips_the_rest(tmp_path):
    from deepdensity.study.run.design import run_first_seeds
    from deepdensity.study.run.outcomes import Book
    from deepdensity.study.run.runner import NotHeld

    data = _tiny_data(tmp_path)
    first = _runner(tmp_path / "first", data)
    asked = {"max_epochs": 64, "target_loss": 1.0}
    first.run("weak-n2-s0", "weak", 2, {**asked, "seed": 0})
    later = CountingRunner(_study_folder(tmp_path / "later", data), tmp_path / "later" / "train.yaml", None)
    later.ledger = ledger.Ledger(tmp_path / "later" / "ledger.jsonl", [tmp_path / "first" / "ledger.jsonl"])
    later.may_train = False
    with pytest.raises(NotHeld, match=r"weak-n2-s1 \(weak N = 2, seed 1\) is not in the ledger"):
        later.run("weak-n2-s1", "weak", 2, {**asked, "seed": 1})
    book = Book()
    units = {("weak", 2): lambda seed: [later.run(f"weak-n2-s{seed}", "weak", 2, {**asked, "seed": seed})["status"]]}
    run_first_seeds(later, book, units, [0, 1])
    assert book.seeds == {("weak", 2): [0]} and later.trainings == [], "seed 0 from the ledger, seed 1 left out"


def test_a_whole_last_entry_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(_entry([4.0, 0.9], "reached_target")))  # an edited file: no final newline
    assert len(ledger.read_entries(path)) == 1
    ledger.Ledger(path).append(_entry([4.0, 2.0, 0.9], "reached_target"))
    assert [len(e["val_losses"]) for e in ledger.read_entries(path)] == [2, 3]


def test_the_data_identity_covers_cubes_read_through_links(tmp_path):
    """A data file whose cubes live in another file (an external link) is the data the runs
    read: replacing the linked file's cubes changes the identity."""

    def cubes_file(path, value):
        with h5py.File(path, "w") as f:
            f["cubes"] = np.full((2, 4, 4, 4), value, np.float32)

    cubes_file(tmp_path / "a.h5", 0.5)
    main = tmp_path / "main.h5"
    with h5py.File(main, "w") as f:
        f.create_group("train")["cubes"] = h5py.ExternalLink("a.h5", "/cubes")
        f.create_group("val")["cubes"] = np.zeros((1, 4, 4, 4), np.float32)
        f["alias"] = h5py.SoftLink("/val/cubes")
    before = data_identity(main)
    cubes_file(tmp_path / "a.h5", 0.25)
    assert data_identity(main) != before, "the linked cubes changed"


def test_the_data_identity_is_the_cubes_alone(tmp_path):
    """The identity hashes each split's cubes (name, dtype, shape, values: the formula below,
    written out here), not the columns beside them, which no run reads: a diameter's last bit
    (numpy 2's exponential on AVX-512) leaves it, a cube's changes it."""
    import hashlib

    cubes = np.arange(2 * 4 * 4 * 4, dtype=np.float32).reshape(2, 4, 4, 4)

    def write(path, diameters, cubes):
        with h5py.File(path, "w") as f:
            f.create_group("train")["cubes"] = cubes
            f["train"]["diameter_mm"] = diameters

    write(tmp_path / "a.h5", np.array([5.0, 7.0]), cubes)
    want = hashlib.sha256("train/cubes|<f4|(2, 4, 4, 4)|".encode() + cubes.tobytes()).hexdigest()[:32]
    assert data_identity(tmp_path / "a.h5") == "cubes:" + want
    write(tmp_path / "b.h5", np.array([5.0, np.nextafter(7.0, 8.0)]), cubes)
    assert data_identity(tmp_path / "b.h5") == "cubes:" + want, "a diameter's last bit"
    moved = cubes.copy()
    moved[1, 2, 3, 0] = np.nextafter(moved[1, 2, 3, 0], np.float32(1e9))
    write(tmp_path / "c.h5", np.array([5.0, 7.0]), moved)
    assert data_identity(tmp_path / "c.h5") != "cubes:" + want, "one ulp of one cube value"


def test_the_committed_ledgers_entries_are_read_with_their_cubes_identity():
    """Written while the identity hashed every dataset ("arrays:"), the committed entries are
    read with the identity of their cubes (CUBES_OF) and the key it gives, so that a study
    whose data holds those cubes reuses them whatever the last bits of its diameters; an entry
    of an identity the table lacks keeps its own."""
    from tests.support import ROOT

    arrays, cubes = "arrays:2ab307e62792a44b99e68add21ec9e6e", "cubes:7da38e56852aedd509f25ab413ca22b8"
    raw = [json.loads(line) for line in (ROOT / "reports" / "ledger.jsonl").read_text().splitlines()]
    read = ledger.read_entries(ROOT / "reports" / "ledger.jsonl")
    assert {e["data"] for e in raw} <= {arrays, cubes}, "as recorded, or as read since and published"
    assert {e["data"] for e in read} == {cubes}
    e = next(e for e in read if e["run"] == "weak-n4-s0")
    asked = ledger.run_key(e["config"], "weak", 4, "one process", "", cubes)
    assert e["key"] == asked
    # the entry as it was written before: its identity and key every dataset's
    before = {**e, "data": arrays, "key": ledger.run_key(e["config"], "weak", 4, "one process", "", arrays)}
    assert before["key"] != asked and ledger._keyed_by_its_cubes(before) == e
    other = {**before, "data": "arrays:f654d15c25207004e78044bf013bc510"}
    assert ledger._keyed_by_its_cubes(other) == other, "an identity the table lacks"
    stale = {**before, "key": "0" * 24}
    assert ledger._keyed_by_its_cubes(stale) == stale, "a key another training version made"


def test_an_entry_from_before_the_stack_was_recorded_reads_as_the_pin_of_then():
    """Until the ledger recorded the stack, every revision pinned tensorflow-cpu==2.15.1 in
    setup.py (`git log -p -- setup.py`), whose tf.keras is keras 2.15.0: flagged as not recorded."""
    old = _entry([2.0, 0.9], "reached_target")
    assert "stack" not in old
    assert ledger.stack_of(old) == ("2.15.1", "keras 2.15.0", False)
    assert ledger.stack_of({**old, "stack": {"tensorflow": "2.21.0", "keras": None}}) == ("2.21.0", "?", True)


def test_where_the_runs_were_trained_names_their_tensorflow_and_keras():
    from types import SimpleNamespace

    from deepdensity.study.report.report_checks import where_runs_ran

    record = {"eta": Config().base_lr, "provenance": {"generated": "2099-01-01 00:00 UTC"}}
    then = {**_entry([2.0, 0.9], "reached_target"), "run": "a", "machine": {"cpu": "EPYC", "onednn_isa": "AVX2"}}
    now = {**then, "run": "b", "stack": {"tensorflow": "2.21.0", "keras": "tf_keras 2.21.0"}}
    cells = [SimpleNamespace(run=e["run"], seed=0, status="reached_target", epochs=2) for e in (then, now)]
    text = where_runs_ran(record, cells, [then, now])
    assert "| EPYC | AVX2 | 2.15.1* | keras 2.15.0* | abc | t | 1 |" in text
    assert "| EPYC | AVX2 | 2.21.0 | tf_keras 2.21.0 | abc | t | 1 |" in text
    assert "\\* Not recorded in the ledger then" in text
    assert "Not recorded" not in where_runs_ran(record, cells[1:], [now])


CHECKED = "TensorFlow 2.21.0, tf-keras 2.21.0"


@pytest.mark.medium
def test_two_stack_check_invocations_over_one_runs_folder_record_each_run_once(tmp_path):
    """repro --stack-check twice over one runs folder: the second finds the first's run in the
    folder and records nothing new (entry_of once stored the check's run under the default key,
    so the check's own request never found it and every invocation added it again)."""
    data = _tiny_data(tmp_path)
    asked = {"seed": 0, "max_epochs": 64, "target_loss": 1.0}
    own = tmp_path / "study" / "ledger.jsonl"
    first = _runner(tmp_path / "study", data)
    first.stack_check = CHECKED
    first.run("stack-tf2210-weak-n2-s0", "weak", 2, asked)
    again = CountingRunner(tmp_path / "study", tmp_path / "study" / "train.yaml", None)
    again.ledger, again.stack_check = ledger.Ledger(own), CHECKED
    again.run("stack-tf2210-weak-n2-s0", "weak", 2, asked)
    entries = ledger.read_entries(own)
    assert first.trainings == ["stack-tf2210-weak-n2-s0"] and again.trainings == []
    assert len(entries) == 1 and entries[0]["stack_check"] == CHECKED
    assert entries[0]["stack"] == {k: v for k, v in STACK_RAN.items() if k in ("tensorflow", "keras", "numpy")}
    # a default-study request is not answered by the check's run: it trains its own
    default = _runner(tmp_path / "default", data, own)
    default.run("weak-n2-s0", "weak", 2, asked)
    assert default.trainings == ["weak-n2-s0"]


def test_a_stack_check_entry_written_under_the_default_key_is_read_under_its_stacks():
    """The committed ledger's 17 stack-check entries were written under the default study's
    keys: they are read under their stack's key, so that only a stack check finds them."""
    cfg = {**{k: 0 for k in ledger.STOPPING}, "seed": 0, "base_lr": 0.001, "max_epochs": 64, "target_loss": 1.0}
    old = ledger.entry_of(
        "stack-tf2210-weak-n2-s0",
        "weak",
        2,
        0,
        "one process",
        "",
        "arrays:a",
        cfg,
        {"status": "reached_target", "epochs": 1},
        None,
        [0.5],
        {"host": "h"},
        "r",
        "trained",
        stack={"tensorflow": "2.21.0", "keras": "tf_keras 2.21.0"},
    )
    default_key = ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:a")
    assert old["key"] == default_key and "stack_check" not in old, "as entry_of wrote it before the fix"
    read = ledger._keyed_by_its_stack(old)
    assert read["key"] == ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:a", CHECKED) != default_key
    assert read["stack_check"] == CHECKED
    # a default-study run and an entry written with its stack's key are read as they are
    plain = {**old, "run": "weak-n2-s0"}
    assert ledger._keyed_by_its_stack(plain) is plain
    right = ledger.entry_of(
        "stack-tf2210-weak-n2-s0",
        "weak",
        2,
        0,
        "one process",
        "",
        "arrays:a",
        cfg,
        {"status": "reached_target", "epochs": 1},
        None,
        [0.5],
        {"host": "h"},
        "r",
        "trained",
        stack={"tensorflow": "2.21.0", "keras": "tf_keras 2.21.0"},
        stack_check=CHECKED,
    )
    assert ledger._keyed_by_its_stack(right)["key"] == read["key"]


def test_the_committed_ledger_reads_its_stack_check_runs_under_their_own_keys_and_no_other_key_moves():
    """Whether the committed ledger was written before the stack check's runs were keyed by their
    stack (17 entries then stored under the default study's keys) or after, every entry reads
    with the key its own settings, data and stack-check label give, and no default run's key is a
    stack-check run's."""
    from tests.support import ROOT

    read = ledger.read_entries(ROOT / "reports" / "ledger.jsonl")
    checks = [e for e in read if e["run"].startswith("stack-tf")]
    assert len(checks) == 17 and all(
        e["run"].startswith("stack-tf2210-") and e["stack_check"] == CHECKED for e in checks
    )
    assert all(
        e["key"]
        == ledger.run_key(
            e["config"], e["mode"], e["n"], e["launcher"], e["isa_cap"], e["data"], e.get("stack_check", "")
        )
        for e in read
    )
    default_keys = {e["key"] for e in read if not e["run"].startswith("stack-tf")}
    assert not default_keys & {e["key"] for e in checks}
