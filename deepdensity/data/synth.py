"""Synthetic LUNA-like nodule cubes: lung parenchyma, vessels, chest wall, one nodule of a
LUNA-like kind and size, and correlated CT noise; deterministic for a seed."""

from __future__ import annotations

import sys

import numpy as np

from deepdensity.data.cubes import HU_WINDOW, DataError
from deepdensity.data.writer import Split, check_geometry, hu_to_unit, write_cubes

NODULE_KINDS = ("solid", "part_solid", "ground_glass", "lobulated")
# Rough LUNA16 mix of appearances; solid nodules dominate.
KIND_PROBS = (0.55, 0.2, 0.1, 0.15)

# The data sets the shipped settings name (Config's default, configs/paper.yaml and
# configs/smoke.yaml), as (cubes, validation cubes, seed): made on first use, so that
# `python train.py --mode weak` runs on a fresh clone with no other step.
DEFAULT_DATA = {"data/synth.h5": (2100, 256, 0), "data/smoke.h5": (320, 64, 0)}


def smooth_field(field: np.ndarray, sigma_vox: float) -> np.ndarray:
    """Periodic Gaussian blur through the FFT (fields here are small cubes)."""
    freqs = np.meshgrid(*[np.fft.fftfreq(s) for s in field.shape], indexing="ij")
    k2 = sum(f**2 for f in freqs)
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
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1)  # (G,G,G,3) mm

    hu = -860.0 + rng.normal(0, 15) + 40.0 * smooth_field(rng.normal(size=(size,) * 3), 2.0) * 3.0
    for _ in range(rng.integers(0, 4)):  # vessels
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

    if rng.uniform() < 0.2:  # chest wall
        normal = rng.normal(size=3)
        normal /= np.linalg.norm(normal)
        offset = radius + rng.uniform(0.0, 3.0)
        wall = _soft_inside(-(grid @ normal - offset), 0.0, 0.6)
        hu = hu * (1 - wall) + wall * rng.normal(40, 15)

    noise = smooth_field(rng.normal(size=(size,) * 3), 0.7)
    hu = hu + noise / noise.std() * rng.uniform(20, 45)
    return hu, kind, diameter, centre


def synthesize(
    n: int, n_val: int = 256, seed: int = 0, size: int = 16, spacing_mm: float = 1.0, progress: bool = True
) -> tuple:
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


def write_synthetic(
    path,
    n: int,
    n_val: int,
    seed: int,
    size: int = 16,
    spacing_mm: float = 1.0,
    progress: bool = False,
    created_by: str = "",
) -> tuple:
    """`synthesize` written to `path` in the project's layout, with how it was made (the
    equivalent `data synth` command unless `created_by` names another); returns (train, val)."""
    train, val = synthesize(n, n_val, seed, size, spacing_mm, progress=progress)
    write_cubes(
        path,
        train,
        val,
        {
            "cube_size": size,
            "ndim": 3,
            "spacing_mm": spacing_mm,
            "hu_window": list(HU_WINDOW),
            "source": "synthetic",
            "seed": seed,
            "kinds": list(NODULE_KINDS),
            "kind_probs": list(KIND_PROBS),
            "created_by": created_by
            or f"python -m deepdensity.data synth --n {n} --val {n_val} --seed {seed} "
            f"--cube {size} --spacing {spacing_mm}",
        },
    )
    return train, val
