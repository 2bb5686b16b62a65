"""Nodule cubes on disk: the HDF5 layout, a synthetic LUNA-like generator, and the loader.

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

Command line:
    python -m deepdensity.data synth --out data/synth.h5 --n 2100 --seed 0
    python -m deepdensity.data prepare --luna DIR --annotations annotations.csv --out data/luna.h5
    python -m deepdensity.data prepare --dicom DIR --annotations nodules.csv --out data/lidc.h5
    python -m deepdensity.data synth-scans --out data/scans --n 3 [--format mhd]
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import h5py
import numpy as np

FORMAT = "deepdensity-cubes"
FORMAT_VERSION = 1
HU_AIR, HU_WINDOW = -1000.0, (-1000.0, 400.0)
# Cubes must hold windowed intensities in [0, 1]; this much float rounding is let through.
UNIT_SLACK = 1e-6
NODULE_KINDS = ("solid", "part_solid", "ground_glass", "lobulated")
# Rough LUNA16 mix of appearances; solid nodules dominate.
KIND_PROBS = (0.55, 0.2, 0.1, 0.15)


class DataError(ValueError):
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
    """Write the layout above atomically: a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
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
                g.create_dataset("seriesuid", data=np.asarray(split.seriesuid, dtype=object),
                                 dtype=h5py.string_dtype())
                g.create_dataset("world_xyz", data=np.asarray(split.world_xyz, np.float64))
                g.create_dataset("diameter_mm", data=np.asarray(split.diameter_mm, np.float64))
                for k, v in (split.extra or {}).items():
                    v = np.asarray(v)
                    g.create_dataset(k, data=v.astype(object) if v.dtype.kind == "U" else v,
                                     dtype=h5py.string_dtype() if v.dtype.kind in "UO" else None)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------------------
# Synthetic LUNA-like nodules
# --------------------------------------------------------------------------------------
def _smooth(field: np.ndarray, sigma_vox: float) -> np.ndarray:
    """Periodic Gaussian blur through the FFT (fields here are small cubes)."""
    freqs = np.meshgrid(*[np.fft.fftfreq(s) for s in field.shape], indexing="ij")
    k2 = sum(f ** 2 for f in freqs)
    return np.real(np.fft.ifftn(np.fft.fftn(field) * np.exp(-2 * (np.pi * sigma_vox) ** 2 * k2)))


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.diag(r))


def _soft_inside(dist: np.ndarray, radius: float, edge_mm: float) -> np.ndarray:
    """1 inside, 0 outside, with a partial-volume ramp of width ~edge_mm at the border."""
    return 1.0 / (1.0 + np.exp(np.clip((dist - radius) / edge_mm, -50, 50)))


