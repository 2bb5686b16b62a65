"""Real scans to nodule cubes: DICOM series and LUNA16 MetaImage volumes -> deepdensity HDF5.

    python -m deepdensity.data prepare --luna DIR --annotations annotations.csv --out data/luna.h5
    python -m deepdensity.data prepare --dicom DIR --annotations nodules.csv --out data/lidc.h5

Geometry. A volume is an array `hu[k, j, i]` (slice, row, column) with
    world(i, j, k) = origin + M @ (i, j, k),   M = direction @ diag(spacing),
where direction's columns are the world unit vectors of the index axes i, j, k.
  DICOM: origin = ImagePositionPatient of the first slice after sorting along the slice
         normal n = row_cosines x column_cosines; columns of direction are
         (row_cosines, column_cosines, n); spacing = (PixelSpacing[1], PixelSpacing[0],
         slice spacing from the positions).
  MetaImage: origin = Offset; values 3a..3a+2 of TransformMatrix are the world direction
         of index axis a (ITK's MetaImageIO reads it so); spacing = ElementSpacing; the
         header lists sizes x y z while the array is z y x.
Cubes are resampled (trilinear) on an isotropic grid aligned with the world axes, centred
on the nodule, stored as cube[z, y, x]; voxels outside the scan are air (-1000 HU).
"""
from __future__ import annotations

import csv
import os
import sys
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .data import HU_AIR, HU_WINDOW, DataError, Split, hu_to_unit, write_cubes


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
def trilinear(volume: np.ndarray, kji: np.ndarray, fill: float) -> np.ndarray:
    """Sample `volume[k, j, i]` at continuous (k, j, i) points (..., 3); `fill` outside."""
    shape = np.array(volume.shape)
    base = np.floor(kji).astype(int)
    frac = kji - base
    out = np.zeros(kji.shape[:-1])
    for corner in np.ndindex(2, 2, 2):
        idx = base + corner
        w = np.prod(np.where(corner, frac, 1 - frac), axis=-1)
        inside = np.all((idx >= 0) & (idx < shape), axis=-1)
        safe = np.clip(idx, 0, shape - 1)
        vals = np.where(inside, volume[safe[..., 0], safe[..., 1], safe[..., 2]], fill)
        out += w * vals
    return out


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
    return trilinear(vol.hu, kji, fill).astype(np.float32), padded


# ------------------------------------------------------------------------------------
# MetaImage (.mhd + .raw, or .mha)
# ------------------------------------------------------------------------------------
_MET_TYPES = {"MET_CHAR": "i1", "MET_UCHAR": "u1", "MET_SHORT": "i2", "MET_USHORT": "u2",
              "MET_INT": "i4", "MET_UINT": "u4", "MET_LONG": "i4", "MET_ULONG": "u4",
              "MET_FLOAT": "f4", "MET_DOUBLE": "f8"}


def read_metaimage(path) -> Volume:
    path = Path(path)
    header, data_offset = {}, None
    raw = path.read_bytes()
    pos = 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        end = len(raw) if end < 0 else end
        line = raw[pos:end].decode("latin-1").strip()
        pos = end + 1
        if "=" not in line:
            continue
        key, value = (s.strip() for s in line.split("=", 1))
        header[key] = value
        if key == "ElementDataFile":
            data_offset = pos
            break
    for key in ("NDims", "DimSize", "ElementType", "ElementDataFile"):
        if key not in header:
            raise ScanError(f"{path}: not a MetaImage header (no {key}); LUNA16 volumes are .mhd + .raw pairs")
    if int(header["NDims"]) != 3:
        raise ScanError(f"{path}: NDims is {header['NDims']}; a CT volume has 3")
    size = [int(v) for v in header["DimSize"].split()]
    spacing = np.array([float(v) for v in header.get("ElementSpacing", "1 1 1").split()])
    origin = np.array([float(v) for v in (header.get("Offset") or header.get("Origin")
                                          or header.get("Position") or "0 0 0").split()])
    tm = header.get("TransformMatrix") or header.get("Rotation") or header.get("Orientation") or "1 0 0 0 1 0 0 0 1"
    rows = np.array([float(v) for v in tm.split()]).reshape(3, 3)
    direction = rows.T  # row a = direction of index axis a -> column a
    if header["ElementType"] not in _MET_TYPES:
        raise ScanError(f"{path}: ElementType {header['ElementType']} is not supported")
    dtype = np.dtype(_MET_TYPES[header["ElementType"]])
    msb = (header.get("ElementByteOrderMSB") or header.get("BinaryDataByteOrderMSB") or "False").lower() == "true"
    dtype = dtype.newbyteorder(">" if msb else "<")
    if header["ElementDataFile"] == "LOCAL":
        payload = raw[data_offset:]
        data_name = path
    else:
        data_name = path.parent / header["ElementDataFile"]
        if not data_name.exists():
            raise ScanError(f"{path}: its data file {data_name.name} is missing; copy it next to the header")
        payload = data_name.read_bytes()
    if header.get("CompressedData", "False").lower() == "true":
        try:
            payload = zlib.decompress(payload)
        except zlib.error as e:
            raise ScanError(f"{data_name}: compressed data cannot be inflated ({e}); the file is damaged") from None
    expected = int(np.prod(size)) * dtype.itemsize
    if len(payload) < expected:
        raise ScanError(f"{data_name}: truncated, {len(payload):,} bytes where {size[0]}x{size[1]}x{size[2]} "
                        f"{header['ElementType']} needs {expected:,}; copy it again")
    hu = np.frombuffer(payload[:expected], dtype=dtype).reshape(size[2], size[1], size[0]).astype(np.float32)
    return Volume(hu, origin, spacing, direction, uid=path.stem, source=str(path))


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
        tsuid = str(ds.file_meta.get("TransferSyntaxUID", ""))
        pkg = _DECODERS.get(tsuid, "pylibjpeg pylibjpeg-libjpeg pylibjpeg-openjpeg")
        raise ScanError(f"{path}: pixel data in transfer syntax {tsuid} cannot be decoded here "
                        f"({type(e).__name__}); pip install {pkg}") from None
    slope = float(ds.get("RescaleSlope", 1.0) or 1.0)
    intercept = float(ds.get("RescaleIntercept", 0.0) or 0.0)
    return pixels * slope + intercept


