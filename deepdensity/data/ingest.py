"""Real scans to nodule cubes: DICOM series and LUNA16 MetaImage volumes -> deepdensity HDF5.

    python -m deepdensity.data prepare --luna DIR --annotations annotations.csv --out data/luna.h5
    python -m deepdensity.data prepare --dicom DIR --lidc-xml --out data/lidc.h5     # LIDC-IDRI's XML readings
    python -m deepdensity.data prepare --dicom DIR --annotations nodules.csv --out data/mine.h5

Geometry. A volume is an array `hu[k, j, i]` (slice, row, column) with
    world(i, j, k) = origin + M @ (i, j, k),   M = direction @ diag(spacing),
where direction's columns are the world unit vectors of the index axes i, j, k.
  DICOM: origin = ImagePositionPatient of the first slice after sorting along the slice
         normal n = row_cosines x column_cosines; columns of direction are
         (row_cosines, column_cosines, n); spacing = (PixelSpacing[1], PixelSpacing[0],
         slice spacing from the positions).
  MetaImage: read by SimpleITK (LUNA16's reader): origin, spacing and direction as ITK
         gives them (values 3a..3a+2 of the header's TransformMatrix are the world
         direction of index axis a); the header lists sizes x y z, the array is z y x.
Cubes are resampled trilinearly (scipy.ndimage.map_coordinates, order 1) on an isotropic
grid aligned with the world axes, centred on the nodule, stored as cube[z, y, x]; voxels
outside the scan are air (-1000 HU).
"""
from __future__ import annotations

import csv
import io
import math
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from scipy import ndimage

from deepdensity.data.cubes import HU_AIR, HU_WINDOW, DataError, Split, check_geometry, hu_to_unit, write_cubes
from deepdensity.data.synth import smooth_field
from deepdensity.utils.files import atomic_path
from deepdensity.utils.textfile import read_text


class NotEnoughNodules(DataError):
    """prepare found too few nodules to write; carries the summary of what it skipped and why."""

    def __init__(self, message: str, summary: "Summary"):
        super().__init__(message)
        self.summary = summary


class ScanError(ValueError):
    """One scan (or file) cannot be used; the message names it and says what to do."""


@dataclass
class Volume:
    hu: np.ndarray            # (nk, nj, ni) float32
    origin: np.ndarray        # (3,) mm, world position of voxel (0, 0, 0)
    spacing: np.ndarray       # (3,) mm along i, j, k
    direction: np.ndarray     # (3, 3) columns: world unit vectors of i, j, k
    uid: str
    source: str
    slice_uids: tuple = ()    # DICOM: SOPInstanceUID of slice k (LIDC's readings name slices so)

    @property
    def matrix(self) -> np.ndarray:
        return self.direction @ np.diag(self.spacing)

    def world_to_index(self, xyz) -> np.ndarray:
        """Continuous (i, j, k) of world points (..., 3)."""
        xyz = np.asarray(xyz, float)
        return np.linalg.solve(self.matrix, (xyz - self.origin).reshape(-1, 3).T).T.reshape(xyz.shape)

    def index_to_world(self, ijk) -> np.ndarray:
        ijk = np.asarray(ijk, float)
        return (self.matrix @ ijk.reshape(-1, 3).T).T.reshape(ijk.shape) + self.origin

    def contains(self, xyz) -> bool:
        ijk = self.world_to_index(xyz)
        upper = np.array(self.hu.shape[::-1]) - 1
        return bool(np.all(ijk >= -0.5) and np.all(ijk <= upper + 0.5))


# ------------------------------------------------------------------------------------
# Resampling
# ------------------------------------------------------------------------------------
def cut_cube(vol: Volume, centre_xyz, size: int = 16, spacing_mm: float = 1.0,
             fill: float = HU_AIR) -> tuple:
    """Cube (size, size, size) in HU, axes (z, y, x) of the world, centred on `centre_xyz`.

    Returns (cube, padded): padded is True when part of the cube lay outside the scan.
    """
    offsets = (np.arange(size) - (size - 1) / 2.0) * spacing_mm
    dz, dy, dx = np.meshgrid(offsets, offsets, offsets, indexing="ij")
    world = np.asarray(centre_xyz, float) + np.stack([dx, dy, dz], axis=-1)
    ijk = vol.world_to_index(world)
    kji = ijk[..., ::-1]
    upper = np.array(vol.hu.shape) - 1
    padded = bool(np.any(kji < 0) or np.any(kji > upper))
    # order 1 is trilinear; "grid-constant" blends with `fill` between the last voxel and one
    # voxel beyond it, as a scan padded with air would ("constant" would not interpolate there)
    cube = ndimage.map_coordinates(vol.hu, np.moveaxis(kji, -1, 0), order=1, mode="grid-constant", cval=fill)
    return cube.astype(np.float32), padded


