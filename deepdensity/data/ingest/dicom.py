"""DICOM series to volumes: every image under a folder grouped by SeriesInstanceUID, a
series' slices sorted along the slice normal, checked (positions, spacing, tilt, rescale
tags) and converted to HU. The geometry is described in deepdensity/data/ingest/geometry.py.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from deepdensity.data.ingest.geometry import ScanError, Volume
from deepdensity.utils.files import FOLDER_MARK, special_kind

_DECODERS = {
    "1.2.840.10008.1.2.4.50": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.51": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.57": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.70": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.80": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.81": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.90": "pylibjpeg pylibjpeg-openjpeg",
    "1.2.840.10008.1.2.4.91": "pylibjpeg pylibjpeg-openjpeg",
    "1.2.840.10008.1.2.5": "pylibjpeg pylibjpeg-rle",
}


def scan_dicom_folder(folder) -> tuple:
    """Headers of every DICOM image under `folder`, grouped by SeriesInstanceUID.

    Returns ({uid: [(path, dataset_without_pixels), ...]}, [(path, reason), ...] skipped).
    """
    import pydicom  # here, not on top: 0.3 s that every other data command would pay
    from pydicom.errors import InvalidDicomError

    series, skipped = defaultdict(list), []
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            path = Path(root) / name
            if name.lower().endswith((".xml", ".csv")) or name == FOLDER_MARK:  # readings, annotations, our mark
                continue
            kind = special_kind(path)
            if kind:  # a FIFO would hold dcmread forever
                skipped.append((str(path), f"{kind}, not a file"))
                continue
            try:
                ds = pydicom.dcmread(path, stop_before_pixels=True)
            except (InvalidDicomError, OSError, ValueError, EOFError) as e:
                skipped.append((str(path), f"not a readable DICOM file ({type(e).__name__})"))
                continue
            if "SeriesInstanceUID" not in ds or "Rows" not in ds:
                skipped.append((str(path), "DICOM file without an image (e.g. DICOMDIR)"))
                continue
            series[str(ds.SeriesInstanceUID)].append((path, ds))
    return dict(series), skipped


def _is_localizer(ds) -> bool:
    return "LOCALIZER" in [str(v).upper() for v in (ds.get("ImageType") or [])]


def slice_hu(path) -> np.ndarray:
    """One image in HU: stored values * RescaleSlope + RescaleIntercept (per slice)."""
    import pydicom  # here, not on top: see scan_dicom_folder

    ds = pydicom.dcmread(path)
    try:
        pixels = ds.pixel_array.astype(np.float32)
    except Exception as e:  # pydicom raises several types when no plugin can decode
        raise _pixel_error(path, ds, e) from None
    slope = float(ds.get("RescaleSlope", 1.0) or 1.0)
    intercept = float(ds.get("RescaleIntercept", 0.0) or 0.0)
    return pixels * slope + intercept


# Transfer syntaxes whose pixels need no decoder: implicit and explicit VR little endian,
# explicit VR big endian, deflated explicit VR little endian.
_UNCOMPRESSED = {"1.2.840.10008.1.2", "1.2.840.10008.1.2.1", "1.2.840.10008.1.2.2", "1.2.840.10008.1.2.1.99"}


def _pixel_error(path, ds, e: Exception) -> ScanError:
    """Why a slice's pixels could not be read: for an uncompressed syntax, cut short (an
    interrupted copy) or damaged, never a decoder (a truncated slice once came with pip advice
    that could not help); for a compressed one, the decoder to install, or damage."""
    tsuid = str(ds.file_meta.get("TransferSyntaxUID", ""))
    if tsuid in _UNCOMPRESSED:
        frames = int(ds.get("NumberOfFrames", 1) or 1)
        need = (
            int(ds.get("Rows", 0))
            * int(ds.get("Columns", 0))
            * int(ds.get("BitsAllocated", 16))
            // 8
            * int(ds.get("SamplesPerPixel", 1) or 1)
            * frames
        )
        held = len(ds.get("PixelData") or b"")
        if held < need:
            return ScanError(
                f"{path}: its pixel data holds {held} bytes where {ds.get('Rows')} x {ds.get('Columns')} "
                f"pixels need {need}: the file is cut short (an interrupted copy?); copy it again"
            )
        return ScanError(
            f"{path}: its pixel data cannot be read ({type(e).__name__}: {str(e)[:200]}); the file may be damaged"
        )
    # compressed: a missing decoder and a damaged file fail alike (pydicom's registry calls a
    # syntax available when one plugin claims it, though that plugin may not read this file)
    pkg = _DECODERS.get(tsuid, "pylibjpeg pylibjpeg-libjpeg pylibjpeg-openjpeg")
    return ScanError(
        f"{path}: pixel data in transfer syntax {tsuid} cannot be decoded here "
        f"({type(e).__name__}); pip install {pkg}, or, if that is installed, the file is damaged"
    )


def _vector(ds, tag: str, n: int, where: str, path) -> np.ndarray:
    """A numeric DICOM tag of n finite values, or ScanError naming the file and what it holds."""
    try:
        v = np.array([float(x) for x in ds.get(tag)], float)
    except (TypeError, ValueError):
        v = None
    if v is None or v.shape != (n,) or not np.isfinite(v).all():
        raise ScanError(
            f"{where}: {Path(path).name} has a malformed {tag} ({ds.get(tag)!r}); the slices cannot be placed in space"
        )
    return v


def _check_tags(where: str, images: list, assume_hu: bool) -> None:
    """Tags every slice needs: rescale (else the stored values are not HU, and the cubes come
    out far too bright), pixel spacing and the slice's UID. ScanError names the first lacking."""
    needs = [("PixelSpacing", "the pixel size is unknown"), ("SOPInstanceUID", "the slices cannot be named")]
    if not assume_hu:
        needs = [
            ("RescaleSlope", "its stored values are not known to be HU (pass --assume-hu if they are)"),
            ("RescaleIntercept", "its stored values are not known to be HU (pass --assume-hu if they are)"),
        ] + needs
    for tag, why in needs:
        lacking = [p for p, ds in images if tag not in ds]
        if lacking:
            raise ScanError(f"{where}: {len(lacking)} image(s) lack {tag} (e.g. {Path(lacking[0]).name}): {why}")


