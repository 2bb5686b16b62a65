"""Real-scan ingestion: geometry checked against planted nodules at known world positions,
and pydicom's own CT test files for sorting, HU conversion and the errors."""

import csv
import sys
from pathlib import Path

import h5py
import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file

from deepdensity.data.cubes import DataError, load_cubes
from deepdensity.data.ingest import annotations, dicom, geometry, metaimage_nifti, pipeline, synthetic_scans
from tests.support import ROOT, run

TESTDATA = Path(get_testdata_file("CT_small.dcm", download=False)).parent
DIRTESTS = TESTDATA / "dicomdirtests"


def bright_centroid(cube, threshold=0.5):
    idx = np.argwhere(cube > threshold)
    return idx.mean(axis=0)


def one_nodule_scan(tmp_path, fmt, direction=np.eye(3), seed=0):
    """A scan with one nodule whose world position is known from the writer's geometry."""
    rng = np.random.default_rng(seed)
    hu, centres, diameters = synthetic_scans.synth_scan(rng, shape=(40, 64, 64), n_nodules=1)
    spacing, origin = np.array([0.7, 0.7, 1.25]), np.array([-20.0, 15.0, -80.0])
    vol = geometry.Volume(hu, origin, spacing, np.asarray(direction, float), "1.2.3.4", "")
    world = vol.index_to_world(centres[0])
    if fmt == "dicom":
        synthetic_scans.write_dicom_series(
            tmp_path / "scan", hu, origin, spacing, direction[:, 0], direction[:, 1], "1.2.3.4", rng=rng
        )
        # a second, unrelated file type in the folder must not stop anything
        (tmp_path / "scan" / "notes.txt").write_text("not dicom")
    elif fmt == "nifti":
        (tmp_path / "scan").mkdir()
        metaimage_nifti.write_nifti(tmp_path / "scan" / "1.2.3.4.nii.gz", hu, origin, spacing, direction)
    else:
        (tmp_path / "scan").mkdir()
        metaimage_nifti.write_metaimage(tmp_path / "scan" / "1.2.3.4.mhd", hu, origin, spacing, direction)
    return world, diameters[0]


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([list(annotations.ANNOTATION_COLUMNS)] + rows)


def rotation(axis, degrees):
    a = np.radians(degrees)
    c, s = np.cos(a), np.sin(a)
    m = {"z": [[c, -s, 0], [s, c, 0], [0, 0, 1]], "x": [[1, 0, 0], [0, c, -s], [0, s, c]]}[axis]
    return np.array(m)


@pytest.mark.parametrize(
    "fmt, direction",
    [
        ("dicom", np.eye(3)),
        ("mhd", np.eye(3)),
        ("mhd", rotation("z", 90) @ rotation("x", 20)),  # a non-identity direction matrix
        ("mhd", np.diag([-1.0, -1.0, 1.0])),  # LPS flipped axes
        ("nifti", np.eye(3)),
        ("nifti", rotation("z", 90) @ rotation("x", 20)),
    ],
)
def test_planted_nodule_is_centred_within_one_voxel(tmp_path, fmt, direction):
    world, diameter = one_nodule_scan(tmp_path, fmt, direction)
    vol = (
        dicom.read_dicom_series("1.2.3.4", dicom.scan_dicom_folder(tmp_path / "scan")[0]["1.2.3.4"])[0]
        if fmt == "dicom"
        else metaimage_nifti.read_volume(next((tmp_path / "scan").glob("1.2.3.4.*")))
    )
    assert vol.uid == "1.2.3.4"
    cube, padded = geometry.cut_cube(vol, world, 16, 1.0)
    assert not padded
    centroid = bright_centroid(cube, threshold=-400)
    np.testing.assert_allclose(centroid, [7.5, 7.5, 7.5], atol=1.0)
    # and the cube is isotropic at 1 mm: the bright extent matches the diameter
    extent_mm = (cube > -400).sum() ** (1 / 3) * 1.0
    assert 0.6 * diameter < extent_mm < 1.3 * diameter


