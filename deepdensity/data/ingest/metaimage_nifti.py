"""MetaImage (.mhd with .raw or .zraw, one-file .mha) and NIfTI (.nii, .nii.gz) volumes, both
read through SimpleITK as LUNA16's own code reads MetaImage, and written for tests and
synth-scans. The geometry SimpleITK gives is described in deepdensity/data/ingest/geometry.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from deepdensity.data.ingest.geometry import ScanError, Volume


def read_metaimage(path) -> Volume:
    """A MetaImage volume (.mhd with its .raw or .zraw, or a one-file .mha) through
    SimpleITK, as LUNA16's own code reads it: the array comes back (z, y, x), and spacing,
    origin and direction (its columns are the index axes' directions) are ITK's."""
    path = Path(path)
    _check_metaimage_fields(path)
    return _read_itk(
        path, "MetaImageIO", "is the data file next to the header, complete and named as its ElementDataFile says?"
    )


def read_nifti(path) -> Volume:
    """A NIfTI-1 or -2 volume (.nii, .nii.gz) through SimpleITK. NIfTI stores RAS world
    coordinates; ITK turns them into its LPS frame, the frame LUNA16's annotations use for
    MetaImage, so one annotations CSV convention serves both. The scaling NIfTI stores
    (scl_slope, scl_inter) is applied, as it is for DICOM's rescale."""
    return _read_itk(
        Path(path), "NiftiImageIO", "is it a complete NIfTI file (an interrupted copy of a .nii.gz is cut short)?"
    )


def read_volume(path) -> Volume:
    """A scan file by its suffix: MetaImage (.mhd, .mha) or NIfTI (.nii, .nii.gz)."""
    return read_nifti(path) if is_nifti(Path(path)) else read_metaimage(path)


def is_nifti(path: Path) -> bool:
    return path.name.endswith((".nii", ".nii.gz"))


def scan_uid(path: Path) -> str:
    """The seriesuid a scan file stands for: its name without .mhd/.mha/.nii/.nii.gz."""
    return path.name.removesuffix(".gz").rsplit(".", 1)[0]


def _read_itk(path: Path, image_io: str, hint: str) -> Volume:
    """One volume through SimpleITK's `image_io`, its geometry and HU checked."""
    import SimpleITK as sitk  # here, not on top: 0.3 s that every other data command would pay

    reader = sitk.ImageFileReader()
    reader.SetImageIO(image_io)
    reader.SetFileName(str(path))
    with _native_output() as said:  # MetaIO explains a failure on stderr, not in its exception
        try:
            reader.ReadImageInformation()
            _check_metaimage_header(path, reader)
            image = reader.Execute()
        except RuntimeError as e:
            image, error = None, e
    if image is None:
        generic = ("MET_Read Failed", "Error parsing file", "Cannot parse file")
        reason = "; ".join(
            " ".join(ln.split()) for ln in said.text.splitlines() if ln.strip() and not any(g in ln for g in generic)
        )
        raise ScanError(f"{path}: SimpleITK cannot read it ({reason or _itk_reason(error)}); {hint}")
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise ScanError(f"{path}: {image.GetNumberOfComponentsPerPixel()} values per voxel; a CT volume has one")
    hu = sitk.GetArrayFromImage(image).astype(np.float32)
    return Volume(
        hu,
        np.array(image.GetOrigin()),
        np.array(image.GetSpacing()),
        np.array(image.GetDirection()).reshape(3, 3),
        uid=scan_uid(path),
        source=str(path),
    )


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
        raise ScanError(
            f"{path}: its Offset {list(reader.GetOrigin())} or TransformMatrix "
            f"{direction.T.reshape(-1).tolist()} is not a position and a rotation"
        )


def _itk_reason(e: RuntimeError) -> str:
    """The useful line of an ITK exception (they run to a dozen lines of C++ context)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln.lower().startswith(("description:", "itk::error")) or "could not" in ln.lower()]
    return (useful or lines or ["unknown error"])[-1].removeprefix("Description:").strip()[:200]


# MetaImage numeric fields and their number of values (for NDims = 3).
_MHD_NUMERIC = {
    "NDims": 1,
    "DimSize": 3,
    "ElementSpacing": 3,
    "Offset": 3,
    "Origin": 3,
    "Position": 3,
    "CenterOfRotation": 3,
    "TransformMatrix": 9,
    "Rotation": 9,
    "Orientation": 9,
}


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
            raise ScanError(
                f"{path}: header field {key} = {value.strip()!r} is not {_MHD_NUMERIC[key]} "
                f"number(s); fix the header or leave the scan out"
            )


class _native_output:
    """Catch what C++ libraries write to the process's stdout and stderr (file descriptors
    1 and 2) while the block runs; the text is in `.text` afterwards."""

    def __enter__(self):
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
    header = (
        f"ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
        f"CompressedData = False\nTransformMatrix = {' '.join(f'{v:.10g}' for v in rows)}\n"
        f"Offset = {' '.join(f'{v:.10g}' for v in origin)}\nCenterOfRotation = 0 0 0\n"
        f"AnatomicalOrientation = RAI\nElementSpacing = {' '.join(f'{v:.10g}' for v in spacing)}\n"
        f"DimSize = {ni} {nj} {nk}\nElementType = MET_SHORT\nElementDataFile = {path.stem}.raw\n"
    )
    path.write_text(header)
    (path.parent / f"{path.stem}.raw").write_bytes(np.round(hu).astype("<i2").tobytes())


def write_nifti(path, hu: np.ndarray, origin, spacing, direction) -> None:
    """Write `hu[k, j, i]` (int16) as NIfTI through SimpleITK, geometry in ITK's frame (for tests and synth)."""
    import SimpleITK as sitk  # here, not on top: see _read_itk

    image = sitk.GetImageFromArray(np.round(hu).astype(np.int16))
    image.SetOrigin([float(v) for v in origin])
    image.SetSpacing([float(v) for v in spacing])
    image.SetDirection([float(v) for v in np.asarray(direction, float).reshape(-1)])
    sitk.WriteImage(image, str(path))
