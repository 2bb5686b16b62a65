"""Careless input to the three command lines, one row per case: every one is refused with
exactly one `error:` line on stderr, exit status 2, no traceback, and no file or folder
left behind. The CLIs run in this process (their `main`), so a traceback here is an
exception escaping `main`, which fails the test."""

import json
import shutil

import h5py
import numpy as np
import pytest

from deepdensity.data import cli as data_cli
from deepdensity.study import repro

# train.py's main, in this process (train.py itself only starts the console first: its signal
# handling is a process's, tested in tests/training/test_ctrl_c.py)
from deepdensity.training import cli as train_cli
from deepdensity.utils.files import mark_folder
from tests.support import ROOT

CSV_HEADER = "seriesuid,coordX,coordY,coordZ,diameter_mm\n"


def cubes_file(path, train, val):
    with h5py.File(path, "w") as f:
        f["train/cubes"], f["val/cubes"] = train, val


def structure_files(d, unit):
    """HDF5 structure rather than values (issue 47): links that lead nowhere, an object of the
    wrong kind, element types that are not real numbers. Each file's values are good."""
    cubes_file(d / "soft_dangling.h5", unit, h5py.SoftLink("/nowhere"))
    cubes_file(d / "soft_loop.h5", unit, h5py.SoftLink("/val/cubes"))
    with h5py.File(d / "soft_split.h5", "w") as f:
        f["train"], f["val/cubes"] = h5py.SoftLink("/gone"), unit[:8]
    cubes_file(d / "ext_missing.h5", unit, h5py.ExternalLink("gone.h5", "/cubes"))
    with h5py.File(d / "other.h5", "w") as f:
        f["cubes"] = unit[:8]
    cubes_file(d / "ext_no_object.h5", unit, h5py.ExternalLink("other.h5", "/nothing"))
    cubes_file(d / "column_dangling.h5", unit, unit[:8])
    with h5py.File(d / "column_dangling.h5", "a") as f:
        f["train/seriesuid"] = h5py.ExternalLink("gone.h5", "/uids")
    with h5py.File(d / "vds_source.h5", "w") as f:
        f["cubes"] = unit[:8]
    layout = h5py.VirtualLayout(shape=unit[:8].shape, dtype="f4")
    layout[...] = h5py.VirtualSource(str(d / "vds_source.h5"), "cubes", shape=unit[:8].shape)
    with h5py.File(d / "vds_missing.h5", "w") as f:
        f["train/cubes"] = unit
        f.create_virtual_dataset("val/cubes", layout, fillvalue=0)
    (d / "vds_source.h5").unlink()  # its cubes would read as zeros: air, without a word
    with h5py.File(d / "raw_missing.h5", "w") as f:
        f["train/cubes"] = unit
        f.create_dataset(
            "val/cubes", shape=unit[:8].shape, dtype="f4", external=[(str(d / "gone.raw"), 0, unit[:8].nbytes)]
        )
    with h5py.File(d / "cubes_group.h5", "w") as f:
        f["train/cubes/x"], f["val/cubes"] = unit, unit[:8]
    with h5py.File(d / "split_dataset.h5", "w") as f:
        f["train"], f["val/cubes"] = unit, unit[:8]
    cubes_file(d / "datatype.h5", unit, np.dtype("f4"))  # a named datatype, not a dataset
    cubes_file(d / "subgroup.h5", unit, unit[:8])
    with h5py.File(d / "subgroup.h5", "a") as f:
        f["val/extra/x"] = np.zeros(8)
    cubes_file(d / "strings.h5", unit, np.array([b"cube"] * 8))
    cubes_file(d / "compound.h5", unit, np.zeros(unit[:8].shape, [("lo", "f4"), ("hi", "f4")]))
    cubes_file(d / "int8.h5", (unit > 0.5).astype(np.int8), (unit[:8] > 0.5).astype(np.int8))
    cubes_file(d / "bool.h5", unit > 0.5, unit[:8] > 0.5)