@pytest.mark.slow
def test_dicom_prepare_end_to_end_with_shuffled_renamed_files(tmp_path):
    scans = tmp_path / "scans"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=3, seed=1, fmt="dicom")
    files = [p for p in (scans / "scan0").iterdir() if p.name != "readings.xml"]
    assert all("." not in p.name for p in files), "random names with no extension"
    out = tmp_path / "cubes.h5"
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "prepare",
            "--dicom",
            str(scans),
            "--annotations",
            str(csv_path),
            "--out",
            str(out),
            "--val",
            "2",
        ]
    )
    assert "scans read: 3; nodules written: 6" in proc.stdout
    with h5py.File(out) as f:
        assert f.attrs["source"] == "dicom"
        train_uids = set(f["train/seriesuid"].asstr()[:])
        val_uids = set(f["val/seriesuid"].asstr()[:])
        assert train_uids and val_uids and not train_uids & val_uids, "split by scan"
        assert f["train/cubes"].shape[1:] == (16, 16, 16)
        assert f["train/world_xyz"].shape[1] == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    # and train.py takes the file as it is
    root = ROOT
    proc = run(
        [
            sys.executable,
            str(root / "train.py"),
            "--mode",
            "strong",
            "--config",
            str(root / "configs" / "smoke.yaml"),
            "--set",
            f"data_path={out}",
            "--set",
            "batch_size=2",
            "--set",
            "max_epochs=1",
            "--set",
            "max_train_cubes=0",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert "epoch    1" in proc.stdout and (tmp_path / "run" / "result.json").exists()


def test_mhd_prepare_reports_skipped_annotations(tmp_path):
    scans = tmp_path / "luna"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=2, seed=2, fmt="mhd")
    with open(csv_path, "a", newline="") as f:
        csv.writer(f).writerows(
            [
                ["9.9.9", "0", "0", "0", "5"],  # no such scan
                ["1.2.826.0.1.3680043.10.999.2.0", "900", "0", "0", "5"],
            ]
        )  # outside
    out = tmp_path / "luna.h5"
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "prepare",
            "--luna",
            str(scans),
            "--annotations",
            str(csv_path),
            "--out",
            str(out),
            "--val",
            "1",
        ]
    )
    assert "nodules written: 4" in proc.stdout
    assert "no scan with that seriesuid" in proc.stdout and "outside the volume" in proc.stdout


def test_nodule_at_the_edge_is_padded_with_air_not_dropped(tmp_path):
    hu = np.full((20, 20, 20), 40.0, np.float32)
    vol = geometry.Volume(hu, np.zeros(3), np.ones(3), np.eye(3), "u", "")
    cube, padded = geometry.cut_cube(vol, [0.0, 10.0, 10.0], 16, 1.0)
    assert padded
    assert np.allclose(cube[:, :, :7], -1000.0) and np.allclose(cube[:, :, 8:], 40.0)


def test_resampling_is_trilinear_and_blends_with_air_one_voxel_beyond_the_scan():
    # a linear field is reproduced exactly by trilinear interpolation anywhere inside
    k, j, i = np.meshgrid(np.arange(9), np.arange(8), np.arange(7), indexing="ij")
    hu = (3.0 * k - 2.0 * j + 0.5 * i + 7.0).astype(np.float32)
    spacing = np.array([0.7, 0.8, 1.3])  # x, y, z mm
    vol = geometry.Volume(hu, np.zeros(3), spacing, np.eye(3), "u", "")
    centre = np.array([2.9, 2.6, 5.2])  # x, y, z mm: well inside
    cube, padded = geometry.cut_cube(vol, centre, 4, 0.5)
    offsets = (np.arange(4) - 1.5) * 0.5
    z, y, x = np.meshgrid(*(centre[::-1, None] + offsets), indexing="ij")
    want = 3.0 * z / 1.3 - 2.0 * y / 0.8 + 0.5 * x / 0.7 + 7.0
    assert not padded and np.allclose(cube, want, atol=1e-4)
    # half a voxel beyond the last slice: half the edge value, half air
    flat = geometry.Volume(np.full((4, 4, 4), 100.0, np.float32), np.zeros(3), np.ones(3), np.eye(3), "u", "")
    cube, padded = geometry.cut_cube(flat, [1.5, 1.5, 3.0], 2, 1.0, fill=-1000.0)  # z = 2.5, 3.5
    assert padded and np.allclose(cube[1], (100.0 - 1000.0) / 2) and np.allclose(cube[0], 100.0)