def read_dicom_series(uid: str, items: list) -> tuple:
    """A volume from one series' files; returns (Volume, notes). Raises ScanError."""
    where = f"series {uid} ({Path(items[0][0]).parent})"
    images = [(p, ds) for p, ds in items if not _is_localizer(ds)]
    notes = [f"dropped {len(items) - len(images)} localizer image(s)"] if len(images) < len(items) else []
    if len(images) < 2:
        raise ScanError(f"{where}: fewer than 2 axial images ({len(items) - len(images)} localizer(s)); not a volume")
    missing = [p for p, ds in images if "ImagePositionPatient" not in ds or "ImageOrientationPatient" not in ds]
    if missing:
        raise ScanError(f"{where}: {len(missing)} image(s) lack ImagePositionPatient/ImageOrientationPatient "
                        f"(e.g. {missing[0].name}); the slices cannot be placed in space")
    orients = Counter(tuple(np.round(np.array(ds.ImageOrientationPatient, float), 4)) for _, ds in images)
    main_orient = np.array(orients.most_common(1)[0][0])
    kept = [(p, ds) for p, ds in images
            if np.allclose(np.array(ds.ImageOrientationPatient, float), main_orient, atol=1e-3)]
    if len(kept) < len(images):
        notes.append(f"dropped {len(images) - len(kept)} image(s) of another orientation (localizers)")
    if len(kept) < 2:
        raise ScanError(f"{where}: fewer than 2 axial images; not a volume")
    row, col = main_orient[:3], main_orient[3:]
    normal = np.cross(row, col)
    positions = np.array([np.array(ds.ImagePositionPatient, float) for _, ds in kept])
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
    ps = [float(v) for v in first.PixelSpacing]
    vol = Volume(np.stack(slices).astype(np.float32), positions[0],
                 np.array([ps[1], ps[0], float(gaps.mean())]), np.stack([row, col, normal], axis=1),
                 uid=uid, source=str(Path(kept[0][0]).parent))
    return vol, notes


# ------------------------------------------------------------------------------------
# Annotations and the pipeline
# ------------------------------------------------------------------------------------
ANNOTATION_COLUMNS = ("seriesuid", "coordX", "coordY", "coordZ", "diameter_mm")


