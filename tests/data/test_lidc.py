"""LIDC-IDRI's XML readings to nodules: geometry, grouping across readers, and the whole
path (synthetic DICOM series, their XML, prepare --lidc-xml, train.py)."""

import sys
import xml.etree.ElementTree as ET

import h5py
import numpy as np
import pytest

from deepdensity.data import lidc
from deepdensity.data.cubes import DataError
from deepdensity.data.ingest import annotations, geometry, pipeline, synthetic_scans
from tests.support import ROOT, run


def axial_volume(shape=(40, 96, 96), spacing=(0.7, 0.7, 1.25), origin=(-35.0, -40.0, -120.0)):
    vol = geometry.Volume(np.zeros(shape, np.float32), np.array(origin), np.array(spacing), np.eye(3), "1.2.3", "")
    vol.slice_uids = tuple(f"1.2.3.{k}" for k in range(shape[0]))
    return vol


def marks_of(path):
    uid, marks = lidc.read_xml(path)
    return uid, marks


@pytest.mark.parametrize("centre_ijk, d", [((40.3, 50.8, 20.4), 9.0), ((30.0, 60.0, 12.0), 5.0)])
def test_a_readers_outline_gives_back_the_nodules_centre_and_diameter(tmp_path, centre_ijk, d):
    vol = axial_volume()
    lidc.write_xml(tmp_path / "r.xml", "1.2.3", [[(centre_ijk, d)]], vol)
    uid, marks = lidc.read_xml(tmp_path / "r.xml")
    assert uid == "1.2.3" and len(marks) == 1
    centre, diameter, notes = lidc.mark_geometry(marks[0], vol)
    want = vol.index_to_world(centre_ijk)
    # outlines are whole pixels (0.7 mm) on slices 1.25 mm apart
    assert np.allclose(centre, want, atol=0.7) and notes == []
    assert d - 1.5 <= diameter <= d + 1.0


def test_small_nodules_are_one_point_and_do_not_count(tmp_path):
    vol = axial_volume()
    lidc.write_xml(tmp_path / "r.xml", "1.2.3", [[((40, 50, 20), 2.0)]] * 4, vol)
    _, marks = lidc.read_xml(tmp_path / "r.xml")
    assert [len(m.rois) for m in marks] == [1] * 4 and all(len(m.rois[0].points_ij) == 1 for m in marks)
    nodules, notes = lidc.nodules_of_volume(marks, vol)
    assert nodules == [] and any("under 3 mm" in n for n in notes)


def test_grouping_counts_readers_not_marks():
    a, b = np.array([0.0, 0, 0]), np.array([30.0, 0, 0])
    marks = [
        (0, a, 8.0),
        (1, a + 1.5, 7.0),
        (2, a - 1.0, 9.0),  # three readers, one nodule
        (0, b, 6.0),
        (1, b + 0.5, 6.0),
        (0, b + 1.0, 6.0),  # two readers (one twice)
        (3, a + 20, 4.0),
    ]  # one reader alone
    nodules = lidc.group_marks(marks, min_readers=3)
    assert len(nodules) == 1
    centre, d, readers = nodules[0]
    assert readers == 3 and np.allclose(centre, (a + a + 1.5 + a - 1.0) / 3) and d == pytest.approx(8.0)
    assert len(lidc.group_marks(marks, min_readers=2)) == 2
    assert len(lidc.group_marks(marks, min_readers=1)) == 3
    # far apart relative to their size: two nodules, even from the same readers
    assert len(lidc.group_marks([(r, a + [6.0 * (r % 2), 0, 0], 5.0) for r in range(4)], 1)) == 2
    with pytest.raises(DataError, match="--min-readers must be >= 1"):
        lidc.group_marks(marks, min_readers=0)


def test_rois_on_missing_slices_fall_back_to_z_or_are_dropped(tmp_path):
    vol = axial_volume()
    lidc.write_xml(tmp_path / "r.xml", "1.2.3", [[((40, 50, 20), 9.0)]], vol)
    tree = ET.parse(tmp_path / "r.xml")
    ns = {"l": lidc.NAMESPACE}
    rois = tree.getroot().findall(".//l:roi", ns)
    rois[0].find("l:imageSOP_UID", ns).text = "9.9.9"  # unknown UID, its z is a slice
    rois[1].find("l:imageSOP_UID", ns).text = "9.9.8"
    rois[1].find("l:imageZposition", ns).text = "500.0"  # and nowhere near the series
    tree.write(tmp_path / "r.xml")
    _, marks = lidc.read_xml(tmp_path / "r.xml")
    centre, diameter, notes = lidc.mark_geometry(marks[0], vol)
    assert centre is not None and len(notes) == 1 and "z 500 mm is on no slice" in notes[0]
    # a mark whose every roi is off the series is dropped
    for roi in marks[0].rois:
        roi.sop_uid, roi.z_mm = "x", 900.0
    centre, _, notes = lidc.mark_geometry(marks[0], vol)
    assert centre is None and "mark dropped" in notes[-1]