def test_metaimage_reader_against_the_header(tmp_path):
    # x-fastest data; the header's DimSize is x y z and the array comes back z y x
    data = np.arange(2 * 3 * 4, dtype="<i2").reshape(4, 3, 2)  # (z, y, x)
    (tmp_path / "v.raw").write_bytes(data.tobytes())
    (tmp_path / "v.mhd").write_text(
        "ObjectType = Image\nNDims = 3\nDimSize = 2 3 4\nElementSpacing = 0.5 0.6 2.5\n"
        "Offset = 10 20 30\nTransformMatrix = 0 1 0 -1 0 0 0 0 1\nElementType = MET_SHORT\n"
        "ElementDataFile = v.raw\n"
    )
    vol = metaimage_nifti.read_metaimage(tmp_path / "v.mhd")
    assert vol.hu.shape == (4, 3, 2) and vol.hu[3, 2, 1] == data[3, 2, 1]
    # index axis x runs along world +y (row 0 of TransformMatrix), y along world -x
    np.testing.assert_allclose(vol.index_to_world([1, 0, 0]), [10, 20.5, 30])
    np.testing.assert_allclose(vol.index_to_world([0, 1, 0]), [9.4, 20, 30])
    np.testing.assert_allclose(vol.index_to_world([0, 0, 1]), [10, 20, 32.5])
    np.testing.assert_allclose(vol.world_to_index(vol.index_to_world([1.5, 2.0, 0.5])), [1.5, 2.0, 0.5])


@pytest.mark.parametrize("layout", ["mha", "zraw", "big-endian"])
def test_one_file_mha_compressed_zraw_and_byte_order_read_alike(tmp_path, layout):
    import zlib

    data = (np.arange(2 * 3 * 4) * 37 - 400).astype("<i2").reshape(4, 3, 2)
    header = (
        "ObjectType = Image\nNDims = 3\nDimSize = 2 3 4\nElementSpacing = 0.5 0.6 2.5\n"
        "Offset = 10 20 30\nTransformMatrix = 0 1 0 -1 0 0 0 0 1\nElementType = MET_SHORT\n"
    )
    if layout == "mha":
        path = tmp_path / "v.mha"
        path.write_bytes((header + "ElementDataFile = LOCAL\n").encode() + data.tobytes())
    elif layout == "zraw":
        packed = zlib.compress(data.tobytes())
        (tmp_path / "v.zraw").write_bytes(packed)
        path = tmp_path / "v.mhd"
        path.write_text(
            header + f"CompressedData = True\nCompressedDataSize = {len(packed)}\nElementDataFile = v.zraw\n"
        )
    else:
        (tmp_path / "v.raw").write_bytes(data.astype(">i2").tobytes())
        path = tmp_path / "v.mhd"
        path.write_text(header + "ElementByteOrderMSB = True\nElementDataFile = v.raw\n")
    vol = metaimage_nifti.read_metaimage(path)
    np.testing.assert_array_equal(vol.hu, data)
    np.testing.assert_allclose(vol.index_to_world([1, 1, 1]), [10 - 0.6, 20 + 0.5, 32.5])


def test_truncated_raw_and_missing_raw_are_clear(tmp_path):
    metaimage_nifti.write_metaimage(tmp_path / "a.mhd", np.zeros((4, 5, 6)), np.zeros(3), np.ones(3), np.eye(3))
    raw = (tmp_path / "a.raw").read_bytes()
    (tmp_path / "a.raw").write_bytes(raw[:-10])
    with pytest.raises(geometry.ScanError, match="data not read completely; ideal = 240 : actual = 230"):
        metaimage_nifti.read_metaimage(tmp_path / "a.mhd")
    (tmp_path / "a.raw").unlink()
    with pytest.raises(geometry.ScanError, match="Cannot open data file"):
        metaimage_nifti.read_metaimage(tmp_path / "a.mhd")


