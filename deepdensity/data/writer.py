"""Writing nodule cubes in the layout of deepdensity/data/cubes.py: the splits a command hands
over, the HU window to [0, 1], the geometry it is asked for, and the atomic writer itself."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Optional

import h5py
import numpy as np

from deepdensity.data.cubes import FORMAT, FORMAT_VERSION, HU_WINDOW, DataError
from deepdensity.utils.files import hdf5_atomic


def hu_to_unit(hu: np.ndarray, window=HU_WINDOW) -> np.ndarray:
    lo, hi = window
    return np.clip((hu - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)


@dataclass
class Split:
    cubes: np.ndarray  # (N, G, G, G) float32
    seriesuid: np.ndarray  # (N,) str
    world_xyz: np.ndarray  # (N, 3) float64
    diameter_mm: np.ndarray  # (N,) float64
    extra: Optional[dict] = None  # more per-cube columns, e.g. the synthetic kind

    def take(self, idx) -> "Split":
        extra = {k: v[idx] for k, v in (self.extra or {}).items()}
        return Split(self.cubes[idx], self.seriesuid[idx], self.world_xyz[idx], self.diameter_mm[idx], extra)


def write_cubes(path, train: Split, val: Split, attrs: dict) -> None:
    """Write the layout of cubes.py atomically: a crash or a full disk never leaves a half-written file."""
    with hdf5_atomic(path) as f:
        f.attrs.update(
            {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                **attrs,
            }
        )
        for name, split in (("train", train), ("val", val)):
            g = f.create_group(name)
            # an empty split (prepare --val 0) cannot be chunked one cube at a time
            packed = (
                dict(compression="gzip", compression_opts=4, shuffle=True, chunks=(1,) + split.cubes.shape[1:])
                if len(split.cubes)
                else {}
            )
            g.create_dataset("cubes", data=split.cubes.astype(np.float32), **packed)
            g.create_dataset("seriesuid", data=np.asarray(split.seriesuid, dtype=object), dtype=h5py.string_dtype())
            g.create_dataset("world_xyz", data=np.asarray(split.world_xyz, np.float64))
            g.create_dataset("diameter_mm", data=np.asarray(split.diameter_mm, np.float64))
            for k, v in (split.extra or {}).items():
                v = np.asarray(v)
                g.create_dataset(
                    k,
                    data=v.astype(object) if v.dtype.kind == "U" else v,
                    dtype=h5py.string_dtype() if v.dtype.kind in "UO" else None,
                )


def check_geometry(cube: int, spacing_mm: float, window=None) -> None:
    """The cube size, voxel spacing and HU window a command is asked for, or a DataError."""
    if cube < 4:
        raise DataError(f"--cube must be at least 4, got {cube}")
    if not 0 < spacing_mm < float("inf"):
        raise DataError(f"--spacing must be a finite number of mm > 0, got {spacing_mm}")
    if window is not None and not (-float("inf") < window[0] < window[1] < float("inf")):
        raise DataError(f"--window LO HI needs finite LO < HI (HU), got {list(window)}")
