"""Real scans to nodule cubes: DICOM series, LUNA16 MetaImage or NIfTI volumes -> deepdensity HDF5.

    python -m deepdensity.data prepare --luna DIR --annotations annotations.csv --out data/luna.h5
    python -m deepdensity.data prepare --dicom DIR --lidc-xml --out data/lidc.h5     # LIDC-IDRI's XML readings
    python -m deepdensity.data prepare --dicom DIR --annotations nodules.csv --out data/mine.h5

Every scan is read (dicom.py, metaimage_nifti.py), checked to be in HU, and each annotated
nodule cut into a cube (geometry.py); the cubes are split into train and validation by scan
and written in the layout of deepdensity/data/cubes.py. Scans already cut by an interrupted
prepare are kept in OUT.partial/ and not read again.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from tqdm import tqdm

from deepdensity.data import lidc
from deepdensity.data.cubes import HU_WINDOW, DataError
from deepdensity.data.ingest.annotations import read_annotations
from deepdensity.data.ingest.dicom import read_dicom_series, scan_dicom_folder
from deepdensity.data.ingest.geometry import ScanError, Volume, check_hu, cut_cube
from deepdensity.data.ingest.metaimage_nifti import read_volume, scan_uid
from deepdensity.data.writer import Split, check_geometry, hu_to_unit, write_cubes
from deepdensity.utils.files import atomic_path


class NotEnoughNodules(DataError):
    """prepare found too few nodules to write; carries the summary of what it skipped and why."""

    def __init__(self, message: str, summary: "Summary"):
        super().__init__(message)
        self.summary = summary


@dataclass
class Summary:
    scans_read: int = 0
    nodules_written: int = 0
    padded: int = 0
    skipped: list = None

    def __post_init__(self):
        self.skipped = self.skipped or []


def _scans(
    dicom: Optional[str], luna: Optional[str], summary: Summary, assume_hu: bool = False, nifti: Optional[str] = None
) -> list:
    """[(uid, load)] of every scan under the folder, cheap to list: `load()` reads the
    volume (ScanError if it cannot), so a scan already cut need not be read again."""
    if luna or nifti:
        patterns = ("*.mhd", "*.mha") if luna else ("*.nii", "*.nii.gz")
        paths = sorted(p for pattern in patterns for p in Path(luna or nifti).rglob(pattern))
        if not paths:
            raise DataError(f"no {' or '.join(x[1:] for x in patterns)} files under {luna or nifti}")
        return [(scan_uid(p), lambda p=p: read_volume(p)) for p in paths]
    series, skipped = scan_dicom_folder(dicom)
    summary.skipped += [("file", f"{p}: {why}") for p, why in skipped]
    if not series:
        raise DataError(f"no DICOM image series under {dicom}")

    def load(uid):
        vol, notes = read_dicom_series(uid, series[uid], assume_hu)
        summary.skipped += [("note", f"series {uid}: {n}") for n in notes]
        return vol

    return [(uid, lambda uid=uid: load(uid)) for uid in sorted(series)]


class _ScanCache:
    """Cubes of the scans already cut, kept in `OUT.partial/` so that an interrupted
    prepare, run again with the same settings and annotations, does not read them again.
    Removed once the data file is written; discarded if the settings differ."""

    def __init__(self, out: Path, key: str, say):
        self.folder = Path(f"{out}.partial")
        stamp = self.folder / "key.txt"
        if self.folder.is_dir() and (not stamp.exists() or stamp.read_text() != key):
            say(f"note: discarding {self.folder}, a partial run with other settings or annotations")
            self.clear()
        self.folder.mkdir(parents=True, exist_ok=True)
        stamp.write_text(key)
        self.done = {p.stem for p in self.folder.glob("*.npz")}
        if self.done:
            say(f"resuming: {len(self.done)} scan(s) already cut in {self.folder}")

    def name(self, uid: str) -> str:
        return hashlib.sha1(uid.encode()).hexdigest()[:20]

    def get(self, uid: str) -> Optional[tuple]:
        if self.name(uid) not in self.done:
            return None
        with np.load(self.folder / f"{self.name(uid)}.npz", allow_pickle=False) as z:
            rows = list(zip(z["cubes"], z["xyz"], z["diameter"].tolist()))
            return rows, int(z["padded"]), [tuple(x) for x in z["skipped"].tolist()]

    def put(self, uid: str, rows: list, padded: int, skipped: list) -> None:
        cube = rows[0][0].shape if rows else (0,)
        with atomic_path(self.folder / f"{self.name(uid)}.npz", suffix=".npz") as tmp:  # savez adds .npz otherwise
            np.savez(
                tmp,
                cubes=np.array([r[0] for r in rows]).reshape((len(rows),) + cube),
                xyz=np.array([r[1] for r in rows]).reshape(-1, 3),
                diameter=np.array([r[2] for r in rows], float),
                padded=padded,
                skipped=np.array(skipped, dtype=str).reshape(-1, 2),
            )

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _cache_key(
    annotations, folder: Path, lidc_xml: bool, cube, spacing_mm, window, min_readers, assume_hu: bool = False
) -> str:
    h = hashlib.sha1(
        repr((cube, spacing_mm, tuple(window), lidc_xml, min_readers) + ((True,) if assume_hu else ())).encode()
    )
    if lidc_xml:
        for p in sorted(folder.rglob("*.xml")):
            h.update(p.read_bytes())
    else:
        h.update(Path(annotations).read_bytes())
    return h.hexdigest()


def prepare(
    out,
    annotations=None,
    dicom=None,
    luna=None,
    cube=16,
    spacing_mm=1.0,
    n_val=256,
    seed=0,
    window=HU_WINDOW,
    progress=True,
    lidc_xml=False,
    min_readers=3,
    say=print,
    assume_hu=False,
    nifti=None,
) -> Summary:
    """Cut every annotated nodule into a cube and write train/val split by series.

    The nodules come from a LUNA16-format CSV (`annotations`) or, with `lidc_xml`, from
    LIDC-IDRI's XML readings under the `dicom` folder (deepdensity.lidc). Scans already
    cut by an interrupted run with the same settings are not read again (_ScanCache)."""
    _check_prepare(annotations, dicom, luna, cube, spacing_mm, n_val, window, lidc_xml, min_readers, nifti)
    folder = Path(dicom or luna or nifti)
    summary = Summary()
    readings, notes = _nodule_marks(folder, annotations, lidc_xml, summary)
    scans = _scans(dicom, luna, summary, assume_hu, nifti)  # refuses a folder without scans before OUT.partial exists
    cache = _ScanCache(
        Path(out), _cache_key(annotations, folder, lidc_xml, cube, spacing_mm, window, min_readers, assume_hu), say
    )
    cut = _Cutter(cube, spacing_mm, window, readings, notes, min_readers, summary)
    per_series, seen = _cut_scans(scans, cut, cache, progress)
    for uid in sorted(set(notes) - seen):
        what = "the XML readings" if lidc_xml else f"{len(notes[uid])} annotation(s)"
        summary.skipped.append(("nodule", f"{what} of {uid}: no scan with that seriesuid"))
    attrs = _file_attrs(annotations, luna, nifti, cube, spacing_mm, window, seed, lidc_xml, assume_hu, summary)
    try:
        _write_split(out, per_series, n_val, seed, summary, attrs, cube)
    except NotEnoughNodules:
        summary.nodules_written = 0
        cache.clear()  # the same settings would give the same verdict: nothing to keep
        raise
    cache.clear()
    return summary


def _check_prepare(
    annotations, dicom, luna, cube, spacing_mm, n_val, window, lidc_xml, min_readers, nifti=None
) -> None:
    """prepare's arguments, each refused with what to pass instead."""
    if sum(map(bool, (dicom, luna, nifti))) != 1:
        raise DataError("give exactly one of --dicom DIR, --luna DIR or --nifti DIR")
    if bool(annotations) == bool(lidc_xml):
        raise DataError("give exactly one of --annotations CSV or --lidc-xml")
    if lidc_xml and not dicom:
        raise DataError("--lidc-xml reads the XML files next to DICOM series: use it with --dicom")
    if n_val < 0:
        raise DataError(f"--val must be >= 0 (validation cubes), got {n_val}")
    check_geometry(cube, spacing_mm, window)
    if lidc_xml and min_readers < 1:
        raise DataError(f"--min-readers must be >= 1, got {min_readers}")
    if not Path(dicom or luna or nifti).is_dir():
        raise DataError(f"{dicom or luna or nifti} is not a folder")