@pytest.mark.parametrize(
    "field, bad, message",
    [
        ("ElementSpacing", "0.7 0.7 thick", "ElementSpacing = '0.7 0.7 thick' is not 3 number"),
        ("ElementSpacing", "0.7 0.7", "is not 3 number"),
        ("ElementSpacing", "0.7 0 1", "is not positive"),
        ("DimSize", "6 5", "DimSize = '6 5' is not 3 number"),
        ("DimSize", "6 5 4.5", "DimSize"),
        ("Offset", "1 2 nan", "Offset"),
        ("TransformMatrix", "1 0 0 0 1 0 0 0", "TransformMatrix"),
        ("NDims", "three", "NDims = 'three' is not 1 number"),
    ],
)
def test_malformed_metaimage_fields_skip_that_scan_with_the_reason(tmp_path, field, bad, message):
    scans = tmp_path / "luna"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=3, seed=2, fmt="mhd")
    victim = sorted(scans.rglob("*.mhd"))[0]
    lines = victim.read_text().splitlines()
    lines = [f"{field} = {bad}" if ln.split("=")[0].strip() == field else ln for ln in lines]
    victim.write_text("\n".join(lines) + "\n")
    with pytest.raises(geometry.ScanError, match=message):
        metaimage_nifti.read_metaimage(victim)
    summary = pipeline.prepare(tmp_path / "o.h5", csv_path, luna=str(scans), n_val=1, progress=False)
    assert summary.scans_read == 2
    assert any(kind == "scan" and str(victim) in why and field in why for kind, why in summary.skipped)


# ------------------------------------------------------------------ pydicom's real files
def test_hu_conversion_on_pydicoms_ct_small():
    path = get_testdata_file("CT_small.dcm", download=False)
    ds = pydicom.dcmread(path)
    stored = np.frombuffer(ds.PixelData, dtype="<i2").reshape(ds.Rows, ds.Columns)  # signed 16-bit
    want = stored.astype(np.float64) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    np.testing.assert_allclose(dicom.slice_hu(path), want)


def test_reversed_instance_numbers_sort_by_position():
    series, _ = dicom.scan_dicom_folder(DIRTESTS / "98892001" / "CT5N")
    ((uid, items),) = series.items()
    vol, notes = dicom.read_dicom_series(uid, items)
    assert vol.hu.shape == (5, 16, 16)
    assert vol.spacing[2] == pytest.approx(2.5)
    z = [vol.index_to_world([0, 0, k])[2] for k in range(5)]
    assert z == sorted(z), "k runs along the slice normal"
    assert vol.origin[2] == pytest.approx(-1.2375)
    # the first slice of the volume is the file with the highest instance number (10)
    files = {int(ds.InstanceNumber): p for p, ds in items}
    np.testing.assert_allclose(vol.hu[0], dicom.slice_hu(files[10]))


def test_inconsistent_spacing_is_refused():
    series, _ = dicom.scan_dicom_folder(DIRTESTS / "77654033" / "CT2")
    ((uid, items),) = series.items()
    with pytest.raises(geometry.ScanError, match="non-uniform slice spacing"):
        dicom.read_dicom_series(uid, items)


def test_localizers_are_dropped():
    series, _ = dicom.scan_dicom_folder(DIRTESTS / "98892001" / "CT2N")
    ((uid, items),) = series.items()
    with pytest.raises(geometry.ScanError, match="fewer than 2 axial images"):
        dicom.read_dicom_series(uid, items)
    # mixed in with a real series, they are removed and the series still reads
    ct5 = dicom.scan_dicom_folder(DIRTESTS / "98892001" / "CT5N")[0]
    ((uid5, items5),) = ct5.items()
    vol, notes = dicom.read_dicom_series(uid5, items5 + items)
    assert vol.hu.shape[0] == 5 and any("localizer" in n for n in notes)


def test_a_whole_dicomdir_tree_groups_series_and_skips_non_images():
    series, skipped = dicom.scan_dicom_folder(DIRTESTS)
    assert len(series) > 5
    assert any("DICOMDIR" in p for p, _ in skipped)


def test_missing_position_and_gantry_tilt(tmp_path):
    hu = np.zeros((4, 8, 8), np.float32)
    synthetic_scans.write_dicom_series(tmp_path / "s", hu, [0, 0, 0], [1, 1, 2], [1, 0, 0], [0, 1, 0], "9.8")
    items = dicom.scan_dicom_folder(tmp_path / "s")[0]["9.8"]
    del items[1][1].ImagePositionPatient
    with pytest.raises(geometry.ScanError, match="lack ImagePositionPatient"):
        dicom.read_dicom_series("9.8", items)
    # tilt: each slice shifts 1 mm in y per 2 mm in z, with axial orientation
    items = dicom.scan_dicom_folder(tmp_path / "s")[0]["9.8"]
    for p, ds in items:
        x, y, z = [float(v) for v in ds.ImagePositionPatient]
        ds.ImagePositionPatient = [x, z / 2.0, z]
    with pytest.raises(geometry.ScanError, match="gantry tilt"):
        dicom.read_dicom_series("9.8", items)