# ------------------------------------------------------------------------------------
# MetaImage (.mhd + .raw, or .mha)
# ------------------------------------------------------------------------------------
def read_metaimage(path) -> Volume:
    """A MetaImage volume (.mhd with its .raw or .zraw, or a one-file .mha) through
    SimpleITK, as LUNA16's own code reads it: the array comes back (z, y, x), and spacing,
    origin and direction (its columns are the index axes' directions) are ITK's."""
    path = Path(path)
    _check_metaimage_fields(path)
    return _read_itk(path, "MetaImageIO", "is the data file next to the header, complete and named as its "
                                          "ElementDataFile says?")


def read_nifti(path) -> Volume:
    """A NIfTI-1 or -2 volume (.nii, .nii.gz) through SimpleITK. NIfTI stores RAS world
    coordinates; ITK turns them into its LPS frame, the frame LUNA16's annotations use for
    MetaImage, so one annotations CSV convention serves both. The scaling NIfTI stores
    (scl_slope, scl_inter) is applied, as it is for DICOM's rescale."""
    return _read_itk(Path(path), "NiftiImageIO", "is it a complete NIfTI file (an interrupted copy of a .nii.gz "
                                                 "is cut short)?")


def read_volume(path) -> Volume:
    """A scan file by its suffix: MetaImage (.mhd, .mha) or NIfTI (.nii, .nii.gz)."""
    return read_nifti(path) if _is_nifti(Path(path)) else read_metaimage(path)


def _is_nifti(path: Path) -> bool:
    return path.name.endswith((".nii", ".nii.gz"))


def _scan_uid(path: Path) -> str:
    """The seriesuid a scan file stands for: its name without .mhd/.mha/.nii/.nii.gz."""
    return path.name.removesuffix(".gz").rsplit(".", 1)[0]


def _read_itk(path: Path, image_io: str, hint: str) -> Volume:
    """One volume through SimpleITK's `image_io`, its geometry and HU checked."""
    import SimpleITK as sitk

    reader = sitk.ImageFileReader()
    reader.SetImageIO(image_io)
    reader.SetFileName(str(path))
    with _native_output() as said:       # MetaIO explains a failure on stderr, not in its exception
        try:
            reader.ReadImageInformation()
            _check_metaimage_header(path, reader)
            image = reader.Execute()
        except RuntimeError as e:
            image, error = None, e
    if image is None:
        generic = ("MET_Read Failed", "Error parsing file", "Cannot parse file")
        reason = "; ".join(" ".join(ln.split()) for ln in said.text.splitlines()
                           if ln.strip() and not any(g in ln for g in generic))
        raise ScanError(f"{path}: SimpleITK cannot read it ({reason or _itk_reason(error)}); {hint}")
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise ScanError(f"{path}: {image.GetNumberOfComponentsPerPixel()} values per voxel; a CT volume has one")
    hu = sitk.GetArrayFromImage(image).astype(np.float32)
    return Volume(hu, np.array(image.GetOrigin()), np.array(image.GetSpacing()),
                  np.array(image.GetDirection()).reshape(3, 3), uid=_scan_uid(path), source=str(path))


# A chest CT in HU holds air (-1000) around and in the lungs; a volume whose lowest values stay
# above this was not stored in HU (raw detector values, or intensities normalised to [0, 1]).
AIR_BELOW_HU = -500.0


def check_hu(vol: Volume) -> Volume:
    """`vol`, or ScanError for a volume with no air: its values are not HU, and its cubes
    would be cut in the wrong window without a word (any source: DICOM read with
    --assume-hu, MetaImage and NIfTI carry no tag that says HU)."""
    lowest = float(np.percentile(vol.hu, 0.5)) if vol.hu.size else math.nan
    if not lowest < AIR_BELOW_HU:
        raise ScanError(f"{vol.source or vol.uid}: no voxel of air (its lowest values are near {lowest:.4g}, air is -1000 HU): "
                        f"its values are not HU; convert it to HU, or leave it out")
    return vol