@pytest.fixture(scope="module")
def files(tmp_path_factory, smoke_data):
    """Every bad input of the table, written once."""
    d = tmp_path_factory.mktemp("bad")
    rng = np.random.default_rng(0)
    unit = rng.random((64, 16, 16, 16), dtype=np.float32)
    cubes_file(d / "raw_hu.h5", (unit * 1400 - 1000), unit[:8] * 1400 - 1000)
    nan = unit.copy()
    nan[3, 1, 2, 3] = np.nan
    cubes_file(d / "nan.h5", nan, unit[:8])
    cubes_file(d / "flat.h5", unit[:, :, :, :8], unit[:8, :, :, :8])
    cubes_file(d / "val_empty.h5", unit, unit[:0])
    raw = smoke_data.read_bytes()
    (d / "truncated.h5").write_bytes(raw[: len(raw) // 3])
    structure_files(d, unit)
    (d / "latin1.yaml").write_bytes("# réglages\nbase_lr: 0.002\n".encode("latin-1"))
    (d / "int_key.yaml").write_text("1: 0.002\n")
    (d / "list.yaml").write_text("- base_lr\n")
    (d / "broken.yaml").write_text("base_lr: [1,\n")
    (d / "twice.yaml").write_text("base_lr: 0.001\nbase_lr: 0.002\n")
    (d / "latin1.csv").write_bytes((CSV_HEADER + "nodule-é,1,2,3,5\n").encode("latin-1"))
    (d / "columns.csv").write_text("uid,x,y,z\n1,2,3,4\n")
    (d / "words.csv").write_text(CSV_HEADER + "1.2.3,left,2,3,5\n")
    (d / "good.csv").write_text(CSV_HEADER + "1.2.3,1,2,3,5\n")
    (d / "empty_dir").mkdir()
    (d / "bad_xml").mkdir()
    (d / "bad_xml" / "069.xml").write_text("<LidcReadMessage><readingSession>")
    (d / "a_file").write_text("")
    held = d / "held"  # a run folder, as a run leaves it after one epoch
    mark_folder(held, "run")
    (held / "metrics.jsonl").write_text('{"epoch": 1, "val_loss": 0.1}\n')
    (held / "config.json").write_text(json.dumps({"mode": "strong"}))
    half = d / "half_state"
    shutil.copytree(held, half)
    (half / "state.json").write_text('{"epoch": 0, "elapsed')
    no_config = d / "no_config"
    mark_folder(no_config, "run")
    (no_config / "state.json").write_text('{"epoch": 0, "elapsed_s": 1.0, "checkpoint": "ckpt/epoch-0001"}')
    lacking = d / "lacking_state"
    shutil.copytree(held, lacking)
    (lacking / "state.json").write_text('{"epoch": "one"}')
    for name, text in {
        "p_train_typo": "train: {bas_lr: 0.01}\n",
        "p_train_range": "train: {beta_1: 1.5}\n",
        "p_workers_scalar": "workers: 4\n",
        "p_no_seeds": "seeds: []\n",
        "p_neg_seed": "seeds: [-1]\n",
        "p_data_small": "data: {n: 10, val: 20}\n",
        "p_data_key": "data: {n: 100, vall: 20}\n",
        "p_calibration": "calibration_epochs: 0\n",
        "p_modes": "modes: [fast]\n",
        "p_target": "target_loss: -1\n",
        "p_base_lr": "base_lr: 0\n",
        "p_train_list": "train: [1, 2]\n",
        "p_int_key": "1: 2\n",
        "p_dup_workers": "workers: [1, 2, 2]\n",
        "p_tiny": "data: {n: 100, val: 20}\nseeds: [0]\nworkers: [1]\nmodes: [strong]\nbase_lr: 0.001\n",
        # cells no run can train: caught as the preset loads, before the clock's minutes
        "p_strong_64": "workers: [1, 2, 64]\nmodes: [strong, weak]\n",
        "p_weak_data": "data: {n: 100, val: 20}\ntrain: {epoch_definition: global}\n"
        "workers: [1, 2, 4]\nmodes: [strong, weak]\n",
        "p_odd_batch": "train: {batch_size: 30}\nworkers: [1, 4]\nmodes: [strong]\n",
        "p_mode_workers": "workers: [1, 2, 3]\nmodes: [strong, weak]\nmode_workers: {strong: [1, 3]}\n",
    }.items():
        (d / f"{name}.yaml").write_text(text)
    (d / "p_latin1.yaml").write_bytes("# étude\nseeds: [0]\n".encode("latin-1"))
    return d


SMOKE = ["--config", str(ROOT / "configs" / "smoke.yaml")]

# (cli, argv with {d} for the files folder and {data} for a good data file, words of the error)
CASES = [
    # train.py: the config schema
    ("train", ["--set", "bogus=1"], "unknown config key 'bogus'"),
    ("train", ["--set", "data_path="], "--set data_path= gives data_path no value"),
    ("train", ["--set", "base_lr= "], "--set base_lr= gives base_lr no value"),
    ("train", ["--elastic"], "elastic training needs epoch_definition: global"),
    ("train", ["--elastic", "--set", "epoch_definition=global"], "--elastic needs an elastic launch"),
    (
        "train",
        ["--elastic", "--set", "epoch_definition=global", "--emulate-workers", "2"],
        "cannot be combined with --emulate-workers",
    ),
    ("train", ["--set", "batch_size=big"], "batch_size expects an integer"),
    ("train", ["--set", "base_lr=inf"], "base_lr must be a finite number"),
    ("train", ["--set", "base_lr=nan"], "base_lr must be a finite number"),
    ("train", ["--set", "beta_1=1"], "beta_1 must be in [0, 1)"),
    ("train", ["--set", "seed=-1"], "seed must be in [0, 2^32)"),
    ("train", ["--set", "epsilon=0"], "epsilon must be a finite number > 0"),
    ("train", ["--set", "target_loss=-1"], "target_loss must be"),
    ("train", ["--set", "n_components=0"], "n_components must be >= 1"),
    ("train", ["--set", "conv_filters=[8,8]"], "must have the same length"),
    ("train", ["--set", "xla=maybe"], "xla must be one of"),
    ("train", ["--set", "rendering=gpu"], "rendering must be one of"),
    ("train", ["--set", "rendering=kernel", "--set", "xla=step"], "rendering: kernel cannot run under xla: step"),
    ("train", ["--set", "epoch_definition=pass"], "epoch_definition must be one of"),
    ("train", ["--set", "max_train_cubes=16"], "fewer than one batch"),
    # sizes: 10^12 workers' batches are petabytes, more than any machine the tests run on has
    (
        "train",
        ["--mode", "weak", "--emulate-workers", "1000000000000"],
        "--emulate-workers 1000000000000 is more than this machine can hold",
    ),
    (
        "train",
        ["--mode", "weak", "--set", "epoch_definition=global", "--emulate-workers", "1000000000000"],
        "fewer than one global batch of 32000000000000",
    ),
    ("train", ["--emulate-workers", "3"], "3 does not divide 32"),
    ("train", ["--emulate-workers", "0"], "--emulate-workers must be >= 1"),
    ("train", ["--mode", "adaptive"], "needs N >= 2 workers"),
    ("train", ["--mode", "local", "--emulate-workers", "3"], "3 does not divide 32"),
    ("train", ["--set", "local_steps=0"], "local_steps must be >= 1"),
    ("train", ["--set", "adaptive_theta=0"], "adaptive_theta must be a finite number > 0"),
    # train.py: config files
    ("train", ["--config", "{d}/latin1.yaml"], "is not UTF-8 text"),
    ("train", ["--config", "{data}"], "is an HDF5 file, not text"),
    ("train", ["--config", "{d}/int_key.yaml"], "key 1 is not a setting name"),
    ("train", ["--config", "{d}/list.yaml"], "must hold a mapping"),
    ("train", ["--config", "{d}/broken.yaml"], "is not valid YAML at line 2, column 1"),
    ("train", ["--config", "{d}/twice.yaml"], "line 2, column 1: key 'base_lr' is given twice"),
    ("train", ["--config", "{d}/missing.yaml"], "not found"),
    ("train", ["--config", "{d}/empty_dir"], "is a folder"),
    # train.py: data
    ("train", ["--set", "data_path={d}/raw_hu.h5"], "raw Hounsfield units"),
    ("train", ["--set", "data_path={d}/nan.h5"], "NaN or inf"),
    ("train", ["--set", "data_path={d}/flat.h5"], "expected (N, G, G, G)"),
    ("train", ["--set", "data_path={d}/truncated.h5"], "cannot be read"),
    ("train", ["--set", "data_path={d}/val_empty.h5"], "/val/cubes is empty"),
    ("train", ["--set", "data_path={d}/nope.h5"], "does not exist"),
    ("train", ["--set", "data_path={d}/good.csv"], "is not an HDF5 file"),
    # train.py: HDF5 structure rather than values, one line naming the file and the object
    (
        "train",
        ["--set", "data_path={d}/soft_dangling.h5"],
        "soft_dangling.h5: /val/cubes is a soft link to /nowhere, which leads nowhere (component not found)",
    ),
    ("train", ["--set", "data_path={d}/soft_loop.h5"], "soft_loop.h5: /val/cubes is a soft link to /val/cubes"),
    ("train", ["--set", "data_path={d}/soft_split.h5"], "soft_split.h5: /train is a soft link to /gone"),
    (
        "train",
        ["--set", "data_path={d}/ext_missing.h5"],
        "ext_missing.h5: /val/cubes is an external link to /cubes in gone.h5, which cannot be followed",
    ),
    (
        "train",
        ["--set", "data_path={d}/ext_no_object.h5"],
        "/val/cubes is an external link to /nothing in other.h5, which cannot be followed (object 'nothing' "
        "doesn't exist)",
    ),
    ("train", ["--set", "data_path={d}/column_dangling.h5"], "/train/seriesuid is an external link to /uids"),
    ("train", ["--set", "data_path={d}/vds_missing.h5"], "/val/cubes is a virtual dataset whose source cubes in"),
    ("train", ["--set", "data_path={d}/raw_missing.h5"], "/val/cubes keeps its values in the external file"),
    (
        "train",
        ["--set", "data_path={d}/cubes_group.h5"],
        "cubes_group.h5: /train/cubes is a group where deepdensity's layout has a dataset",
    ),
    (
        "train",
        ["--set", "data_path={d}/split_dataset.h5"],
        "split_dataset.h5: /train is a dataset where deepdensity's layout has a group",
    ),
    ("train", ["--set", "data_path={d}/datatype.h5"], "/val/cubes is a named datatype where"),
    ("train", ["--set", "data_path={d}/subgroup.h5"], "/val/extra is a group where deepdensity's layout has a dataset"),
    ("train", ["--set", "data_path={d}/strings.h5"], "strings.h5: /val/cubes holds strings; expected real"),
    ("train", ["--set", "data_path={d}/compound.h5"], "/val/cubes holds compound records (fields lo, hi)"),
    (
        "train",
        ["--set", "data_path={d}/int8.h5"],
        "int8.h5: /train/cubes holds integers (int8), which are not converted on the way in; store the cubes as "
        "float32 intensities in [0, 1]",
    ),
    ("train", ["--set", "data_path={d}/bool.h5"], "/train/cubes holds integers (bool)"),
    # train.py: run folders
    ("train", ["--out", "{d}/a_file/run"], "cannot write to output folder"),
    ("train", ["--set", "data_path={d}/nan.h5", "--out", "{d}/new/deeper/run"], "NaN or inf"),  # parents go too
    ("train", ["--out", "{d}/held"], "already holds a run"),
    ("train", ["--out", "{d}/bad_xml"], "holds files this project did not write (069.xml); nothing was written"),
    ("train", ["--out", "{d}/bad_xml", "--resume"], "holds files this project did not write (069.xml)"),
    ("train", ["--out", "{d}/half_state", "--resume"], "state.json is damaged"),
    ("train", ["--out", "{d}/lacking_state", "--resume"], "state.json is damaged (no epoch"),
    ("train", ["--out", "{d}/no_config", "--resume"], "config.json is missing"),
    # python -m deepdensity.data
    ("data", ["synth", "--out", "{d}/s.h5", "--cube", "2"], "--cube must be at least 4"),
    ("data", ["synth", "--out", "{d}/s.h5", "--seed", "-1"], "--seed must be an integer in [0, 2^32), got -1"),
    ("data", ["synth", "--out", "{d}/s.h5", "--seed", "4294967296"], "--seed must be an integer in [0, 2^32)"),
    ("data", ["synth", "--out", "{data}"], "exists; pass --force to replace it"),
    ("data", ["synth", "--out", "{d}/s.csv"], "must end in .h5"),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/good.csv", "--out", "{data}"],
        "exists; pass --force",
    ),
    ("data", ["synth", "--out", "{d}/s.h5", "--n", "10", "--val", "2", "--spacing", "0"], "--spacing must be"),
    ("data", ["synth", "--out", "{d}/s.h5", "--n", "10", "--val", "2", "--spacing", "nan"], "--spacing must be"),
    ("data", ["synth-scans", "--out", "{d}/scans", "--n", "0"], "needs --n of at least 1"),
    (
        "data",
        ["synth", "--out", "{d}/s.h5", "--n", "1000000000000"],
        "synth --n 1000000000000 of 16^3 cubes needs at least 29.1 PiB of memory, more than this machine's",
    ),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/good.csv", "--out", "{d}/o.h5", "--cube", "0"],
        "--cube must be at least 4",
    ),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/good.csv", "--out", "{d}/o.h5", "--spacing", "-1"],
        "--spacing must be",
    ),
    (
        "data",
        [
            "prepare",
            "--luna",
            "{d}/empty_dir",
            "--annotations",
            "{d}/good.csv",
            "--out",
            "{d}/o.h5",
            "--window",
            "400",
            "-1000",
        ],
        "--window LO HI needs finite LO < HI",
    ),
    (
        "data",
        ["prepare", "--dicom", "{d}/bad_xml", "--lidc-xml", "--min-readers", "0", "--out", "{d}/o.h5"],
        "--min-readers must be >= 1",
    ),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/good.csv", "--out", "{d}/o.h5"],
        "no .mhd or .mha files",
    ),
    (
        "data",
        ["prepare", "--luna", "{d}/nowhere", "--annotations", "{d}/good.csv", "--out", "{d}/o.h5"],
        "is not a folder",
    ),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/latin1.csv", "--out", "{d}/o.h5"],
        "not UTF-8 text",
    ),
    ("data", ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/none.csv", "--out", "{d}/o.h5"], "not found"),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/columns.csv", "--out", "{d}/o.h5"],
        "missing column",
    ),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/words.csv", "--out", "{d}/o.h5"],
        "line 2: coordinates and diameter must be numbers",
    ),
    ("data", ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{data}", "--out", "{d}/o.h5"], "is an HDF5 file"),
    (
        "data",
        ["prepare", "--luna", "{d}/empty_dir", "--annotations", "{d}/good.csv", "--out", "{d}/o.h5", "--val", "-1"],
        "--val must be >= 0",
    ),
    ("data", ["prepare", "--dicom", "{d}/bad_xml", "--lidc-xml", "--out", "{d}/o.h5"], "not well-formed XML"),
    ("data", ["prepare", "--luna", "{d}/empty_dir", "--lidc-xml", "--out", "{d}/o.h5"], "use it with --dicom"),
    ("data", ["prepare", "--dicom", "{d}/empty_dir", "--out", "{d}/o.h5"], "exactly one of --annotations"),
    # python -m deepdensity.repro
    ("repro", ["--preset", "nope"], "no study preset 'nope'"),
    ("repro", ["--preset", "{d}/p_latin1.yaml"], "is not UTF-8 text"),
    ("repro", ["--preset", "{d}/p_train_typo.yaml"], "unknown config key 'bas_lr' (did you mean base_lr?)"),
    ("repro", ["--preset", "{d}/p_train_range.yaml"], "beta_1 must be in [0, 1)"),
    ("repro", ["--preset", "{d}/p_train_list.yaml"], "train must be a mapping"),
    ("repro", ["--preset", "{d}/p_workers_scalar.yaml"], "workers must be a non-empty list"),
    ("repro", ["--preset", "{d}/p_dup_workers.yaml"], "lists a value twice"),
    ("repro", ["--preset", "{d}/p_no_seeds.yaml"], "seeds must be a non-empty list"),
    ("repro", ["--preset", "{d}/p_neg_seed.yaml"], "seeds must be a non-empty list of integers >= 0"),
    ("repro", ["--preset", "{d}/p_data_small.yaml"], "data needs integers n > val > 0"),
    ("repro", ["--preset", "{d}/p_data_key.yaml"], "unknown data keys ['vall']"),
    ("repro", ["--preset", "{d}/p_calibration.yaml"], "calibration_epochs must be an integer >= 1"),
    ("repro", ["--preset", "{d}/p_modes.yaml"], "modes must be a non-empty list"),
    ("repro", ["--preset", "{d}/p_target.yaml"], "target_loss must be null"),
    ("repro", ["--preset", "{d}/p_base_lr.yaml"], "base_lr must be 'edge', 'default_study' or a positive number"),
    ("repro", ["--preset", "{d}/p_int_key.yaml"], "key 1 is not a setting name"),
    ("repro", ["--preset", "{d}/p_strong_64.yaml"], "no run can train the cell strong at N = 64: strong splits"),
    (
        "repro",
        ["--preset", "{d}/p_weak_data.yaml"],
        "no run can train the cell weak at N = 4: the training set has 80 cubes",
    ),
    ("repro", ["--preset", "{d}/p_odd_batch.yaml"], "no run can train the cell strong at N = 4"),
    ("repro", ["--preset", "{d}/p_mode_workers.yaml"], "no run can train the cell strong at N = 3"),
    ("repro", ["--preset", "{d}/p_tiny.yaml", "--runner", "horovodrun -np {{x}}"], "is not a template with {n}"),
    ("repro", ["--preset", "{d}/p_tiny.yaml", "--runner", "horovodrun -np 4"], "does not use {n}"),
    ("repro", ["--preset", "{d}/p_tiny.yaml", "--runner", "sh -c 'unclosed {{n}}"], "is not a template"),
]


def tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def run_cli(cli, argv, tmp_path):
    if cli == "train":
        return train_cli.main(
            ["--mode", "strong", *SMOKE, *argv] + ([] if "--out" in argv else ["--out", str(tmp_path / "out" / "run")])
        )
    if cli == "data":
        return data_cli.main(argv)
    return repro.main([*argv, "--runs", str(tmp_path / "out" / "runs"), "--reports", str(tmp_path / "out" / "reports")])


@pytest.mark.parametrize("cli, argv, message", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_error_line_exit_2_and_leaves_nothing(files, smoke_data, tmp_path, capsys, cli, argv, message):
    argv = [a.format(d=files, data=smoke_data) for a in argv]
    if cli == "train" and not any(a.startswith("data_path=") for a in argv):
        argv += ["--set", f"data_path={smoke_data}"]
    (tmp_path / "out").mkdir()
    before = tree(files), tree(tmp_path)
    status = run_cli(cli, argv, tmp_path)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert (tree(files), tree(tmp_path)) == before, "a refused command leaves nothing behind"


@pytest.mark.parametrize("tool, extra", [("encode", []), ("generate", ["--n", "4"]), ("filter", [])])
def test_a_writer_refuses_to_overwrite_its_input_or_an_existing_file(tool, extra, smoke_data, tmp_path, capsys):
    import importlib

    main = importlib.import_module(f"deepdensity.tools.{tool}").main
    before = smoke_data.read_bytes()
    assert main(["--run", str(tmp_path), "--data", str(smoke_data), "--out", str(smoke_data), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and ("input" in err or "overwrite the data" in err), err
    existing = tmp_path / "made.h5"
    existing.write_bytes(b"earlier work")
    assert main(["--run", str(tmp_path), "--data", str(smoke_data), "--out", str(existing), *extra]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert smoke_data.read_bytes() == before and existing.read_bytes() == b"earlier work"


@pytest.mark.parametrize("tool, extra", [("encode", []), ("generate", ["--n", "4"]), ("filter", [])])
@pytest.mark.parametrize(
    "bad, message",
    [
        ("soft_dangling.h5", "/val/cubes is a soft link to /nowhere"),
        ("column_dangling.h5", "/train/seriesuid is an external link"),
        ("int8.h5", "/train/cubes holds integers (int8)"),
    ],
)
def test_the_tools_refuse_a_broken_structure_in_one_line(files, tool, extra, bad, message, tmp_path, capsys):
    """encode, generate and filter read the data file as training does: the same one line."""
    import importlib

    main = importlib.import_module(f"deepdensity.tools.{tool}").main
    status = main(["--run", str(tmp_path / "run"), "--data", str(files / bad), "--out", str(tmp_path / "o.h5"), *extra])
    lines = capsys.readouterr().err.splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_a_newline_in_a_data_path_is_shown_as_given_and_the_file_is_found(tmp_path, capsys):
    """The file exists: the message is about its content, and names it as given (repr), not as a
    path with a space that does not exist. The file missing: the same name, and a synth command
    that writes that very file (bash's $'...')."""
    unit = np.random.default_rng(0).random((40, 16, 16, 16), dtype=np.float32)
    unit[0, 0, 0, 0] = np.nan
    odd = tmp_path / "two\nlines.h5"
    cubes_file(odd, unit, unit[:8])
    (tmp_path / "out").mkdir()
    out = ["--out", str(tmp_path / "out" / "run")]
    assert train_cli.main(["--mode", "strong", *SMOKE, "--set", f"data_path={odd}", *out]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {str(odd)!r}: /train/cubes holds NaN or inf values; re-create the file\n"
    missing = tmp_path / "not\nthere.h5"
    assert train_cli.main(["--mode", "strong", *SMOKE, "--set", f"data_path={missing}", *out]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: data file {str(missing)!r} does not exist; make one with: python -m "
        f"deepdensity.data synth --out $'{tmp_path}/not\\nthere.h5'"
    ), err
    assert not any((tmp_path / "out").iterdir())


def test_generate_refuses_more_cubes_than_memory_holds_before_it_reads_the_run(smoke_data, tmp_path, capsys):
    from deepdensity.tools import generate

    (tmp_path / "out").mkdir()
    # --run names no run at all: the size is refused first, from the data file's metadata alone
    status = generate.main(
        [
            "--run",
            str(tmp_path / "nowhere"),
            "--data",
            str(smoke_data),
            "--n",
            "1000000000000",
            "--out",
            str(tmp_path / "out" / "g.h5"),
        ]
    )
    lines = capsys.readouterr().err.splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: generate --n 1000000000000 of 4096-voxel cubes needs at least 43.7 PiB")
    assert not any((tmp_path / "out").iterdir())


def test_the_training_size_check_refuses_exactly_what_is_more_than_the_memory(monkeypatch, smoke_data):
    """weak at N = 32 on the smoke settings (128 training cubes, 16^3, 3 epochs) holds at least one
    batch of 1024 cubes of 4096 float32 voxels (16 MiB) and 3 epochs of 4 steps of 1024 int64
    indices (96 KiB): exactly 16875520 bytes. The check's memory is set here, so the boundary
    is exact on any host."""
    from deepdensity.config import ConfigError, load
    from deepdensity.training import preflight

    cfg = load(str(ROOT / "configs" / "smoke.yaml"), [f"data_path={smoke_data}"])
    need = 1024 * 16**3 * 4 + 3 * 4 * 1024 * 8
    assert need == 16875520
    monkeypatch.setattr(preflight, "memory_bytes", lambda: need)
    preflight.check_sizes(cfg, "weak", 32)  # fits: not a byte more is asked for
    monkeypatch.setattr(preflight, "memory_bytes", lambda: need - 1)
    with pytest.raises(
        ConfigError,
        match=r"--emulate-workers 32 is more than this machine can hold: one process's "
        r"batch of 1024 cubes \(16 MiB\) and the run's sample order, 3 epochs of "
        r"4 steps of 1024 \(96 KiB\), need at least 16.1 MiB of memory; it has "
        r"16.1 MiB: at most about N = 31 fits",
    ):
        preflight.check_sizes(cfg, "weak", 32)


def test_synth_refuses_more_cubes_than_memory_holds_naming_what_fits(monkeypatch, tmp_path, capsys):
    from deepdensity.utils import machine

    # 100 cubes of 16^3 float32, held twice (the cubes and their train/val copies): 3276800 bytes
    monkeypatch.setattr(machine, "memory_bytes", lambda: 2 * 100 * 16**3 * 4 - 1)
    assert data_cli.main(["synth", "--out", str(tmp_path / "s.h5"), "--n", "100", "--val", "10"]) == 2
    assert capsys.readouterr().err.strip().endswith("more than this machine's 3.12 MiB; at most about --n 99 fits")
    assert not (tmp_path / "s.h5").exists()


def test_the_table_covers_the_three_command_lines():
    counts = {cli: sum(c[0] == cli for c in CASES) for cli in ("train", "data", "repro")}
    assert sum(counts.values()) >= 40 and min(counts.values()) >= 8, counts


# --------------------------------------------------------------------------------------
# Property: a random single-field corruption is refused as bad input, never a crash.
# --------------------------------------------------------------------------------------
JUNK = [
    "",
    "abc",
    -1,
    0,
    0.5,
    1e308,
    "inf",
    "nan",
    "-inf",
    [1],
    [1, "a"],
    {"a": 1},
    True,
    None,
    -(2**40),
    2**70,
    "1e-3",
    "[3, 3]",
    "\u00e9",
]


def test_a_corrupted_config_field_is_a_config_error_or_a_valid_config(tmp_path):
    import yaml

    from deepdensity.config import FIELDS, ConfigError, load

    rng = np.random.default_rng(0)
    outcomes = {"refused": 0, "accepted": 0}
    for key in FIELDS:
        for junk in rng.permutation(np.array(JUNK, dtype=object))[:8]:
            path = tmp_path / "c.yaml"
            path.write_text(yaml.safe_dump({key: junk}, allow_unicode=True), encoding="utf-8")
            try:
                cfg = load(str(path))
            except ConfigError:
                outcomes["refused"] += 1
                continue
            assert all(test() for test, _ in cfg.rules()), (key, junk)  # accepted: every range holds
            outcomes["accepted"] += 1
    assert outcomes["refused"] > outcomes["accepted"] > 0, outcomes


def _corruptions(good, rng):
    """(name, writer) pairs: each writes a copy of `good` with one thing broken."""
    raw = good.read_bytes()

    def truncate(p):
        p.write_bytes(raw[: int(rng.integers(1, len(raw)))])

    def flip(p):
        b = bytearray(raw)
        for i in rng.integers(0, len(b), 16):
            b[i] ^= 0xFF
        p.write_bytes(bytes(b))

    def edit(change):
        def write(p):
            shutil.copy(good, p)
            with h5py.File(p, "a") as f:
                change(f)

        return write

    def replace(name, value):
        def change(f):
            del f[name]
            f[name] = value

        return change

    return [
        ("truncate", truncate),
        ("flip", flip),
        ("no val", edit(lambda f: f.__delitem__("val"))),
        ("cubes are strings", edit(replace("train/cubes", np.array([b"a", b"b"])))),
        ("cubes are a scalar", edit(replace("val/cubes", 3.0))),
        ("cubes are 5-D", edit(replace("train/cubes", np.zeros((2, 4, 4, 4, 4), "f4")))),
        ("cubes are int", edit(replace("val/cubes", np.ones((2, 16, 16, 16), "i4") * 7))),
        ("cubes are complex", edit(replace("val/cubes", np.ones((2, 16, 16, 16), "c8")))),
        ("train is a dataset", edit(replace("train", np.zeros(3)))),
        ("negative", edit(replace("val/cubes", -np.ones((2, 16, 16, 16), "f4")))),
    ]


def test_a_corrupted_data_file_is_a_data_error_or_loads(tmp_path, smoke_data):
    from deepdensity.data.cubes import DataError, load_cubes

    rng = np.random.default_rng(1)
    refused = 0
    for round_ in range(3):  # truncation and flips land elsewhere each round
        for name, write in _corruptions(smoke_data, rng):
            path = tmp_path / f"{round_}-{name}.h5"
            write(path)
            try:
                cubes = load_cubes(path)
            except DataError:
                refused += 1
                continue
            assert cubes.train.dtype == np.float32 and 0 <= cubes.train.min() and cubes.train.max() <= 1 + 1e-6, name
    assert refused >= 3 * 9