def test_undecodable_compressed_pixels_name_the_package():
    path = get_testdata_file("JPEG-lossy.dcm", download=False)
    try:
        pydicom.dcmread(path).pixel_array
        pytest.skip("a JPEG decoder plugin is installed here")
    except Exception:
        pass
    with pytest.raises(geometry.ScanError, match="pip install pylibjpeg pylibjpeg-libjpeg"):
        dicom.slice_hu(path)


def test_a_spreadsheets_csv_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffseriesuid,coordX,coordY,coordZ,diameter_mm\r\n1.2.3,-10.5,2,3.25,6\r\n".encode("utf-8"))
    got = annotations.read_annotations(path)
    assert list(got) == ["1.2.3"]
    ((xyz, d),) = got["1.2.3"]
    assert list(xyz) == [-10.5, 2.0, 3.25] and d == 6.0


def test_bad_inputs_of_prepare(tmp_path):
    with pytest.raises(DataError, match="not found"):
        annotations.read_annotations(tmp_path / "none.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("uid,x,y,z\n1,2,3,4\n")
    with pytest.raises(DataError, match="missing column"):
        annotations.read_annotations(bad)
    bad.write_text("seriesuid,coordX,coordY,coordZ,diameter_mm\n1,a,3,4,5\n")
    with pytest.raises(DataError, match="line 2"):
        annotations.read_annotations(bad)
    bad.write_bytes("seriesuid,coordX,coordY,coordZ,diameter_mm\nnodule-é,1,3,4,5\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8 text.*save it as UTF-8 CSV"):
        annotations.read_annotations(bad)
    (tmp_path / "empty").mkdir()
    write_csv(tmp_path / "ok.csv", [["1", "0", "0", "0", "5"]])
    with pytest.raises(DataError, match="no DICOM image series"):
        pipeline.prepare(tmp_path / "o.h5", tmp_path / "ok.csv", dicom=str(tmp_path / "empty"), progress=False)
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "prepare",
            "--luna",
            str(tmp_path / "empty"),
            "--annotations",
            str(tmp_path / "ok.csv"),
            "--out",
            str(tmp_path / "o.h5"),
        ],
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: no .mhd") and "Traceback" not in proc.stderr
    assert not (tmp_path / "o.h5").exists()


def test_when_every_nodule_is_refused_the_summary_comes_before_the_error(tmp_path):
    scans = tmp_path / "luna"
    synthetic_scans.synth_scans(scans, n_scans=2, seed=2, fmt="mhd")
    notes = tmp_path / "far.csv"
    write_csv(notes, [["9.9.9", "0", "0", "0", "5"], ["1.2.826.0.1.3680043.10.999.2.0", "900", "0", "0", "5"]])
    out = tmp_path / "o.h5"
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "prepare",
            "--luna",
            str(scans),
            "--annotations",
            str(notes),
            "--out",
            str(out),
        ],
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "scans read: 2" in proc.stdout and "skipped: 2" in proc.stdout
    assert "no scan with that seriesuid" in proc.stdout and "outside the volume" in proc.stdout
    assert proc.stderr.startswith("error: only 0 nodule cube(s) from 0 scan(s) of 2 read")
    assert not out.exists()


def test_one_scan_with_val_0_writes_a_training_split_only(tmp_path):
    scans = tmp_path / "luna"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=1, seed=3, fmt="mhd")
    out = tmp_path / "one.h5"
    with pytest.raises(DataError, match="or pass --val 0"):
        pipeline.prepare(out, csv_path, luna=str(scans), progress=False)
    summary = pipeline.prepare(out, csv_path, luna=str(scans), n_val=0, progress=False)
    n = sum(len(v) for v in annotations.read_annotations(csv_path).values())
    assert summary.nodules_written == n >= 1
    with h5py.File(out) as f:
        assert f["train/cubes"].shape == (n, 16, 16, 16) and f["val/cubes"].shape == (0, 16, 16, 16)
    with pytest.raises(DataError, match="val/cubes is empty.*--val 0"):
        load_cubes(out)
    # what does not need the validation split (encoding the training split) reads the file
    cubes = load_cubes(out, need=("train",))
    assert cubes.train.shape == (n, 16, 16, 16) and len(cubes.val) == 0
    with pytest.raises(DataError, match="--val must be >= 0"):
        pipeline.prepare(out, csv_path, luna=str(scans), n_val=-1, progress=False)


