import h5py
import numpy as np
import pytest

from deepdensity.data import cubes as data
from deepdensity.data import fingerprint, synth, writer


def test_synth_is_deterministic_and_extends(tmp_path):
    a_train, a_val = synth.synthesize(40, 8, seed=3, progress=False)
    b_train, b_val = synth.synthesize(40, 8, seed=3, progress=False)
    np.testing.assert_array_equal(a_train.cubes, b_train.cubes)
    np.testing.assert_array_equal(a_val.cubes, b_val.cubes)
    c_train, _ = synth.synthesize(40, 8, seed=4, progress=False)
    assert not np.array_equal(a_train.cubes, c_train.cubes)
    # cube i depends on (seed, i) only
    cube0, *_ = synth.synth_cube(np.random.default_rng([3, 0]))
    all_ids = np.concatenate([a_train.seriesuid, a_val.seriesuid])
    all_cubes = np.concatenate([a_train.cubes, a_val.cubes])
    np.testing.assert_array_equal(all_cubes[list(all_ids).index("synthetic.3.0")], writer.hu_to_unit(cube0))


def test_synth_looks_like_windowed_ct_with_a_nodule_in_the_middle():
    train, val = synth.synthesize(200, 20, seed=0, progress=False)
    c = train.cubes
    assert c.dtype == np.float32 and c.min() >= 0 and c.max() <= 1
    # parenchyma (~ -860 HU -> 0.1) dominates the corners, the nodule sits at the centre
    corners = c[:, [0, -1]][:, :, [0, -1]][:, :, :, [0, -1]].reshape(len(c), -1)
    centre = c[:, 7:9, 7:9, 7:9].reshape(len(c), -1)
    assert np.median(corners) < 0.2
    assert np.median(centre.mean(axis=1)) > np.median(corners.mean(axis=1)) + 0.1
    kinds = set(np.concatenate([train.extra["kind"], val.extra["kind"]]))
    assert kinds == set(synth.NODULE_KINDS)
    assert train.diameter_mm.min() >= 3.0


def test_write_and_load_round_trip(tmp_path):
    train, val = synth.synthesize(30, 6, seed=1, progress=False)
    path = tmp_path / "x.h5"
    writer.write_cubes(path, train, val, {"cube_size": 16, "source": "synthetic"})
    assert [p.name for p in tmp_path.iterdir()] == ["x.h5"], "no temporary file left behind"
    c = data.load_cubes(path)
    assert c.train.shape == (24, 16, 16, 16) and c.val.shape == (6, 16, 16, 16)
    assert c.attrs["format"] == data.FORMAT and c.attrs["format_version"] == 1
    with h5py.File(path) as f:
        assert set(f["train"]) == {"cubes", "seriesuid", "world_xyz", "diameter_mm", "kind"}
        assert f["val/world_xyz"].shape == (6, 3)
        assert f["val/seriesuid"].asstr()[0].startswith("synthetic.1.")


def test_failed_write_leaves_nothing(tmp_path):
    train, val = synth.synthesize(10, 2, seed=1, progress=False)
    with pytest.raises(Exception):
        writer.write_cubes(tmp_path / "x.h5", train, val, {"bad": object()})
    assert list(tmp_path.iterdir()) == []