def _nodule_marks(folder: Path, annotations, lidc_xml: bool, summary: Summary) -> tuple:
    """(LIDC readings per series or None, {seriesuid: [(world xyz, diameter)]}): from the
    CSV, or from the XML readings (their nodules are filled in per series, once its
    geometry is known)."""
    if not lidc_xml:
        return None, read_annotations(annotations, summary.skipped)
    readings, xml_notes = lidc.read_folder(folder)
    if not readings:
        raise DataError(f"no LIDC XML readings (LidcReadMessage) under {folder}")
    summary.skipped += [("note", n) for n in xml_notes]
    return readings, {uid: [] for uid in readings}


@dataclass
class _Cutter:
    """Cuts one loaded scan's nodules into cubes, recording what it skipped in `summary`."""

    cube: int
    spacing_mm: float
    window: tuple
    readings: Optional[dict]
    notes: dict
    min_readers: int
    summary: Summary

    def __call__(self, vol: Volume) -> tuple:
        if self.readings is not None and vol.uid in self.readings:
            self.notes[vol.uid], why = lidc.nodules_of_volume(self.readings[vol.uid], vol, self.min_readers)
            self.summary.skipped += [("note", f"series {vol.uid}: {w}") for w in why]
        return _cut_scan(vol, self.notes.get(vol.uid, []), self.cube, self.spacing_mm, self.window, self.summary)