def test_an_interrupted_prepare_resumes_without_reading_finished_scans(tmp_path, monkeypatch):
    scans = tmp_path / "luna"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=3, seed=4, fmt="mhd")
    fresh = tmp_path / "fresh.h5"
    pipeline.prepare(fresh, csv_path, luna=str(scans), n_val=1, progress=False, say=lambda *a: None)
    real, reads = metaimage_nifti.read_metaimage, []

    def interrupted_on_the_second(path):
        reads.append(Path(path).stem)
        if len(reads) == 2:
            raise KeyboardInterrupt
        return real(path)

    monkeypatch.setattr(metaimage_nifti, "read_metaimage", interrupted_on_the_second)
    out = tmp_path / "out.h5"
    with pytest.raises(KeyboardInterrupt):
        pipeline.prepare(out, csv_path, luna=str(scans), n_val=1, progress=False, say=lambda *a: None)
    assert not out.exists() and len(list(Path(f"{out}.partial").glob("*.npz"))) == 1
    said = []
    summary = pipeline.prepare(out, csv_path, luna=str(scans), n_val=1, progress=False, say=said.append)
    assert reads[2:] == sorted(p.stem for p in scans.glob("*.mhd"))[1:], "the finished scan is not read again"
    assert "resuming: 1 scan(s) already cut" in said[0] and summary.scans_read == 3
    assert not Path(f"{out}.partial").exists()
    with h5py.File(fresh) as a, h5py.File(out) as b:
        for split in ("train", "val"):
            np.testing.assert_array_equal(a[f"{split}/cubes"][:], b[f"{split}/cubes"][:])
    # a partial run with other settings is discarded, not mixed in
    Path(f"{out}.partial").mkdir()
    (Path(f"{out}.partial") / "key.txt").write_text("other")
    said = []
    pipeline.prepare(out, csv_path, luna=str(scans), n_val=1, progress=False, say=said.append)
    assert "discarding" in said[0]


def _series(tmp_path, name="s", uid="9.9"):
    hu = np.full((4, 8, 8), -800.0, np.float32)
    synthetic_scans.write_dicom_series(tmp_path / name, hu, [0, 0, 0], [1, 1, 2], [1, 0, 0], [0, 1, 0], uid)
    return dicom.scan_dicom_folder(tmp_path / name)[0][uid]


@pytest.mark.parametrize(
    "tag, message",
    [
        ("RescaleSlope", r"lack RescaleSlope \(e.g. "),
        ("RescaleIntercept", "lack RescaleIntercept"),
        ("PixelSpacing", "lack PixelSpacing"),
        ("SOPInstanceUID", "lack SOPInstanceUID"),
    ],
)
def test_a_series_without_the_tags_a_volume_needs_is_refused_with_the_reason(tmp_path, tag, message):
    items = _series(tmp_path)
    delattr(items[2][1], tag)
    with pytest.raises(geometry.ScanError, match=message):
        dicom.read_dicom_series("9.9", items)


def test_without_rescale_tags_only_assume_hu_reads_the_stored_values(tmp_path):
    """Stored values without RescaleIntercept are 0..4095, not HU: read as HU they would come
    out far too bright (mean 0.86 against ~0.17 for lung), hence refused unless asked for."""
    items = _series(tmp_path)
    for _, ds in items:
        del ds.RescaleSlope, ds.RescaleIntercept
    with pytest.raises(geometry.ScanError, match="not known to be HU .pass --assume-hu"):
        dicom.read_dicom_series("9.9", items)
    vol, _ = dicom.read_dicom_series("9.9", items, assume_hu=True)
    assert vol.hu.shape == (4, 8, 8)