def test_load_errors(tmp_path):
    with pytest.raises(data.DataError, match="does not exist"):
        data.load_cubes(tmp_path / "nope.h5")
    txt = tmp_path / "t.h5"
    txt.write_text("hello")
    with pytest.raises(data.DataError, match="not an HDF5 file"):
        data.load_cubes(txt)
    with h5py.File(tmp_path / "empty.h5", "w") as f:
        f.create_group("train")
    with pytest.raises(data.DataError, match="no /train/cubes"):
        data.load_cubes(tmp_path / "empty.h5")
    with h5py.File(tmp_path / "shape.h5", "w") as f:
        f["train/cubes"] = np.zeros((4, 16, 16, 8), "f4")
        f["val/cubes"] = np.zeros((4, 16, 16, 8), "f4")
    with pytest.raises(data.DataError, match="expected \\(N, G, G, G\\)"):
        data.load_cubes(tmp_path / "shape.h5")
    with h5py.File(tmp_path / "nan.h5", "w") as f:
        f["train/cubes"] = np.full((4, 8, 8, 8), np.nan, "f4")
        f["val/cubes"] = np.zeros((4, 8, 8, 8), "f4")
    with pytest.raises(data.DataError, match="NaN"):
        data.load_cubes(tmp_path / "nan.h5")
    good = tmp_path / "good.h5"
    with h5py.File(good, "w") as f:
        f["train/cubes"] = np.zeros((4, 8, 8, 8), "f4")
        f["val/cubes"] = np.zeros((4, 8, 8, 8), "f4")
    with pytest.raises(data.DataError, match="expects 16"):
        data.load_cubes(good, expect_grid=16)
    trunc = tmp_path / "trunc.h5"
    train, val = synth.synthesize(30, 6, seed=1, progress=False)
    writer.write_cubes(trunc, train, val, {})
    raw = trunc.read_bytes()
    trunc.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(data.DataError):
        data.load_cubes(trunc)


def test_to_density_integrates_to_one():
    rng = np.random.default_rng(0)
    cubes = rng.uniform(size=(5, 16, 16, 16)).astype("f4")
    cubes[2] = 0.0
    scaled, empty = data.to_density(cubes)
    cell = (2 / 16) ** 3
    sums = scaled.reshape(5, -1).sum(axis=1) * cell
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
    assert empty == 1 and np.allclose(scaled[2], 1 / 8)


def test_input_independent_loss_is_keras_msle_of_the_mean_cube():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    train, _ = data.to_density(rng.random((20, 4, 4, 4), dtype=np.float32) ** 3)
    val, _ = data.to_density(rng.random((6, 4, 4, 4), dtype=np.float32) ** 3)
    mean = np.broadcast_to(train.mean(axis=0), val.shape)
    keras = tf.keras.losses.MeanSquaredLogarithmicError()(val.reshape(6, -1), mean.reshape(6, -1))
    assert data.input_independent_loss(train, val) == pytest.approx(float(keras), rel=1e-5)
    assert data.input_independent_loss(train, np.broadcast_to(train.mean(axis=0), (3, 4, 4, 4))) == pytest.approx(
        0.0, abs=1e-15
    )


@pytest.mark.parametrize(
    "values, message",
    [
        ((-1000.0, 400.0), "raw Hounsfield units"),
        ((0.0, 1.5), "values in \\[0, 1.5\\]"),
        ((-0.01, 1.0), "not intensities windowed to \\[0, 1\\]"),
    ],
)
def test_cubes_outside_the_unit_window_are_refused(tmp_path, values, message):
    path = tmp_path / "raw.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["train/cubes"] = rng.uniform(*values, (4, 8, 8, 8)).astype("f4")
        f["train/cubes"][0, 0, 0, 0], f["train/cubes"][0, 0, 0, 1] = values
        f["val/cubes"] = np.zeros((4, 8, 8, 8), "f4")
    with pytest.raises(data.DataError, match=message):
        data.load_cubes(path)


def test_cubes_on_the_window_edges_and_float_rounding_load(tmp_path):
    path = tmp_path / "edges.h5"
    with h5py.File(path, "w") as f:
        f["train/cubes"] = np.array([0.0, 1.0, 1.0 + 1e-7, -1e-7], "f4").reshape(4, 1) * np.ones((4, 8), "f4")
        f["val/cubes"] = np.ones((2, 8), "f4")
    assert data.load_cubes(path).train.max() == pytest.approx(1.0, abs=1e-6)


def test_a_file_another_process_writes_is_named_as_such_not_replaced(tmp_path):
    """HDF5 locks a file open for writing; the message says to wait for the writer, and does not
    advise writing a new file over what may be data prepared from scans."""
    import subprocess
    import sys

    path = tmp_path / "busy.h5"
    synth.write_synthetic(path, 40, 8, 0)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import h5py, sys, time; f = h5py.File(sys.argv[1], 'a'); print('open', flush=True); time.sleep(60)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(data.DataError) as e:
            data.load_cubes(path)
        assert "is open for writing in another process" in str(e.value)
        assert "synth --out" not in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert len(data.load_cubes(path).train) == 32, "readable once the writer is gone"