def _cut_scans(scans: list, cut: _Cutter, cache: "_ScanCache", progress: bool) -> tuple:
    """({seriesuid: cube rows}, seriesuids read): every scan cut, or taken from the cache of
    an interrupted run, with a progress bar."""
    summary = cut.summary
    per_series, seen = defaultdict(list), set()
    bar = tqdm(scans, desc="scans", unit="scan", disable=not progress, file=sys.stderr)
    for uid, load in bar:
        cached = cache.get(uid)
        if cached is None:
            before = len(summary.skipped)
            try:
                vol = check_hu(load())
            except ScanError as e:
                summary.skipped.append(("scan", str(e)))
                continue
            rows, padded = cut(vol)
            cache.put(uid, rows, padded, summary.skipped[before:])
        else:
            rows, padded, skipped = cached
            summary.skipped += skipped
        summary.scans_read += 1
        summary.padded += padded
        seen.add(uid)
        if rows:
            per_series[uid] = rows
        summary.nodules_written += len(rows)
        bar.set_postfix(cubes=summary.nodules_written, skipped=sum(k != "note" for k, _ in summary.skipped))
    bar.close()
    return per_series, seen


def _cut_scan(vol: Volume, nodules, cube, spacing_mm, window, summary) -> tuple:
    """([(cube in [0, 1], world xyz, diameter)], cubes padded with air) of one scan."""
    rows, padded_count = [], 0
    for xyz, diameter in nodules:
        if not vol.contains(xyz):
            summary.skipped.append(("nodule", f"{vol.uid} at {np.round(xyz, 1).tolist()}: outside the volume"))
            continue
        hu, padded = cut_cube(vol, xyz, cube, spacing_mm)
        padded_count += padded
        rows.append((hu_to_unit(hu, window), np.asarray(xyz, float), float(diameter)))
    return rows, padded_count


def _file_attrs(
    annotations, luna, nifti, cube, spacing_mm, window, seed, lidc_xml, assume_hu, summary: Summary
) -> dict:
    """The data file's attributes beside the layout's own: how prepare made it, from what."""
    return {
        "cube_size": cube,
        "ndim": 3,
        "spacing_mm": spacing_mm,
        "hu_window": list(window),
        "source": "luna16" if luna else "nifti" if nifti else "dicom",
        "created_by": "python -m deepdensity.data prepare",
        "scans_read": summary.scans_read,
        "seed": seed,
        "annotations": "lidc-xml" if lidc_xml else str(annotations),
        "assume_hu": bool(assume_hu),
    }


def _write_split(out, per_series: dict, n_val: int, seed: int, summary: Summary, attrs: dict, cube: int) -> None:
    """Split by scan (`n_val` cubes, whole scans at a time) and write the data file."""
    uids = sorted(per_series)
    total = sum(len(v) for v in per_series.values())
    if total == 0 or (n_val > 0 and len(uids) < 2):
        need = (
            "a train/validation split by scan needs at least 2 scans with nodules (or pass --val 0 "
            "for a training split only)"
            if n_val > 0
            else "nothing to write"
        )
        raise NotEnoughNodules(
            f"only {total} nodule cube(s) from {len(uids)} scan(s) of {summary.scans_read} read: {need}", summary
        )
    val_uids, n = [], 0
    for uid in np.random.default_rng(seed).permutation(uids):
        if n >= min(n_val, total - 1) or len(val_uids) == len(uids) - 1:
            break
        val_uids.append(uid)
        n += len(per_series[uid])

    def split(ids):
        rows = [(uid, *r) for uid in ids for r in per_series[uid]]
        if not rows:  # the validation split of --val 0
            return Split(
                np.zeros((0,) + (cube,) * 3, np.float32), np.array([], dtype=object), np.zeros((0, 3)), np.zeros(0)
            )
        return Split(
            np.stack([r[1] for r in rows]),
            np.array([r[0] for r in rows], dtype=object),
            np.stack([r[2] for r in rows]),
            np.array([r[3] for r in rows], float),
        )

    train_ids = [u for u in uids if u not in set(val_uids)]
    write_cubes(out, split(train_ids), split(sorted(val_uids)), attrs)