def _check_metaimage_header(path: Path, reader) -> None:
    """What the numbers mean (for MetaImage, once _check_metaimage_fields has checked their
    form): three dimensions, sizes and spacings positive, the direction a rotation."""
    if reader.GetDimension() != 3:
        raise ScanError(f"{path}: {reader.GetDimension()} dimensions; a CT volume has 3")
    size, spacing = np.array(reader.GetSize()), np.array(reader.GetSpacing())
    direction = np.array(reader.GetDirection()).reshape(3, 3)
    if (size < 1).any() or not (np.isfinite(spacing).all() and (spacing > 0).all()):
        raise ScanError(f"{path}: DimSize {size.tolist()} or ElementSpacing {spacing.tolist()} is not positive")
    if not (np.isfinite(reader.GetOrigin()).all() and np.allclose(direction.T @ direction, np.eye(3), atol=1e-3)):
        raise ScanError(f"{path}: its Offset {list(reader.GetOrigin())} or TransformMatrix "
                        f"{direction.T.reshape(-1).tolist()} is not a position and a rotation")


def _itk_reason(e: RuntimeError) -> str:
    """The useful line of an ITK exception (they run to a dozen lines of C++ context)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln.lower().startswith(("description:", "itk::error")) or "could not" in ln.lower()]
    return (useful or lines or ["unknown error"])[-1].removeprefix("Description:").strip()[:200]


# MetaImage numeric fields and their number of values (for NDims = 3).
_MHD_NUMERIC = {"NDims": 1, "DimSize": 3, "ElementSpacing": 3, "Offset": 3, "Origin": 3, "Position": 3,
                "CenterOfRotation": 3, "TransformMatrix": 9, "Rotation": 9, "Orientation": 9}


def _check_metaimage_fields(path: Path) -> None:
    """SimpleITK reads a malformed numeric field as whatever it could parse (measured:
    DimSize "6 5 4.5" as 6 5 4, Offset "1 2 nan" as 1 2 0): refuse such a header first, so
    that prepare skips the scan with its reason. Only `key = value` lines are looked at,
    up to ElementDataFile (a .mha's voxels follow it)."""
    try:
        with open(path, "rb") as f:
            lines = [f.readline(4096) for _ in range(200)]
    except OSError as e:
        raise ScanError(f"{path}: cannot be read ({e.strerror})") from None
    for raw in lines:
        key, _, value = raw.decode("latin-1").partition("=")
        key = key.strip()
        if key == "ElementDataFile":
            return
        if key not in _MHD_NUMERIC:
            continue
        kind = int if key in ("NDims", "DimSize") else float
        try:
            values = [kind(v) for v in value.split()]
        except ValueError:
            values = []
        if key == "NDims" and values and values != [3]:
            raise ScanError(f"{path}: NDims is {value.strip()}; a CT volume has 3")
        if len(values) != _MHD_NUMERIC[key] or not np.isfinite(values).all():
            raise ScanError(f"{path}: header field {key} = {value.strip()!r} is not {_MHD_NUMERIC[key]} "
                            f"number(s); fix the header or leave the scan out")


class _native_output:
    """Catch what C++ libraries write to the process's stdout and stderr (file descriptors
    1 and 2) while the block runs; the text is in `.text` afterwards."""

    def __enter__(self):
        import tempfile
        sys.stdout.flush()
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = [os.dup(1), os.dup(2)]
        for fd in (1, 2):
            os.dup2(self._file.fileno(), fd)
        self.text = ""
        return self

    def __exit__(self, *exc):
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        return False


def write_metaimage(path, hu: np.ndarray, origin, spacing, direction) -> None:
    """Write `hu[k, j, i]` as an .mhd header and .raw int16 data (for tests and synth)."""
    path = Path(path)
    rows = np.asarray(direction, float).T.reshape(-1)
    nk, nj, ni = hu.shape
    header = (f"ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
              f"CompressedData = False\nTransformMatrix = {' '.join(f'{v:.10g}' for v in rows)}\n"
              f"Offset = {' '.join(f'{v:.10g}' for v in origin)}\nCenterOfRotation = 0 0 0\n"
              f"AnatomicalOrientation = RAI\nElementSpacing = {' '.join(f'{v:.10g}' for v in spacing)}\n"
              f"DimSize = {ni} {nj} {nk}\nElementType = MET_SHORT\nElementDataFile = {path.stem}.raw\n")
    path.write_text(header)
    (path.parent / f"{path.stem}.raw").write_bytes(np.round(hu).astype("<i2").tobytes())


def write_nifti(path, hu: np.ndarray, origin, spacing, direction) -> None:
    """Write `hu[k, j, i]` (int16) as NIfTI through SimpleITK, geometry in ITK's frame (for tests and synth)."""
    import SimpleITK as sitk
    image = sitk.GetImageFromArray(np.round(hu).astype(np.int16))
    image.SetOrigin([float(v) for v in origin])
    image.SetSpacing([float(v) for v in spacing])
    image.SetDirection([float(v) for v in np.asarray(direction, float).reshape(-1)])
    sitk.WriteImage(image, str(path))


# ------------------------------------------------------------------------------------
# DICOM
# ------------------------------------------------------------------------------------
_DECODERS = {
    "1.2.840.10008.1.2.4.50": "pylibjpeg pylibjpeg-libjpeg", "1.2.840.10008.1.2.4.51": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.57": "pylibjpeg pylibjpeg-libjpeg", "1.2.840.10008.1.2.4.70": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.80": "pylibjpeg pylibjpeg-libjpeg", "1.2.840.10008.1.2.4.81": "pylibjpeg pylibjpeg-libjpeg",
    "1.2.840.10008.1.2.4.90": "pylibjpeg pylibjpeg-openjpeg", "1.2.840.10008.1.2.4.91": "pylibjpeg pylibjpeg-openjpeg",
    "1.2.840.10008.1.2.5": "pylibjpeg pylibjpeg-rle",
}


def scan_dicom_folder(folder) -> tuple:
    """Headers of every DICOM image under `folder`, grouped by SeriesInstanceUID.

    Returns ({uid: [(path, dataset_without_pixels), ...]}, [(path, reason), ...] skipped).
    """
    import pydicom
    from pydicom.errors import InvalidDicomError
    series, skipped = defaultdict(list), []
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            path = Path(root) / name
            if name.lower().endswith((".xml", ".csv")):     # LIDC's readings, annotation lists: not images
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
    import pydicom
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
        need = (int(ds.get("Rows", 0)) * int(ds.get("Columns", 0)) * int(ds.get("BitsAllocated", 16)) // 8
                * int(ds.get("SamplesPerPixel", 1) or 1) * frames)
        held = len(ds.get("PixelData") or b"")
        if held < need:
            return ScanError(f"{path}: its pixel data holds {held} bytes where {ds.get('Rows')} x {ds.get('Columns')} "
                             f"pixels need {need}: the file is cut short (an interrupted copy?); copy it again")
        return ScanError(f"{path}: its pixel data cannot be read ({type(e).__name__}: {str(e)[:200]}); the file "
                         f"may be damaged")
    # compressed: a missing decoder and a damaged file fail alike (pydicom's registry calls a
    # syntax available when one plugin claims it, though that plugin may not read this file)
    pkg = _DECODERS.get(tsuid, "pylibjpeg pylibjpeg-libjpeg pylibjpeg-openjpeg")
    return ScanError(f"{path}: pixel data in transfer syntax {tsuid} cannot be decoded here "
                     f"({type(e).__name__}); pip install {pkg}, or, if that is installed, the file is damaged")


def _vector(ds, tag: str, n: int, where: str, path) -> np.ndarray:
    """A numeric DICOM tag of n finite values, or ScanError naming the file and what it holds."""
    try:
        v = np.array([float(x) for x in ds.get(tag)], float)
    except (TypeError, ValueError):
        v = None
    if v is None or v.shape != (n,) or not np.isfinite(v).all():
        raise ScanError(f"{where}: {Path(path).name} has a malformed {tag} ({ds.get(tag)!r}); "
                        f"the slices cannot be placed in space")
    return v


def _check_tags(where: str, images: list, assume_hu: bool) -> None:
    """Tags every slice needs: rescale (else the stored values are not HU, and the cubes come
    out far too bright), pixel spacing and the slice's UID. ScanError names the first lacking."""
    needs = [("PixelSpacing", "the pixel size is unknown"), ("SOPInstanceUID", "the slices cannot be named")]
    if not assume_hu:
        needs = [("RescaleSlope", "its stored values are not known to be HU (pass --assume-hu if they are)"),
                 ("RescaleIntercept", "its stored values are not known to be HU (pass --assume-hu if they are)")] + needs
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
        raise ScanError(f"{where}: {len(missing)} image(s) lack ImagePositionPatient/ImageOrientationPatient "
                        f"(e.g. {missing[0].name}); the slices cannot be placed in space")
    _check_tags(where, images, assume_hu)
    orients = Counter(tuple(np.round(_vector(ds, "ImageOrientationPatient", 6, where, p), 4)) for p, ds in images)
    main_orient = np.array(orients.most_common(1)[0][0])
    kept = [(p, ds) for p, ds in images
            if np.allclose(_vector(ds, "ImageOrientationPatient", 6, where, p), main_orient, atol=1e-3)]
    if len(kept) < len(images):
        notes.append(f"dropped {len(images) - len(kept)} image(s) of another orientation (localizers)")
    if len(kept) < 2:
        raise ScanError(f"{where}: fewer than 2 axial images; not a volume")
    row, col = main_orient[:3], main_orient[3:]
    normal = np.cross(row, col)
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
        raise ScanError(f"{where}: gantry tilt (slices shift sideways along the stack); resample it to an "
                        f"untilted volume first (e.g. with dcm2niix) ")
    if gaps.max() - gaps.min() > max(0.01 * gaps.mean(), 1e-3):
        raise ScanError(f"{where}: non-uniform slice spacing ({gaps.min():.3g} to {gaps.max():.3g} mm): "
                        f"slices are missing; copy the whole series")
    slices = [slice_hu(p) for p, _ in kept]
    if len({s.shape for s in slices}) != 1:
        raise ScanError(f"{where}: images of different sizes in one series")
    first = kept[0][1]
    ps = list(_vector(first, "PixelSpacing", 2, where, kept[0][0]))
    vol = Volume(np.stack(slices).astype(np.float32), positions[0],
                 np.array([ps[1], ps[0], float(gaps.mean())]), np.stack([row, col, normal], axis=1),
                 uid=uid, source=str(Path(kept[0][0]).parent),
                 slice_uids=tuple(str(ds.SOPInstanceUID) for _, ds in kept))
    return vol, notes


# ------------------------------------------------------------------------------------
# Annotations and the pipeline
# ------------------------------------------------------------------------------------
ANNOTATION_COLUMNS = ("seriesuid", "coordX", "coordY", "coordZ", "diameter_mm")


def _dialect(header: str) -> tuple:
    """(separator, decimal comma?) of an annotations CSV from its header line: the comma of
    LUNA16's own file, or the semicolon (with decimal commas) or tab a spreadsheet writes in
    locales where the comma is the decimal mark."""
    counts = {sep: header.count(sep) for sep in (",", ";", "\t")}
    sep = max(counts, key=lambda k: (counts[k], k == ","))     # a tie, or nothing: LUNA16's comma
    return sep, sep != ","


def _number(text: str, decimal_comma: bool) -> float:
    return float(text.strip().replace(",", ".") if decimal_comma else text)


def read_annotations(path, skipped: Optional[list] = None) -> dict:
    """{seriesuid: [(xyz, diameter_mm), ...]} from a LUNA16-format CSV (UTF-8, with or
    without the byte-order mark a spreadsheet writes; commas, or semicolons with decimal
    commas, or tabs; spaces after a separator allowed). Rows with a non-finite coordinate or
    a diameter that is not a positive number, and repeats of an earlier row, are left out
    and listed in `skipped` as ("nodule", reason)."""
    path = Path(path)
    text = read_text(path, "annotations file", DataError, "save it as UTF-8 CSV")
    sep, decimal_comma = _dialect(text.splitlines()[0] if text.strip() else "")
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=sep, skipinitialspace=True)
    reader.fieldnames = [f.strip() for f in (reader.fieldnames or [])]
    missing = [c for c in ANNOTATION_COLUMNS if c not in reader.fieldnames]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)} (found {', '.join(reader.fieldnames)}); "
                        f"expected LUNA16's {','.join(ANNOTATION_COLUMNS)}")
    out, first_line, skipped = defaultdict(list), {}, skipped if skipped is not None else []
    for n, row in enumerate(reader, start=2):
        try:
            xyz = np.array([_number(row[c], decimal_comma) for c in ("coordX", "coordY", "coordZ")])
            diameter = _number(row["diameter_mm"], decimal_comma)
        except (TypeError, ValueError, AttributeError):
            raise DataError(f"{path}, line {n}: coordinates and diameter must be numbers") from None
        uid = row["seriesuid"].strip()
        if not (np.isfinite(xyz).all() and np.isfinite(diameter) and diameter > 0):
            skipped.append(("nodule", f"{path.name} line {n} ({uid}): coordinates must be finite and the diameter "
                                      f"a positive number, got {list(xyz)} and {diameter}"))
            continue
        key = (uid, tuple(xyz), diameter)
        if key in first_line:
            skipped.append(("nodule", f"{path.name} line {n} ({uid}): the same nodule as line {first_line[key]}"))
            continue
        first_line[key] = n
        out[uid].append((xyz, diameter))
    return dict(out)


