"""Synthetic CT scans on disk, for trying the whole path offline (`python -m deepdensity.data
synth-scans`): DICOM series with LIDC-style readings, MetaImage or NIfTI volumes, and a
LUNA16-format annotations.csv of the nodules planted in them."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Optional

import numpy as np

from deepdensity.data.cubes import DataError
from deepdensity.data.ingest.annotations import ANNOTATION_COLUMNS
from deepdensity.data.ingest.geometry import Volume
from deepdensity.data.ingest.metaimage_nifti import write_metaimage, write_nifti
from deepdensity.data.lidc import write_xml
from deepdensity.data.synth import smooth_field
from deepdensity.utils.files import check_own_folder, mark_folder


def synth_scan(rng: np.random.Generator, shape=(40, 96, 96), spacing=(0.7, 0.7, 1.25), n_nodules: int = 2):
    """A CT-like volume hu[k, j, i] with solid nodules at known voxel positions (i, j, k)."""
    nk, nj, ni = shape
    hu = -860.0 + 60.0 * smooth_field(rng.normal(size=shape), 2.0) * 3.0
    kk, jj, ii = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    mm = np.stack([ii * spacing[0], jj * spacing[1], kk * spacing[2]], axis=-1)
    centres, diameters = [], []
    for _ in range(n_nodules):
        d = rng.uniform(6.0, 12.0)
        c = np.array(
            [
                rng.uniform(12, ni * spacing[0] - 12),
                rng.uniform(12, nj * spacing[1] - 12),
                rng.uniform(12, nk * spacing[2] - 12),
            ]
        )
        inside = 1.0 / (1.0 + np.exp(np.clip((np.linalg.norm(mm - c, axis=-1) - d / 2) / 0.4, -50, 50)))
        hu = hu + inside * (rng.normal(30, 10) + 860)
        centres.append(c / np.array(spacing))  # continuous (i, j, k)
        diameters.append(d)
    hu = hu + rng.normal(0, 25, shape)
    return hu.astype(np.float32), np.array(centres), np.array(diameters)


def write_dicom_series(
    folder,
    hu: np.ndarray,
    origin,
    spacing,
    row_cos,
    col_cos,
    series_uid: str,
    rng: Optional[np.random.Generator] = None,
) -> list:
    """One CT image file per slice of hu[k, j, i]; with `rng`, shuffled random file names.
    Returns the SOPInstanceUID of each slice k."""
    import pydicom  # here, not on top: 0.3 s that every other data command would pay
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    row_cos, col_cos = np.asarray(row_cos, float), np.asarray(col_cos, float)
    normal = np.cross(row_cos, col_cos)
    study_uid = generate_uid()
    names = [f"IM{i:05d}.dcm" for i in range(hu.shape[0])]
    if rng is not None:
        names = [f"{rng.integers(1 << 40):x}" for _ in names]  # no extension, no order
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
    check_own_folder(out_dir, "--out", "scans")  # its annotations.csv would replace the user's
    mark_folder(out_dir, "scans")
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
            vol.slice_uids = tuple(
                write_dicom_series(
                    out_dir / f"scan{s}", hu, origin, spacing, direction[:, 0], direction[:, 1], uid, rng
                )
            )
            # LIDC-style readings: four radiologists who agree on every nodule
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
