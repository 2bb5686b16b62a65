"""Nodule cubes on disk: the HDF5 layout, its writer and its loader.

HDF5 layout (format "deepdensity-cubes", version 1), written by `synth` and by the
DICOM / LUNA16 ingestion alike:

    /                 attrs: format, format_version, cube_size, ndim, spacing_mm,
                             hu_window (lo, hi), source ("synthetic" | "dicom" | "luna16"),
                             created_by, created_utc, plus source-specific attrs
    /train/cubes      float32 (N, G, G, G), HU windowed to [0, 1] (0 = air)
    /train/seriesuid  utf-8 strings (N,)   scan each cube was cut from
    /train/world_xyz  float64 (N, 3)       nodule centre in world coordinates, mm
    /train/diameter_mm float64 (N,)
    /val/...          the same, for the validation cubes (256 in the paper)


The commands that make such files are in deepdensity/data/cli.py.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import h5py
import numpy as np

from deepdensity.utils.errors import UserError, shell_word, shown
from deepdensity.utils.files import hdf5_atomic

FORMAT = "deepdensity-cubes"
FORMAT_VERSION = 1
HU_AIR, HU_WINDOW = -1000.0, (-1000.0, 400.0)
# Cubes must hold windowed intensities in [0, 1]; this much float rounding is let through.
UNIT_SLACK = 1e-6


class DataError(UserError):
    """Unusable data: reported as one line naming the file and the fix, exit status 2."""


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------
def hu_to_unit(hu: np.ndarray, window=HU_WINDOW) -> np.ndarray:
    lo, hi = window
    return np.clip((hu - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)


@dataclass
class Split:
    cubes: np.ndarray                 # (N, G, G, G) float32
    seriesuid: np.ndarray             # (N,) str
    world_xyz: np.ndarray             # (N, 3) float64
    diameter_mm: np.ndarray           # (N,) float64
    extra: Optional[dict] = None      # more per-cube columns, e.g. the synthetic kind

    def take(self, idx) -> "Split":
        extra = {k: v[idx] for k, v in (self.extra or {}).items()}
        return Split(self.cubes[idx], self.seriesuid[idx], self.world_xyz[idx],
                     self.diameter_mm[idx], extra)


def write_cubes(path, train: Split, val: Split, attrs: dict) -> None:
    """Write the layout above atomically: a crash or a full disk never leaves a half-written file."""
    with hdf5_atomic(path) as f:
        f.attrs.update({
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **attrs,
        })
        for name, split in (("train", train), ("val", val)):
            g = f.create_group(name)
            # an empty split (prepare --val 0) cannot be chunked one cube at a time
            packed = dict(compression="gzip", compression_opts=4, shuffle=True,
                          chunks=(1,) + split.cubes.shape[1:]) if len(split.cubes) else {}
            g.create_dataset("cubes", data=split.cubes.astype(np.float32), **packed)
            g.create_dataset("seriesuid", data=np.asarray(split.seriesuid, dtype=object), dtype=h5py.string_dtype())
            g.create_dataset("world_xyz", data=np.asarray(split.world_xyz, np.float64))
            g.create_dataset("diameter_mm", data=np.asarray(split.diameter_mm, np.float64))
            for k, v in (split.extra or {}).items():
                v = np.asarray(v)
                g.create_dataset(k, data=v.astype(object) if v.dtype.kind == "U" else v,
                                 dtype=h5py.string_dtype() if v.dtype.kind in "UO" else None)


def check_geometry(cube: int, spacing_mm: float, window=None) -> None:
    """The cube size, voxel spacing and HU window a command is asked for, or a DataError."""
    if cube < 4:
        raise DataError(f"--cube must be at least 4, got {cube}")
    if not 0 < spacing_mm < float("inf"):
        raise DataError(f"--spacing must be a finite number of mm > 0, got {spacing_mm}")
    if window is not None and not (-float("inf") < window[0] < window[1] < float("inf")):
        raise DataError(f"--window LO HI needs finite LO < HI (HU), got {list(window)}")



# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------
@dataclass
class Cubes:
    train: np.ndarray     # (N, G, ..., G) float32 in [0, 1]
    val: np.ndarray
    attrs: dict

    @property
    def grid_size(self) -> int:
        return self.train.shape[1]

    @property
    def ndim(self) -> int:
        return self.train.ndim - 1


def load_cubes(path, expect_grid: Optional[int] = None, need: tuple = ("train", "val")) -> Cubes:
    """Read and check a cubes file; every problem is a DataError saying what to do. `need`:
    the splits that must hold cubes (training needs both; encoding one split only that one)."""
    path, name = Path(path), shown(path)       # name: the path as given, a newline seen as one
    make = f"make one with: python -m deepdensity.data synth --out {shell_word(path)}"
    if not path.exists():
        raise DataError(f"data file {name} does not exist; {make} (or set data_path)")
    if not path.is_file() or not h5py.is_hdf5(path):
        raise DataError(f"data file {name} is not an HDF5 file; {make}")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()}
            arrays = {}
            for split in ("train", "val"):
                if split not in f or "cubes" not in f[split]:
                    raise DataError(f"data file {name} has no /{split}/cubes dataset; "
                                    f"it is not in deepdensity's layout ({make})")
                arrays[split] = f[split]["cubes"][...]
    except OSError as e:
        raise DataError(_unreadable(path, e)) from None
    for split, a in arrays.items():
        if a.ndim not in (2, 3, 4) or len(set(a.shape[1:])) != 1:
            raise DataError(f"{name}: /{split}/cubes has shape {a.shape}; expected (N, G, G, G) "
                            f"(or (N, G, G) / (N, G) for 2-D and 1-D data)")
        if a.shape[0] == 0:
            if split in need:
                raise DataError(f"{name}: /{split}/cubes is empty; training needs both splits "
                                f"(was it prepared with --val 0?)")
            continue
        if a.dtype.kind not in "fiu":
            raise DataError(f"{name}: /{split}/cubes holds {a.dtype} values; expected real intensities "
                            f"in [0, 1] (float32)")
        if not np.isfinite(a).all():
            raise DataError(f"{name}: /{split}/cubes holds NaN or inf values; re-create the file")
        lo, hi = float(a.min()), float(a.max())
        if lo < -UNIT_SLACK or hi > 1 + UNIT_SLACK:
            raise DataError(f"{name}: /{split}/cubes holds values in [{lo:g}, {hi:g}], not intensities "
                            f"windowed to [0, 1]{' (raw Hounsfield units?)' if lo <= -100 or hi >= 100 else ''}; "
                            f"cut cubes with `python -m deepdensity.data prepare`, which windows "
                            f"{HU_WINDOW[0]:g}..{HU_WINDOW[1]:g} HU to [0, 1]")
    if arrays["train"].shape[1:] != arrays["val"].shape[1:]:
        raise DataError(f"{name}: train cubes {arrays['train'].shape[1:]} and val cubes "
                        f"{arrays['val'].shape[1:]} differ in shape")
    if expect_grid is not None and arrays["train"].shape[1] != expect_grid:
        raise DataError(f"{name}: cubes are {arrays['train'].shape[1]} voxels wide, the model "
                        f"expects {expect_grid}")
    return Cubes(arrays["train"].astype(np.float32), arrays["val"].astype(np.float32), attrs)


def _unreadable(path: Path, e: OSError) -> str:
    """Why an HDF5 file that exists cannot be read, and what to do (never: write a new file over
    it, which would replace data the user may have prepared from scans)."""
    if "unable to lock file" in str(e) or getattr(e, "errno", None) in (11, 35):
        return (f"data file {shown(path)} is open for writing in another process (HDF5 locks it); wait until that "
                f"process (a synth, prepare or filter still writing it) has finished, then run again")
    return (f"data file {shown(path)} cannot be read ({e}); is it truncated (an interrupted copy)? copy it again, or "
            f"re-create it with the command that made it (its created_by attribute says which)")


def read_columns(path, split: str) -> dict:
    """The per-cube columns beside a split's cubes (seriesuid, world_xyz, diameter_mm, ...),
    those the file has; call after load_cubes has checked the file."""
    with h5py.File(path, "r") as f:
        g = f[split]
        return {k: (g[k].asstr()[...] if h5py.check_string_dtype(g[k].dtype) else g[k][...])
                for k in g if k != "cubes" and isinstance(g[k], h5py.Dataset) and len(g[k].shape) >= 1}


def to_density(cubes: np.ndarray) -> tuple:
    """Scale each cube so its voxels integrate to 1 over [-1, 1]^n (cell volume (2/G)^n).

    Returns (scaled, n_empty): a cube with no mass (all air) becomes the uniform
    density 2^-n instead of dividing by zero, and is counted.
    """
    ndim = cubes.ndim - 1
    cell = (2.0 / cubes.shape[1]) ** ndim
    mass = cubes.reshape(len(cubes), -1).sum(axis=1) * cell
    empty = mass <= 0
    scaled = cubes / np.where(empty, 1.0, mass).reshape((-1,) + (1,) * ndim)
    scaled[empty] = 2.0 ** -ndim
    return scaled.astype(np.float32), int(empty.sum())


def input_independent_loss(train_density: np.ndarray, val_density: np.ndarray) -> float:
    """The validation MSLE (the training loss) of a model that ignores its input and
    renders the training set's mean density for every cube: the level at which a run that
    has learnt nothing about the individual nodule settles (the study's collapse level)."""
    mean = train_density.astype(np.float64).mean(axis=0)
    diff = np.log1p(val_density.astype(np.float64)) - np.log1p(mean)
    return float(np.mean(diff ** 2))