@dataclass
class Summary:
    scans_read: int = 0
    nodules_written: int = 0
    padded: int = 0
    skipped: list = None

    def __post_init__(self):
        self.skipped = self.skipped or []


def _scans(dicom: Optional[str], luna: Optional[str], summary: Summary, assume_hu: bool = False,
           nifti: Optional[str] = None) -> list:
    """[(uid, load)] of every scan under the folder, cheap to list: `load()` reads the
    volume (ScanError if it cannot), so a scan already cut need not be read again."""
    if luna or nifti:
        patterns = ("*.mhd", "*.mha") if luna else ("*.nii", "*.nii.gz")
        paths = sorted(p for pattern in patterns for p in Path(luna or nifti).rglob(pattern))
        if not paths:
            raise DataError(f"no {' or '.join(x[1:] for x in patterns)} files under {luna or nifti}")
        return [(_scan_uid(p), lambda p=p: read_volume(p)) for p in paths]
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
        import hashlib
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
            np.savez(tmp, cubes=np.array([r[0] for r in rows]).reshape((len(rows),) + cube),
                     xyz=np.array([r[1] for r in rows]).reshape(-1, 3), diameter=np.array([r[2] for r in rows], float),
                     padded=padded, skipped=np.array(skipped, dtype=str).reshape(-1, 2))

    def clear(self) -> None:
        import shutil
        shutil.rmtree(self.folder, ignore_errors=True)


