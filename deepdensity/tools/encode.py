"""The mixture a trained model infers for every cube: `python -m deepdensity.encode`.

    python -m deepdensity.encode --run runs/x --data data/luna.h5 --out params.h5 [--density]

For each cube of the data file (both splits, or `--split`), in the output's /train and
/val groups: `latent` (B, l), the encoder's y (eq. 9); `alpha` (B, K); `mu` (B, K, n) and
`cov` (B, K, n, n) in the cube's own coordinates, [-1, 1]^n over the cube's cell centres'
extent, component d along array axis d (cube[z, y, x]: d = 0 is z); where the data file
holds world positions (`world_xyz`, attribute `spacing_mm`, 3-D), also `mu_world_mm`
(B, K, 3) as x, y, z in millimetres and `cov_world_mm2` (B, K, 3, 3) in the same axes;
`seriesuid`; and with `--density` the rendered density (B, G, G, G), which is what
`layers.mixture_density(layers.grid_points(G, n), alpha, mu, cov)` gives back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np

from deepdensity.data.cubes import DataError, load_cubes, read_columns
from deepdensity.utils.args import parser
from deepdensity.utils.errors import command
from deepdensity.utils.files import check_output, hdf5_atomic


def cube_to_world(points: np.ndarray, centre_xyz: np.ndarray, grid_size: int, spacing_mm: float) -> np.ndarray:
    """World x, y, z (mm) of points (..., 3) in cube coordinates (array-axis order z, y, x):
    cell centre u = -1 + (2i + 1) / G lies (i - (G - 1) / 2) * spacing from the cube's centre,
    so one cube unit is G * spacing / 2 mm. `centre_xyz` broadcasts against points[..., 0]."""
    return np.asarray(centre_xyz)[..., None, :] + (grid_size * spacing_mm / 2) * points[..., ::-1]


def cov_to_world(cov: np.ndarray, grid_size: int, spacing_mm: float) -> np.ndarray:
    """Covariances (..., 3, 3) of cube coordinates as mm^2 on the world axes x, y, z."""
    return (grid_size * spacing_mm / 2) ** 2 * cov[..., ::-1, ::-1]


@command
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.encode")
    ap.add_argument("--run", required=True, help="a run folder with weights.h5 and config.json")
    ap.add_argument("--data", required=True, help="cubes in deepdensity's HDF5 layout")
    ap.add_argument("--out", required=True, help="output .h5")
    ap.add_argument("--split", choices=("train", "val", "all"), default="all", help="which split to encode")
    ap.add_argument("--batch", type=int, default=256, help="cubes per forward pass")
    ap.add_argument("--density", action="store_true", help="also store the rendered densities")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = ap.parse_args(argv)
    if args.batch < 1:
        raise DataError("--batch must be >= 1")
    check_output(args.out, [args.data, Path(args.run) / "weights.h5"], args.force, suffix=".h5")
    write_params(args)
    return 0


def write_params(args) -> None:
    # TensorFlow once the flags are read: --help and a refused flag need none
    from deepdensity.tools.trained import TrainedRun

    splits = ("train", "val") if args.split == "all" else (args.split,)
    # only the split asked for must hold cubes: a file prepared with --val 0 encodes its training split
    cubes = load_cubes(args.data, need=() if args.split == "all" else splits)
    if not any(len(getattr(cubes, s)) for s in splits):
        raise DataError(f"{args.data}: no cubes to encode in {' or '.join(splits)}")
    run = TrainedRun(args.run, cubes.grid_size, cubes.ndim)
    world = cubes.ndim == 3 and "spacing_mm" in cubes.attrs
    out = Path(args.out)
    with hdf5_atomic(out) as f:
        f.attrs.update(
            {
                "run": str(args.run),
                "data": str(args.data),
                "n_components": run.cfg.n_components,
                "coordinates": "mu, cov: cube coordinates in [-1, 1]^n, component d along array "
                "axis d; mu_world_mm, cov_world_mm2: world x, y, z in mm",
            }
        )
        for split in splits:
            if not len(getattr(cubes, split)):
                print(f"{split}: empty (prepared with --val 0?), nothing encoded")
                continue
            params, _ = run.encode_cubes(getattr(cubes, split), args.batch, args.density, sys.stderr.isatty())
            columns = read_columns(args.data, split)
            if world and "world_xyz" in columns:
                params["mu_world_mm"] = cube_to_world(
                    params["mu"], columns["world_xyz"], cubes.grid_size, float(cubes.attrs["spacing_mm"])
                )
                params["cov_world_mm2"] = cov_to_world(params["cov"], cubes.grid_size, float(cubes.attrs["spacing_mm"]))
            g = f.create_group(split)
            for k, v in params.items():
                g.create_dataset(k, data=v, compression="gzip" if v.ndim > 2 else None)
            if "seriesuid" in columns:
                g.create_dataset("seriesuid", data=columns["seriesuid"].astype(object), dtype=h5py.string_dtype())
            print(f"{split}: {len(params['alpha'])} cubes encoded")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
