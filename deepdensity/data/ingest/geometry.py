"""A scan as a volume in world space, and a nodule's cube resampled from it.

A volume is an array `hu[k, j, i]` (slice, row, column) with
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

import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from deepdensity.data.cubes import HU_AIR


class ScanError(ValueError):
    """One scan (or file) cannot be used; the message names it and says what to do."""


@dataclass
class Volume:
    hu: np.ndarray  # (nk, nj, ni) float32
    origin: np.ndarray  # (3,) mm, world position of voxel (0, 0, 0)
    spacing: np.ndarray  # (3,) mm along i, j, k
    direction: np.ndarray  # (3, 3) columns: world unit vectors of i, j, k
    uid: str
    source: str
    slice_uids: tuple = ()  # DICOM: SOPInstanceUID of slice k (LIDC's readings name slices so)

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
def cut_cube(vol: Volume, centre_xyz, size: int = 16, spacing_mm: float = 1.0, fill: float = HU_AIR) -> tuple:
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


# A chest CT in HU holds air (-1000) around and in the lungs; a volume whose lowest values stay
# above this was not stored in HU (raw detector values, or intensities normalised to [0, 1]).
AIR_BELOW_HU = -500.0


def check_hu(vol: Volume) -> Volume:
    """`vol`, or ScanError for a volume with no air: its values are not HU, and its cubes
    would be cut in the wrong window without a word (any source: DICOM read with
    --assume-hu, MetaImage and NIfTI carry no tag that says HU)."""
    lowest = float(np.percentile(vol.hu, 0.5)) if vol.hu.size else math.nan
    if not lowest < AIR_BELOW_HU:
        raise ScanError(
            f"{vol.source or vol.uid}: no voxel of air (its lowest values are near {lowest:.4g}, air is -1000 HU): "
            f"its values are not HU; convert it to HU, or leave it out"
        )
    return vol