def _cache_key(annotations, folder: Path, lidc_xml: bool, cube, spacing_mm, window, min_readers,
               assume_hu: bool = False) -> str:
    import hashlib
    h = hashlib.sha1(repr((cube, spacing_mm, tuple(window), lidc_xml, min_readers)
                          + ((True,) if assume_hu else ())).encode())
    if lidc_xml:
        for p in sorted(folder.rglob("*.xml")):
            h.update(p.read_bytes())
    else:
        h.update(Path(annotations).read_bytes())
    return h.hexdigest()


def prepare(out, annotations=None, dicom=None, luna=None, cube=16, spacing_mm=1.0, n_val=256, seed=0,
            window=HU_WINDOW, progress=True, lidc_xml=False, min_readers=3, say=print, assume_hu=False,
            nifti=None) -> Summary:
    """Cut every annotated nodule into a cube and write train/val split by series.

    The nodules come from a LUNA16-format CSV (`annotations`) or, with `lidc_xml`, from
    LIDC-IDRI's XML readings under the `dicom` folder (deepdensity.lidc). Scans already
    cut by an interrupted run with the same settings are not read again (_ScanCache)."""
    _check_prepare(annotations, dicom, luna, cube, spacing_mm, n_val, window, lidc_xml, min_readers, nifti)
    folder = Path(dicom or luna or nifti)
    summary = Summary()
    readings, notes = _nodule_marks(folder, annotations, lidc_xml, summary)
    scans = _scans(dicom, luna, summary, assume_hu, nifti)    # refuses a folder without scans before OUT.partial exists
    cache = _ScanCache(Path(out), _cache_key(annotations, folder, lidc_xml, cube, spacing_mm, window,
                                             min_readers, assume_hu),
                       say)
    cut = _Cutter(cube, spacing_mm, window, readings, notes, min_readers, summary)
    per_series, seen = _cut_scans(scans, cut, cache, progress)
    for uid in sorted(set(notes) - seen):
        what = "the XML readings" if lidc_xml else f"{len(notes[uid])} annotation(s)"
        summary.skipped.append(("nodule", f"{what} of {uid}: no scan with that seriesuid"))
    try:
        _write_split(out, per_series, n_val, seed, summary, {
            "cube_size": cube, "ndim": 3, "spacing_mm": spacing_mm, "hu_window": list(window),
            "source": "luna16" if luna else "nifti" if nifti else "dicom", "created_by": "python -m deepdensity.data prepare",
            "scans_read": summary.scans_read, "seed": seed,
            "annotations": "lidc-xml" if lidc_xml else str(annotations),
            "assume_hu": bool(assume_hu),
        }, cube)
    except NotEnoughNodules:
        summary.nodules_written = 0
        cache.clear()               # the same settings would give the same verdict: nothing to keep
        raise
    cache.clear()
    return summary