def synth_cube(rng: np.random.Generator, size: int = 16, spacing_mm: float = 1.0) -> tuple:
    """One synthetic CT cube in HU around a nodule: (hu, kind, diameter_mm, centre_offset_mm).

    Lung parenchyma (about -860 HU, smooth texture), 0-3 vessels, sometimes the chest wall
    (juxta-pleural nodules), one nodule of a LUNA-like kind and size (3 mm to ~0.9 of the
    cube, log-uniform), and correlated CT noise.
    """
    axis = (np.arange(size) - (size - 1) / 2.0) * spacing_mm
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1)      # (G,G,G,3) mm

    hu = -860.0 + rng.normal(0, 15) + 40.0 * _smooth(rng.normal(size=(size,) * 3), 2.0) * 3.0
    for _ in range(rng.integers(0, 4)):                                      # vessels
        p = rng.uniform(-size / 2, size / 2, 3) * spacing_mm
        d = rng.normal(size=3)
        d /= np.linalg.norm(d)
        rel = grid - p
        dist = np.linalg.norm(rel - (rel @ d)[..., None] * d, axis=-1)
        hu = hu + (40.0 + 860.0) * _soft_inside(dist, rng.uniform(0.4, 1.4), 0.3)

    kind = NODULE_KINDS[rng.choice(len(NODULE_KINDS), p=KIND_PROBS)]
    extent = size * spacing_mm
    diameter = float(np.exp(rng.uniform(np.log(3.0), np.log(0.9 * extent))))
    radius = diameter / 2
    centre = rng.uniform(-1.0, 1.0, 3) * spacing_mm
    rot = _random_rotation(rng)
    axes = rng.uniform(0.75, 1.25, 3)

    def ellipsoid_dist(c, scale):
        local = (grid - c) @ rot / (axes * scale)
        return np.linalg.norm(local, axis=-1) * scale

    if kind == "lobulated":
        inside = np.zeros(grid.shape[:-1])
        for _ in range(3):
            c = centre + rng.normal(0, radius * 0.35, 3)
            inside = np.maximum(inside, _soft_inside(ellipsoid_dist(c, 1.0), radius * rng.uniform(0.55, 0.8), 0.4))
        density = inside * (rng.normal(30, 20) + 860)
    else:
        inside = _soft_inside(ellipsoid_dist(centre, 1.0), radius, 0.5)
        if kind == "solid":
            density = inside * (rng.normal(25, 25) + 860)
        elif kind == "ground_glass":
            density = inside * (rng.uniform(-650, -450) + 860)
        else:  # part-solid: ground-glass halo with a solid core
            core = _soft_inside(ellipsoid_dist(centre, 1.0), radius * rng.uniform(0.3, 0.6), 0.4)
            density = inside * (rng.uniform(-600, -450) + 860) + core * (rng.uniform(-450, -400) + 860 + 400)
    hu = hu + density

    if rng.uniform() < 0.2:                                                 # chest wall
        normal = rng.normal(size=3)
        normal /= np.linalg.norm(normal)
        offset = radius + rng.uniform(0.0, 3.0)
        wall = _soft_inside(-(grid @ normal - offset), 0.0, 0.6)
        hu = hu * (1 - wall) + wall * rng.normal(40, 15)

    noise = _smooth(rng.normal(size=(size,) * 3), 0.7)
    hu = hu + noise / noise.std() * rng.uniform(20, 45)
    return hu, kind, diameter, centre


def check_geometry(cube: int, spacing_mm: float, window=None) -> None:
    """The cube size, voxel spacing and HU window a command is asked for, or a DataError."""
    if cube < 4:
        raise DataError(f"--cube must be at least 4, got {cube}")
    if not 0 < spacing_mm < float("inf"):
        raise DataError(f"--spacing must be a finite number of mm > 0, got {spacing_mm}")
    if window is not None and not (-float("inf") < window[0] < window[1] < float("inf")):
        raise DataError(f"--window LO HI needs finite LO < HI (HU), got {list(window)}")


def synthesize(n: int, n_val: int = 256, seed: int = 0, size: int = 16,
               spacing_mm: float = 1.0, progress: bool = True) -> tuple:
    """`n` synthetic cubes split into train and validation. Deterministic for a seed:
    cube i depends only on (seed, i), so a larger n extends a smaller one."""
    if n < 2:
        raise DataError("synth needs --n of at least 2")
    if not 0 < n_val < n:
        raise DataError(f"--val must be between 1 and n - 1 = {n - 1}, got {n_val}")
    check_geometry(size, spacing_mm)
    cubes = np.empty((n, size, size, size), np.float32)
    kinds, diameters, centres = [], np.empty(n), np.empty((n, 3))
    it = range(n)
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc="synth cubes", unit="cube", file=sys.stderr)
    for i in it:
        hu, kind, diameter, centre = synth_cube(np.random.default_rng([seed, i]), size, spacing_mm)
        cubes[i] = hu_to_unit(hu)
        kinds.append(kind)
        diameters[i] = diameter
        # A made-up world position: each synthetic cube is its own "scan".
        centres[i] = centre + np.array([0.0, 0.0, -100.0 - i])
    uids = np.array([f"synthetic.{seed}.{i}" for i in range(n)], dtype=object)
    all_cubes = Split(cubes, uids, centres, diameters, {"kind": np.array(kinds, dtype=object)})
    order = np.random.default_rng([seed, 2**31]).permutation(n)
    return all_cubes.take(np.sort(order[n_val:])), all_cubes.take(np.sort(order[:n_val]))


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