@pytest.mark.parametrize(
    "command", [["synth", "--n", "40", "--val", "8"], ["prepare", "--luna", "{empty}", "--annotations", "{csv}"]]
)
def test_force_does_not_replace_a_file_another_process_writes(tmp_path, capsys, command):
    """`--force` replaces a data file nobody writes. One another process holds open for writing
    (HDF5 locks it) is refused and left as it was: replaced, that process would go on writing
    into a file with no name."""
    import os
    import subprocess
    import sys

    from deepdensity.data import cli as data_cli

    path = tmp_path / "busy.h5"
    synth.write_synthetic(path, 40, 8, 0)
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.csv").write_text("seriesuid,coordX,coordY,coordZ,diameter_mm\n")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import h5py, sys, time; f = h5py.File(sys.argv[1], 'a'); print('open', flush=True); time.sleep(60)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        before = path.read_bytes(), os.stat(path).st_ino  # as the holder has it (its open marks the file)
        argv = [a.format(empty=tmp_path / "empty", csv=tmp_path / "a.csv") for a in command]
        assert data_cli.main([*argv, "--out", str(path), "--force"]) == 2
        err = capsys.readouterr().err.strip()
        assert (
            err == f"error: --out {path} is open for writing in another process (HDF5 locks it); --force "
            f"replaces a file nobody writes: wait until that process has finished"
        )
        assert (path.read_bytes(), os.stat(path).st_ino) == before
    finally:
        holder.kill()
        holder.wait()
    assert data_cli.main(["synth", "--n", "40", "--val", "8", "--seed", "1", "--out", str(path), "--force"]) == 0
    assert path.read_bytes() != before[0], "replaced once nobody writes it"


# --------------------------------------------------------------------------------------
# Links: data read through them, and a fingerprint that covers the files they reach
# --------------------------------------------------------------------------------------
def _unit(n, seed=0):
    return np.random.default_rng(seed).random((n, 16, 16, 16), dtype=np.float32)


def _linked(tmp_path, val_link):
    """main.h5: its own training cubes, its validation cubes behind `val_link`."""
    with h5py.File(tmp_path / "main.h5", "w") as f:
        f["train/cubes"] = _unit(40)
        f["val/cubes"] = val_link
    return tmp_path / "main.h5"


def _sha(path):
    import hashlib

    return f"{path.stat().st_size}:{hashlib.sha256(path.read_bytes()).hexdigest()}"


def test_a_self_contained_file_keeps_the_fingerprint_of_its_bytes(tmp_path):
    """Runs recorded before links were followed name their data by 'size:sha256' of the file."""
    path = tmp_path / "d.h5"
    writer.write_cubes(
        path,
        writer.Split(_unit(40), np.array(["a"] * 40, object), np.zeros((40, 3)), np.ones(40)),
        writer.Split(_unit(8, 1), np.array(["b"] * 8, object), np.zeros((8, 3)), np.ones(8)),
        {},
    )
    assert fingerprint.data_files(path) == [path]
    assert fingerprint.data_fingerprint(path) == _sha(path)
    with h5py.File(path, "a") as f:  # a soft link stays in the file: nothing else is read
        f["val/again"] = h5py.SoftLink("/val/cubes")
    assert fingerprint.data_files(path) == [path] and fingerprint.data_fingerprint(path) == _sha(path)