def _check_prepare(annotations, dicom, luna, cube, spacing_mm, n_val, window, lidc_xml, min_readers,
                   nifti=None) -> None:
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
    from deepdensity.data import lidc
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
            from deepdensity.data import lidc
            self.notes[vol.uid], why = lidc.nodules_of_volume(self.readings[vol.uid], vol, self.min_readers)
            self.summary.skipped += [("note", f"series {vol.uid}: {w}") for w in why]
        return _cut_scan(vol, self.notes.get(vol.uid, []), self.cube, self.spacing_mm, self.window, self.summary)


def _cut_scans(scans: list, cut: _Cutter, cache: "_ScanCache", progress: bool) -> tuple:
    """({seriesuid: cube rows}, seriesuids read): every scan cut, or taken from the cache of
    an interrupted run, with a progress bar."""
    from tqdm import tqdm
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


def _write_split(out, per_series: dict, n_val: int, seed: int, summary: Summary, attrs: dict, cube: int) -> None:
    """Split by scan (`n_val` cubes, whole scans at a time) and write the data file."""
    uids = sorted(per_series)
    total = sum(len(v) for v in per_series.values())
    if total == 0 or (n_val > 0 and len(uids) < 2):
        need = ("a train/validation split by scan needs at least 2 scans with nodules (or pass --val 0 "
                "for a training split only)" if n_val > 0 else "nothing to write")
        raise NotEnoughNodules(f"only {total} nodule cube(s) from {len(uids)} scan(s) of {summary.scans_read} "
                               f"read: {need}", summary)
    val_uids, n = [], 0
    for uid in np.random.default_rng(seed).permutation(uids):
        if n >= min(n_val, total - 1) or len(val_uids) == len(uids) - 1:
            break
        val_uids.append(uid)
        n += len(per_series[uid])

    def split(ids):
        rows = [(uid, *r) for uid in ids for r in per_series[uid]]
        if not rows:                          # the validation split of --val 0
            return Split(np.zeros((0,) + (cube,) * 3, np.float32), np.array([], dtype=object),
                         np.zeros((0, 3)), np.zeros(0))
        return Split(np.stack([r[1] for r in rows]), np.array([r[0] for r in rows], dtype=object),
                     np.stack([r[2] for r in rows]), np.array([r[3] for r in rows], float))

    train_ids = [u for u in uids if u not in set(val_uids)]
    write_cubes(out, split(train_ids), split(sorted(val_uids)), attrs)