def load_cubes(path, expect_grid: Optional[int] = None) -> Cubes:
    """Read and check a cubes file; every problem is a DataError saying what to do."""
    path = Path(path)
    make = f"make one with: python -m deepdensity.data synth --out {path}"
    if not path.exists():
        raise DataError(f"data file {path} does not exist; {make} (or set data_path)")
    if not path.is_file() or not h5py.is_hdf5(path):
        raise DataError(f"data file {path} is not an HDF5 file; {make}")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()}
            arrays = {}
            for split in ("train", "val"):
                if split not in f or "cubes" not in f[split]:
                    raise DataError(f"data file {path} has no /{split}/cubes dataset; "
                                    f"it is not in deepdensity's layout ({make})")
                arrays[split] = f[split]["cubes"][...]
    except OSError as e:
        raise DataError(f"data file {path} cannot be read ({e}); is it truncated? {make}") from None
    for split, a in arrays.items():
        if a.ndim not in (2, 3, 4) or len(set(a.shape[1:])) != 1:
            raise DataError(f"{path}: /{split}/cubes has shape {a.shape}; expected (N, G, G, G) "
                            f"(or (N, G, G) / (N, G) for 2-D and 1-D data)")
        if a.shape[0] == 0:
            raise DataError(f"{path}: /{split}/cubes is empty; training needs both splits "
                            f"(was it prepared with --val 0?)")
        if a.dtype.kind not in "fiu":
            raise DataError(f"{path}: /{split}/cubes holds {a.dtype} values; expected real intensities "
                            f"in [0, 1] (float32)")
        if not np.isfinite(a).all():
            raise DataError(f"{path}: /{split}/cubes holds NaN or inf values; re-create the file")
        lo, hi = float(a.min()), float(a.max())
        if lo < -UNIT_SLACK or hi > 1 + UNIT_SLACK:
            raise DataError(f"{path}: /{split}/cubes holds values in [{lo:g}, {hi:g}], not intensities "
                            f"windowed to [0, 1]{' (raw Hounsfield units?)' if lo <= -100 or hi >= 100 else ''}; "
                            f"cut cubes with `python -m deepdensity.data prepare`, which windows "
                            f"{HU_WINDOW[0]:g}..{HU_WINDOW[1]:g} HU to [0, 1]")
    if arrays["train"].shape[1:] != arrays["val"].shape[1:]:
        raise DataError(f"{path}: train cubes {arrays['train'].shape[1:]} and val cubes "
                        f"{arrays['val'].shape[1:]} differ in shape")
    if expect_grid is not None and arrays["train"].shape[1] != expect_grid:
        raise DataError(f"{path}: cubes are {arrays['train'].shape[1]} voxels wide, the model "
                        f"expects {expect_grid}")
    return Cubes(arrays["train"].astype(np.float32), arrays["val"].astype(np.float32), attrs)


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


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m deepdensity.data", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("synth", help="write synthetic LUNA-like nodule cubes to HDF5")
    s.add_argument("--out", required=True, help="output .h5 path")
    s.add_argument("--n", type=int, default=2100, help="number of cubes (paper: 2100 nodules)")
    s.add_argument("--val", type=int, default=256, help="validation cubes (paper: 256)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--cube", type=int, default=16, help="cube edge in voxels")
    s.add_argument("--spacing", type=float, default=1.0, help="voxel spacing, mm")
    pr = sub.add_parser("prepare", help="cut nodule cubes from DICOM series or LUNA16 volumes")
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--dicom", help="folder of DICOM files (any names, any order, mixed series)")
    src.add_argument("--luna", help="folder of LUNA16 .mhd/.raw volumes")
    pr.add_argument("--annotations", help="CSV: seriesuid,coordX,coordY,coordZ,diameter_mm (LUNA16's)")
    pr.add_argument("--lidc-xml", action="store_true",
                    help="nodules from LIDC-IDRI's XML readings next to the --dicom series instead of a CSV")
    pr.add_argument("--min-readers", type=int, default=3,
                    help="with --lidc-xml: keep nodules >= 3 mm marked by at least this many readers (LUNA16: 3)")
    pr.add_argument("--out", required=True, help="output .h5 path")
    pr.add_argument("--cube", type=int, default=16, help="cube edge in voxels")
    pr.add_argument("--spacing", type=float, default=1.0, help="isotropic voxel spacing of the cubes, mm")
    pr.add_argument("--val", type=int, default=256, help="validation cubes, whole scans at a time")
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--window", type=float, nargs=2, default=list(HU_WINDOW), metavar=("LO", "HI"),
                    help="HU window mapped to [0, 1]")
    sd = sub.add_parser("synth-scans", help="write synthetic CT scans (DICOM or .mhd) and annotations.csv")
    sd.add_argument("--out", required=True, help="output folder")
    sd.add_argument("--n", type=int, default=3, help="number of scans")
    sd.add_argument("--seed", type=int, default=0)
    sd.add_argument("--format", choices=("dicom", "mhd"), default="dicom")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "prepare":
            from deepdensity.data.ingest import prepare
            summary = prepare(args.out, args.annotations, dicom=args.dicom, luna=args.luna, cube=args.cube,
                              spacing_mm=args.spacing, n_val=args.val, seed=args.seed,
                              window=tuple(args.window), progress=sys.stderr.isatty(),
                              lidc_xml=args.lidc_xml, min_readers=args.min_readers)
            _print_summary(summary, f" -> {args.out}")
        elif args.cmd == "synth-scans":
            from deepdensity.data.ingest import synth_scans
            csv_path = synth_scans(args.out, args.n, args.seed, args.format)
            readings = " (each with an LIDC-style readings.xml)" if args.format == "dicom" else ""
            print(f"wrote {args.n} synthetic {args.format} scan(s){readings} and {csv_path}")
        elif args.cmd == "synth":
            train, val = synthesize(args.n, args.val, args.seed, args.cube, args.spacing,
                                    progress=sys.stderr.isatty())
            write_cubes(args.out, train, val, {
                "cube_size": args.cube, "ndim": 3, "spacing_mm": args.spacing,
                "hu_window": list(HU_WINDOW), "source": "synthetic",
                "created_by": f"python -m deepdensity.data synth --n {args.n} --val {args.val} "
                              f"--seed {args.seed} --cube {args.cube} --spacing {args.spacing}",
                "seed": args.seed, "kinds": list(NODULE_KINDS), "kind_probs": list(KIND_PROBS),
            })
            print(f"wrote {args.out}: {len(train.cubes)} train + {len(val.cubes)} val cubes "
                  f"of {args.cube}^3 (seed {args.seed})")
    except KeyboardInterrupt:
        if args.cmd != "prepare":
            raise
        print(f"interrupted: the scans already cut are kept in {args.out}.partial; run the same command "
              f"again to go on from there", file=sys.stderr)
        return 130
    except (DataError, OSError) as e:
        if getattr(e, "summary", None) is not None:    # what was skipped, and why, before the verdict
            _print_summary(e.summary, "")
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _print_summary(summary, written_to: str) -> None:
    print(f"scans read: {summary.scans_read}; nodules written: {summary.nodules_written} "
          f"({summary.padded} padded with air at the scan's edge){written_to}")
    skipped = [s for s in summary.skipped if s[0] != "note"]
    print(f"skipped: {len(skipped)}")
    for kind, why in summary.skipped:
        print(f"  {kind}: {why}")