def read_dicom_series(uid: str, items: list, assume_hu: bool = False) -> tuple:
    """A volume from one series' files; returns (Volume, notes). Raises ScanError.
    `assume_hu`: read slices without RescaleSlope/Intercept as HU already."""
    where = f"series {uid} ({Path(items[0][0]).parent})"
    images = [(p, ds) for p, ds in items if not _is_localizer(ds)]
    notes = [f"dropped {len(items) - len(images)} localizer image(s)"] if len(images) < len(items) else []
    if len(images) < 2:
        raise ScanError(f"{where}: fewer than 2 axial images ({len(items) - len(images)} localizer(s)); not a volume")
    missing = [p for p, ds in images if "ImagePositionPatient" not in ds or "ImageOrientationPatient" not in ds]
    if missing:
        raise ScanError(
            f"{where}: {len(missing)} image(s) lack ImagePositionPatient/ImageOrientationPatient "
            f"(e.g. {missing[0].name}); the slices cannot be placed in space"
        )
    _check_tags(where, images, assume_hu)
    orients = Counter(tuple(np.round(_vector(ds, "ImageOrientationPatient", 6, where, p), 4)) for p, ds in images)
    main_orient = np.array(orients.most_common(1)[0][0])
    kept = [
        (p, ds)
        for p, ds in images
        if np.allclose(_vector(ds, "ImageOrientationPatient", 6, where, p), main_orient, atol=1e-3)
    ]
    if len(kept) < len(images):
        notes.append(f"dropped {len(images) - len(kept)} image(s) of another orientation (localizers)")
    if len(kept) < 2:
        raise ScanError(f"{where}: fewer than 2 axial images; not a volume")
    row, col = main_orient[:3], main_orient[3:]
    normal = np.cross(row, col)
    kept, positions, gaps = _in_stack_order(where, kept, normal)
    slices = [slice_hu(p) for p, _ in kept]
    if len({s.shape for s in slices}) != 1:
        raise ScanError(f"{where}: images of different sizes in one series")
    first = kept[0][1]
    ps = list(_vector(first, "PixelSpacing", 2, where, kept[0][0]))
    vol = Volume(
        np.stack(slices).astype(np.float32),
        positions[0],
        np.array([ps[1], ps[0], float(gaps.mean())]),
        np.stack([row, col, normal], axis=1),
        uid=uid,
        source=str(Path(kept[0][0]).parent),
        slice_uids=tuple(str(ds.SOPInstanceUID) for _, ds in kept),
    )
    return vol, notes


def _in_stack_order(where: str, kept: list, normal: np.ndarray) -> tuple:
    """The images in order along the stack's normal, their positions and the gaps between them;
    a ScanError for duplicate slices, a gantry tilt or missing slices (uneven gaps)."""
    positions = np.array([_vector(ds, "ImagePositionPatient", 3, where, p) for p, ds in kept])
    order = np.argsort(positions @ normal)
    kept, positions = [kept[i] for i in order], positions[order]
    along = positions @ normal
    gaps = np.diff(along)
    if np.any(gaps < 1e-3):
        raise ScanError(f"{where}: two images share a slice position; the series holds duplicates")
    steps = positions[1:] - positions[:-1]
    off_axis = np.linalg.norm(steps - np.outer(gaps, normal), axis=1)
    if np.any(off_axis > 1e-2 * np.maximum(gaps, 1.0)):
        raise ScanError(
            f"{where}: gantry tilt (slices shift sideways along the stack); resample it to an "
            f"untilted volume first (e.g. with dcm2niix) "
        )
    if gaps.max() - gaps.min() > max(0.01 * gaps.mean(), 1e-3):
        raise ScanError(
            f"{where}: non-uniform slice spacing ({gaps.min():.3g} to {gaps.max():.3g} mm): "
            f"slices are missing; copy the whole series"
        )
    return kept, positions, gaps