def test_cubes_behind_an_external_link_are_read_and_fingerprinted(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["cubes"] = _unit(8, 1)
    main = _linked(tmp_path, h5py.ExternalLink("other.h5", "/cubes"))
    np.testing.assert_array_equal(data.load_cubes(main).val, _unit(8, 1))
    assert fingerprint.data_files(main) == [main, tmp_path / "other.h5"]
    before = fingerprint.data_fingerprint(main)
    assert before == f"{_sha(main)}+{_sha(tmp_path / 'other.h5')}"
    main_bytes = main.read_bytes()
    with h5py.File(tmp_path / "other.h5", "w") as f:  # other cubes, same size, main.h5 untouched
        f["cubes"] = _unit(8, 2)
    assert main.read_bytes() == main_bytes
    assert fingerprint.data_fingerprint(main) != before


def test_a_virtual_dataset_is_read_and_its_source_fingerprinted(tmp_path):
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["x"] = _unit(8, 1)
    layout = h5py.VirtualLayout(shape=(8, 16, 16, 16), dtype="f4")
    layout[...] = h5py.VirtualSource("src.h5", "x", shape=(8, 16, 16, 16))
    main = _linked(tmp_path, np.zeros(1))
    with h5py.File(main, "a") as f:
        del f["val/cubes"]
        f.create_virtual_dataset("val/cubes", layout, fillvalue=0)
    np.testing.assert_array_equal(data.load_cubes(main).val, _unit(8, 1))
    before = fingerprint.data_fingerprint(main)
    assert before == f"{_sha(main)}+{_sha(tmp_path / 'src.h5')}"
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["x"] = _unit(8, 2)
    assert fingerprint.data_fingerprint(main) != before


def test_external_raw_storage_is_read_from_the_current_folder_and_fingerprinted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _unit(8, 1).tofile(tmp_path / "val.raw")
    main = _linked(tmp_path, np.zeros(1))
    with h5py.File(main, "a") as f:
        del f["val/cubes"]
        f.create_dataset("val/cubes", shape=(8, 16, 16, 16), dtype="f4", external=[("val.raw", 0, 8 * 16**3 * 4)])
    np.testing.assert_array_equal(data.load_cubes(main).val, _unit(8, 1))
    before = fingerprint.data_fingerprint(main)
    assert before == f"{_sha(main)}+{_sha(tmp_path / 'val.raw')}"
    _unit(8, 2).tofile(tmp_path / "val.raw")
    assert fingerprint.data_fingerprint(main) != before


def test_a_broken_file_is_fingerprinted_by_its_own_bytes_and_refused_by_the_loader(tmp_path):
    """The fingerprint may be taken before the loader runs; it does not fail first."""
    main = _linked(tmp_path, h5py.ExternalLink("gone.h5", "/cubes"))
    assert fingerprint.data_fingerprint(main) == _sha(main)
    with pytest.raises(data.DataError, match="/val/cubes is an external link to /cubes in gone.h5"):
        data.load_cubes(main)


def test_the_docs_conversion_of_integer_cubes_makes_a_file_that_loads(tmp_path, monkeypatch):
    """docs/data.md tells a user with integer cubes how to convert them; its code does that."""
    from tests.support import ROOT

    text = (ROOT / "docs" / "data.md").read_text()
    start = text.index("```python\n", text.index("integers are refused")) + len("```python\n")
    code = "\n".join(line[2:] for line in text[start : text.index("```", start)].splitlines())
    mask = (_unit(40) > 0.5).astype(np.int8)
    with h5py.File(tmp_path / "mine.h5", "w") as f:
        f["train/cubes"], f["val/cubes"] = mask, mask[:8]
    with pytest.raises(data.DataError, match="holds integers .int8."):
        data.load_cubes(tmp_path / "mine.h5")
    monkeypatch.chdir(tmp_path)
    exec(code, {})
    cubes = data.load_cubes(tmp_path / "mine.h5")
    np.testing.assert_array_equal(cubes.train, mask.astype(np.float32))
    np.testing.assert_array_equal(cubes.val, mask[:8].astype(np.float32))


def test_a_column_of_the_layout_in_another_form_is_refused_by_name(tmp_path):
    main = _linked(tmp_path, _unit(8, 1))
    with h5py.File(main, "a") as f:
        f["val/world_xyz"] = np.array([b"x"] * 8)
        f["train/diameter_mm"] = np.ones(39)
    data.load_cubes(main)
    with pytest.raises(
        data.DataError,
        match=r"/val/world_xyz holds strings of shape \(8,\); the layout has "
        r"real numbers \(float64\) of shape \(8, 3\)",
    ):
        data.read_columns(main, "val")
    with pytest.raises(data.DataError, match=r"/train/diameter_mm holds real numbers of shape \(39,\)"):
        data.read_columns(main, "train")