@pytest.mark.parametrize("value", [["1", "2"], ["0", "0", "0", "0"], ["nan", "0", "0"]])
def test_a_malformed_image_position_is_refused_not_a_traceback(tmp_path, value):
    items = _series(tmp_path)
    items[1][1].ImagePositionPatient = value
    with pytest.raises(geometry.ScanError, match="malformed ImagePositionPatient"):
        dicom.read_dicom_series("9.9", items)


def test_prepare_skips_a_bad_series_with_its_reason_and_cuts_the_others(tmp_path):
    import shutil

    import h5py

    scans = tmp_path / "scans"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=2, seed=3, fmt="dicom")
    bad = sorted(p for p in scans.iterdir() if p.is_dir())[0]
    for f in [f for f in bad.iterdir() if f.is_file() and f.suffix != ".xml"]:
        ds = pydicom.dcmread(f)
        del ds.RescaleIntercept
        ds.save_as(f)
    out = tmp_path / "o.h5"
    summary = pipeline.prepare(out, csv_path, dicom=str(scans), n_val=0, progress=False, say=lambda *a: None)
    reasons = [why for kind, why in summary.skipped]
    assert any("lack RescaleIntercept" in r for r in reasons), reasons
    assert summary.scans_read >= 1 and summary.nodules_written > 0
    with h5py.File(out) as f:
        assert f["train/cubes"].shape[0] == summary.nodules_written
    assert not (tmp_path / "o.h5.partial").exists()
    shutil.rmtree(scans)