def read_annotations(path) -> dict:
    """{seriesuid: [(xyz, diameter_mm), ...]} from a LUNA16-format CSV."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"annotations file {path} not found")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ANNOTATION_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}; expected LUNA16's "
                            f"{','.join(ANNOTATION_COLUMNS)}")
        out = defaultdict(list)
        for n, row in enumerate(reader, start=2):
            try:
                xyz = np.array([float(row["coordX"]), float(row["coordY"]), float(row["coordZ"])])
                out[row["seriesuid"].strip()].append((xyz, float(row["diameter_mm"])))
            except (TypeError, ValueError):
                raise DataError(f"{path}, line {n}: coordinates and diameter must be numbers") from None
    return dict(out)


@dataclass
class Summary:
    scans_read: int = 0
    nodules_written: int = 0
    padded: int = 0
    skipped: list = None

    def __post_init__(self):
        self.skipped = self.skipped or []


def _volumes(dicom: Optional[str], luna: Optional[str], summary: Summary, progress: bool):
    """Yield volumes one by one, recording unusable scans in the summary."""
    from tqdm import tqdm
    if luna:
        paths = sorted(Path(luna).rglob("*.mhd")) + sorted(Path(luna).rglob("*.mha"))
        if not paths:
            raise DataError(f"no .mhd or .mha files under {luna}")
        for p in tqdm(paths, desc="scans", unit="scan", disable=not progress, file=sys.stderr):
            try:
                yield read_metaimage(p)
            except ScanError as e:
                summary.skipped.append(("scan", str(e)))
    else:
        series, skipped = scan_dicom_folder(dicom)
        summary.skipped += [("file", f"{p}: {why}") for p, why in skipped]
        if not series:
            raise DataError(f"no DICOM image series under {dicom}")
        for uid in tqdm(sorted(series), desc="series", unit="series", disable=not progress, file=sys.stderr):
            try:
                vol, notes = read_dicom_series(uid, series[uid])
                summary.skipped += [("note", f"series {uid}: {n}") for n in notes]
                yield vol
            except ScanError as e:
                summary.skipped.append(("scan", str(e)))


def prepare(out, annotations, dicom=None, luna=None, cube=16, spacing_mm=1.0, n_val=256, seed=0,
            window=HU_WINDOW, progress=True) -> Summary:
    """Cut every annotated nodule into a cube and write train/val split by series."""
    if bool(dicom) == bool(luna):
        raise DataError("give exactly one of --dicom DIR or --luna DIR")
    folder = Path(dicom or luna)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder")
    notes = read_annotations(annotations)
    summary = Summary()
    per_series = defaultdict(list)
    seen = set()
    for vol in _volumes(dicom, luna, summary, progress):
        summary.scans_read += 1
        seen.add(vol.uid)
        for xyz, diameter in notes.get(vol.uid, []):
            if not vol.contains(xyz):
                summary.skipped.append(("nodule", f"{vol.uid} at {np.round(xyz, 1).tolist()}: outside the volume"))
                continue
            hu, padded = cut_cube(vol, xyz, cube, spacing_mm)
            summary.padded += padded
            per_series[vol.uid].append((hu_to_unit(hu, window), xyz, diameter))
    for uid in sorted(set(notes) - seen):
        summary.skipped.append(("nodule", f"{len(notes[uid])} annotation(s) of {uid}: no scan with that seriesuid"))
    uids = sorted(per_series)
    total = sum(len(v) for v in per_series.values())
    if total < 2 or len(uids) < 2:
        raise DataError(f"only {total} nodule cube(s) from {len(uids)} scan(s): a train/validation split "
                        f"by scan needs at least 2 scans with nodules")
    val_uids, n = [], 0
    for uid in np.random.default_rng(seed).permutation(uids):
        if n >= min(n_val, total - 1) or len(val_uids) == len(uids) - 1:
            break
        val_uids.append(uid)
        n += len(per_series[uid])

    def split(ids):
        rows = [(uid, *r) for uid in ids for r in per_series[uid]]
        return Split(np.stack([r[1] for r in rows]), np.array([r[0] for r in rows], dtype=object),
                     np.stack([r[2] for r in rows]), np.array([r[3] for r in rows], float))

    train_ids = [u for u in uids if u not in set(val_uids)]
    write_cubes(out, split(train_ids), split(sorted(val_uids)), {
        "cube_size": cube, "ndim": 3, "spacing_mm": spacing_mm, "hu_window": list(window),
        "source": "luna16" if luna else "dicom", "created_by": "python -m deepdensity.data prepare",
        "scans_read": summary.scans_read, "seed": seed,
    })
    summary.nodules_written = total
    return summary


# ------------------------------------------------------------------------------------
# Synthetic scans on disk, for trying the whole path offline
# ------------------------------------------------------------------------------------
def synth_scan(rng: np.random.Generator, shape=(40, 96, 96), spacing=(0.7, 0.7, 1.25), n_nodules: int = 2):
    """A CT-like volume hu[k, j, i] with solid nodules at known voxel positions (i, j, k)."""
    from .data import _smooth
    nk, nj, ni = shape
    hu = -860.0 + 60.0 * _smooth(rng.normal(size=shape), 2.0) * 3.0
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
                       rng: Optional[np.random.Generator] = None) -> None:
    """One CT image file per slice of hu[k, j, i]; with `rng`, shuffled random file names."""
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


def synth_scans(out_dir, n_scans: int = 3, seed: int = 0, fmt: str = "dicom") -> Path:
    """Synthetic CT scans as DICOM series or .mhd/.raw, plus annotations.csv; returns its path."""
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
        if fmt == "dicom":
            write_dicom_series(out_dir / f"scan{s}", hu, origin, spacing, direction[:, 0], direction[:, 1], uid, rng)
        else:
            write_metaimage(out_dir / f"{uid}.mhd", hu, origin, spacing, direction)
        vol = Volume(hu, origin, spacing, direction, uid, "")
        for c, d in zip(centres, diameters):
            x, y, z = vol.index_to_world(c)
            rows.append([uid, f"{x:.3f}", f"{y:.3f}", f"{z:.3f}", f"{d:.2f}"])
    csv_path = out_dir / "annotations.csv"
    with open(csv_path, "w", newline="") as f:
        csv.writer(f).writerows([list(ANNOTATION_COLUMNS)] + rows)
    return csv_path