@pytest.mark.parametrize(
    "text, message",
    [
        ("<LidcReadMessage><readingSession>", "not well-formed XML"),
        ("<LidcReadMessage xmlns='http://www.nih.gov'><ResponseHeader/></LidcReadMessage>", "without ResponseHeader"),
        (
            "<LidcReadMessage><ResponseHeader><SeriesInstanceUid>1</SeriesInstanceUid></ResponseHeader>"
            "<readingSession><unblindedReadNodule><noduleID>N1</noduleID><roi><imageZposition>up</imageZposition>"
            "<edgeMap><xCoord>1</xCoord><yCoord>2</yCoord></edgeMap></roi></unblindedReadNodule></readingSession>"
            "</LidcReadMessage>",
            r"nodule 'N1' \(reader 1\) has a missing or non-numeric",
        ),
    ],
)
def test_malformed_xml_is_one_clear_error(tmp_path, text, message):
    (tmp_path / "bad.xml").write_text(text)
    with pytest.raises(DataError, match=message):
        lidc.read_xml(tmp_path / "bad.xml")


def test_a_chest_radiograph_reading_is_noted_not_read(tmp_path):
    (tmp_path / "cxr.xml").write_text("<IdriReadMessage><x/></IdriReadMessage>")
    readings, notes = lidc.read_folder(tmp_path)
    assert readings == {} and "not a CT reading" in notes[0]


def _edit_readers(xml_path, keep):
    """Keep, for nodule n, only the readers keep(n) of the file's four."""
    ET.register_namespace("", lidc.NAMESPACE)
    tree = ET.parse(xml_path)
    ns = {"l": lidc.NAMESPACE}
    for r, session in enumerate(tree.getroot().findall("l:readingSession", ns)):
        for n, nod in enumerate(session.findall("l:unblindedReadNodule", ns)):
            if r not in keep(n):
                session.remove(nod)
    tree.write(xml_path, xml_declaration=True, encoding="UTF-8")


@pytest.mark.slow
def test_prepare_from_lidc_xml_end_to_end_and_train_on_it(tmp_path):
    scans = tmp_path / "scans"
    csv_path = synthetic_scans.synth_scans(scans, n_scans=3, seed=1, fmt="dicom")
    truth = annotations.read_annotations(csv_path)
    # scan 0: all four readers agree (as written); scan 1: only two readers mark nodule 0;
    # scan 2: nodule 1 is marked by three readers only
    uids = sorted(truth)
    _edit_readers(scans / "scan1" / "readings.xml", lambda n: {0, 1} if n == 0 else {0, 1, 2, 3})
    _edit_readers(scans / "scan2" / "readings.xml", lambda n: {0, 1, 3} if n == 1 else {0, 1, 2, 3})
    out = tmp_path / "lidc.h5"
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "prepare",
            "--dicom",
            str(scans),
            "--lidc-xml",
            "--out",
            str(out),
            "--val",
            "1",
        ]
    )
    assert "scans read: 3; nodules written: 5" in proc.stdout, proc.stdout
    assert "1 nodule(s) marked by fewer than 3 readers not kept" in proc.stdout
    with h5py.File(out) as f:
        got = np.concatenate([f["train/world_xyz"][:], f["val/world_xyz"][:]])
        sizes = np.concatenate([f["train/diameter_mm"][:], f["val/diameter_mm"][:]])
    want = [(xyz, d) for uid in uids for xyz, d in truth[uid]]
    for xyz, d in zip(got, sizes):  # each nodule found lies on one planted nodule
        dist = [np.linalg.norm(xyz - w) for w, _ in want]
        i = int(np.argmin(dist))
        assert dist[i] < 1.0 and abs(d - want[i][1]) < 1.6
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "prepare",
            "--dicom",
            str(scans),
            "--lidc-xml",
            "--min-readers",
            "2",
            "--out",
            str(tmp_path / "two.h5"),
            "--val",
            "1",
        ]
    )
    assert "nodules written: 6" in proc.stdout
    proc = run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--config",
            str(ROOT / "configs" / "smoke.yaml"),
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
    assert (tmp_path / "run" / "result.json").exists()


def test_prepare_refuses_lidc_xml_without_dicom_or_with_a_csv(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(DataError, match="exactly one of --annotations CSV or --lidc-xml"):
        pipeline.prepare(tmp_path / "o.h5", tmp_path / "a.csv", dicom=str(tmp_path / "d"), lidc_xml=True)
    with pytest.raises(DataError, match="use it with --dicom"):
        pipeline.prepare(tmp_path / "o.h5", luna=str(tmp_path / "d"), lidc_xml=True)
    with pytest.raises(DataError, match="no LIDC XML readings"):
        pipeline.prepare(tmp_path / "o.h5", dicom=str(tmp_path / "d"), lidc_xml=True)