def test_annotation_rows_that_cannot_be_nodules_are_reported_and_skipped(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(
        "seriesuid,coordX,coordY,coordZ,diameter_mm\n"
        "1.2,1,2,3,5\n"  # line 2: kept
        "1.2,1,2,3,0\n"  # line 3: diameter 0
        "1.2,1,2,3,-4\n"  # line 4: negative
        "1.2,1,nan,3,5\n"  # line 5: a coordinate not finite
        "1.2,1,2,3,inf\n"  # line 6
        "1.2,1,2,3,5\n"  # line 7: the same nodule as line 2
        "1.3,4,5,6,7\n"
    )
    skipped = []
    got = annotations.read_annotations(path, skipped)
    assert {uid: len(v) for uid, v in got.items()} == {"1.2": 1, "1.3": 1}
    lines = [why.split(" line ")[1].split(" ")[0] for _, why in skipped]
    assert lines == ["3", "4", "5", "6", "7"]
    assert "the same nodule as line 2" in skipped[-1][1]


@pytest.mark.parametrize(
    "text",
    [
        "seriesuid;coordX;coordY;coordZ;diameter_mm\n1.2;-10,5;2;3,25;6\n",  # a German Excel
        "seriesuid\tcoordX\tcoordY\tcoordZ\tdiameter_mm\n1.2\t-10.5\t2\t3.25\t6\n",  # tab separated
        "seriesuid, coordX, coordY, coordZ, diameter_mm\n1.2, -10.5, 2, 3.25, 6\n",  # spaces after commas
    ],
)
def test_annotation_csvs_in_the_dialects_spreadsheets_write(tmp_path, text):
    path = tmp_path / "a.csv"
    path.write_text(text)
    ((xyz, d),) = annotations.read_annotations(path)["1.2"]
    assert list(xyz) == [-10.5, 2.0, 3.25] and d == 6.0


def nifti_sform(path) -> tuple:
    """(sform_code, the 3x4 sform) read from a NIfTI-1 header by the format's byte layout
    (sform_code: int16 at 254; srow_x, srow_y, srow_z: 4 float32 each at 280, 296, 312),
    independently of SimpleITK."""
    import gzip
    import struct

    header = gzip.open(path).read(348)
    assert struct.unpack("<i", header[:4])[0] == 348, "a little-endian NIfTI-1 header"
    code = struct.unpack("<h", header[254:256])[0]
    rows = [struct.unpack("<4f", header[o : o + 16]) for o in (280, 296, 312)]
    return code, np.array(rows)


def test_nifti_world_is_ras_on_disk_and_lps_in_the_volume(tmp_path):
    """NIfTI's world is RAS (x to the left-hand side's opposite, y anterior); ITK's, and LUNA16's
    annotations', LPS. The file must hold RAS, so that other NIfTI tools see the same scan,
    and the volume read back LPS, so that one annotations convention serves every format."""
    hu = np.full((4, 5, 6), -1000.0)
    origin, spacing = np.array([10.0, 20.0, 30.0]), np.array([0.7, 0.8, 1.25])
    metaimage_nifti.write_nifti(tmp_path / "v.nii.gz", hu, origin, spacing, np.eye(3))
    code, sform = nifti_sform(tmp_path / "v.nii.gz")
    assert code > 0
    flip = np.diag([-1.0, -1.0, 1.0])  # LPS -> RAS
    np.testing.assert_allclose(sform[:, :3], flip @ np.diag(spacing), atol=1e-5)
    np.testing.assert_allclose(sform[:, 3], flip @ origin, atol=1e-4)
    vol = metaimage_nifti.read_nifti(tmp_path / "v.nii.gz")
    np.testing.assert_allclose(vol.index_to_world([1, 2, 3]), origin + spacing * [1, 2, 3], atol=1e-4)


def test_nifti_and_metaimage_scans_give_the_same_cubes(tmp_path):
    """The same synthetic scans written as NIfTI and as MetaImage (int16 both) prepare to the
    same cubes: one path after the reader."""
    written = {}
    for fmt in ("mhd", "nifti"):
        csv_path = synthetic_scans.synth_scans(tmp_path / fmt, n_scans=2, seed=5, fmt=fmt)
        out = tmp_path / f"{fmt}.h5"
        summary = pipeline.prepare(
            out,
            csv_path,
            **{"luna" if fmt == "mhd" else "nifti": str(tmp_path / fmt)},
            n_val=1,
            progress=False,
            say=lambda *a: None,
        )
        assert summary.nodules_written == 4 and not [s for s in summary.skipped if s[0] != "note"]
        written[fmt] = load_cubes(out)
    # NIfTI keeps the spacing as float32 (pixdim: 0.7 reads back as 0.69999999), MetaImage as
    # decimal text: the resampling grid moves by ~1e-8 mm, the [0, 1] cubes by up to ~5e-7
    np.testing.assert_allclose(written["mhd"].train, written["nifti"].train, atol=1e-5)
    np.testing.assert_allclose(written["mhd"].val, written["nifti"].val, atol=1e-5)
    with h5py.File(tmp_path / "nifti.h5") as f:
        assert f.attrs["source"] == "nifti"


def test_a_volume_not_in_hu_or_not_3d_is_skipped_with_its_reason(tmp_path):
    scans = tmp_path / "nii"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=2, seed=6, fmt="nifti")
    victim = sorted(scans.glob("*.nii.gz"))[0]
    vol = metaimage_nifti.read_nifti(victim)
    # intensities normalised to [0, 1], as some pipelines store them: no air below -500
    metaimage_nifti.write_nifti(victim, (vol.hu + 1024) / 4096 * 1000, vol.origin, vol.spacing, vol.direction)
    summary = pipeline.prepare(
        tmp_path / "a.h5", csv_path, nifti=str(scans), n_val=0, progress=False, say=lambda *a: None
    )
    assert any(kind == "scan" and "no voxel of air" in why and str(victim) in why for kind, why in summary.skipped)
    assert summary.nodules_written == 2, "the other scan's two nodules"
    import SimpleITK as sitk

    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((2, 3, 4, 5), np.int16), isVector=False), str(tmp_path / "t.nii"))
    with pytest.raises(geometry.ScanError, match="4 dimensions; a CT volume has 3"):
        metaimage_nifti.read_nifti(tmp_path / "t.nii")


def test_a_slice_cut_short_is_called_so_not_a_missing_decoder(tmp_path):
    hu = np.full((3, 8, 8), -1000.0)
    synthetic_scans.write_dicom_series(
        tmp_path / "s",
        hu,
        np.zeros(3),
        np.ones(3),
        np.array([1.0, 0, 0]),
        np.array([0, 1.0, 0]),
        "1.2.3",
        rng=np.random.default_rng(0),
    )
    victim = sorted((tmp_path / "s").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:-20])  # an interrupted copy
    # 8 x 8 pixels of 16 bits: 128 bytes, 108 left
    with pytest.raises(geometry.ScanError, match="holds 108 bytes where 8 x 8 pixels need 128: the file is cut short"):
        dicom.slice_hu(victim)