# ------------------------------------------------------------------------------------
# Synthetic scans on disk, for trying the whole path offline
# ------------------------------------------------------------------------------------
def synth_scan(rng: np.random.Generator, shape=(40, 96, 96), spacing=(0.7, 0.7, 1.25), n_nodules: int = 2):
    """A CT-like volume hu[k, j, i] with solid nodules at known voxel positions (i, j, k)."""
    nk, nj, ni = shape
    hu = -860.0 + 60.0 * smooth_field(rng.normal(size=shape), 2.0) * 3.0
    kk, jj, ii = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    mm = np.stack([ii * spacing[0], jj * spacing[1], kk * spacing[2]], axis=-1)
    centres, diameters = [], []
    for _ in range(n_nodules):
        d = rng.uniform(6.0, 12.0)
        c = np.array([rng.uniform(12, ni * spacing[0] - 12), rng.uniform(12, nj * spacing[1] - 12),
                      rng.uniform(12, nk * spacing[2] - 12)])
        inside = 1.0 / (1.0 + np.exp(np.clip((np.linalg.norm(mm - c, axis=-1) - d / 2) / 0.4, -50, 50)))
        hu = hu + inside * (rng.normal(30, 10) + 860)
        centres.append(c / np.array(spacing))     # continuous (i, j, k)
        diameters.append(d)
    hu = hu + rng.normal(0, 25, shape)
    return hu.astype(np.float32), np.array(centres), np.array(diameters)


def write_dicom_series(folder, hu: np.ndarray, origin, spacing, row_cos, col_cos, series_uid: str,
                       rng: Optional[np.random.Generator] = None) -> list:
    """One CT image file per slice of hu[k, j, i]; with `rng`, shuffled random file names.
    Returns the SOPInstanceUID of each slice k."""
    import pydicom
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    row_cos, col_cos = np.asarray(row_cos, float), np.asarray(col_cos, float)
    normal = np.cross(row_cos, col_cos)
    study_uid = generate_uid()
    names = [f"IM{i:05d}.dcm" for i in range(hu.shape[0])]
    if rng is not None:
        names = [f"{rng.integers(1 << 40):x}" for _ in names]   # no extension, no order
    sop_uids = []
    for k in range(hu.shape[0]):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = CTImageStorage
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = pydicom.Dataset()
        ds.file_meta = meta
        ds.SOPClassUID, ds.SOPInstanceUID = CTImageStorage, meta.MediaStorageSOPInstanceUID
        ds.Modality, ds.PatientID = "CT", "SYNTH"
        ds.StudyInstanceUID, ds.SeriesInstanceUID = study_uid, series_uid
        ds.ImageType = ["ORIGINAL", "PRIMARY", "AXIAL"]
        # instance numbers run backwards on purpose: sorting must use positions
        ds.InstanceNumber = hu.shape[0] - k
        ds.ImagePositionPatient = [f"{v:.6f}" for v in np.asarray(origin, float) + k * spacing[2] * normal]
        ds.ImageOrientationPatient = [f"{v:.6f}" for v in np.concatenate([row_cos, col_cos])]
        ds.PixelSpacing = [f"{spacing[1]:.6f}", f"{spacing[0]:.6f}"]
        ds.SliceThickness = f"{spacing[2]:.6f}"
        ds.Rows, ds.Columns = hu.shape[1], hu.shape[2]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
        ds.RescaleSlope, ds.RescaleIntercept = "1", "-1024"
        ds.PixelData = np.round(hu[k] + 1024).astype("<i2").tobytes()
        ds.save_as(folder / names[k], enforce_file_format=True)
        sop_uids.append(str(ds.SOPInstanceUID))
    return sop_uids


def synth_scans(out_dir, n_scans: int = 3, seed: int = 0, fmt: str = "dicom") -> Path:
    """Synthetic CT scans as DICOM series or .mhd/.raw, plus annotations.csv; returns its path."""
    if n_scans < 1:
        raise DataError(f"synth-scans needs --n of at least 1, got {n_scans}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in range(n_scans):
        rng = np.random.default_rng([seed, s])
        hu, centres, diameters = synth_scan(rng)
        spacing = np.array([0.7, 0.7, 1.25])
        origin = np.array([-35.0, -40.0, -120.0 - 10 * s])
        direction = np.eye(3)
        uid = f"1.2.826.0.1.3680043.10.999.{seed}.{s}"
        vol = Volume(hu, origin, spacing, direction, uid, "")
        if fmt == "dicom":
            vol.slice_uids = tuple(write_dicom_series(out_dir / f"scan{s}", hu, origin, spacing, direction[:, 0],
                                                      direction[:, 1], uid, rng))
            # LIDC-style readings: four radiologists who agree on every nodule
            from deepdensity.data.lidc import write_xml
            write_xml(out_dir / f"scan{s}" / "readings.xml", uid, [list(zip(centres, diameters))] * 4, vol)
        elif fmt == "nifti":
            write_nifti(out_dir / f"{uid}.nii.gz", hu, origin, spacing, direction)
        else:
            write_metaimage(out_dir / f"{uid}.mhd", hu, origin, spacing, direction)
        for c, d in zip(centres, diameters):
            x, y, z = vol.index_to_world(c)
            rows.append([uid, f"{x:.3f}", f"{y:.3f}", f"{z:.3f}", f"{d:.2f}"])
    csv_path = out_dir / "annotations.csv"
    with open(csv_path, "w", newline="") as f:
        csv.writer(f).writerows([list(ANNOTATION_COLUMNS)] + rows)
    return csv_path
