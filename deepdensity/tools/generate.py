"""New nodule cubes from a trained model (paper section V: once the model has learnt the
parameters that describe nodules, it can make synthetic ones to augment a small data set).

    python -m deepdensity.generate --run runs/x --data data/luna.h5 --n 1000 --out data/new.h5

Sampling schemes, on the encoder's latent vectors y (eq. 9) of the data file's training
cubes, decoded by the model's own heads and DeepDensity layer:
  interpolate (default)  y = (1 - t) y_a + t y_b for a random pair of training cubes a, b and
                         t ~ U(--t-min, 1 - --t-min): a nodule between two real ones.
  perturb                y = max(0, y_a + --noise * s * z), z ~ N(0, I), s the per-dimension
                         standard deviation of y over the training cubes (y is a ReLU output).
The rendered density is turned back into intensities with the source cubes' own mass (for
interpolation the same mix of the two masses), then clipped to [0, 1] like windowed CT.
The output is in the project's HDF5 layout: /train holds the generated cubes (seriesuid
`generated:<a>` or `generated:<a>+<b>`), /val is the data file's validation split unchanged
(never augmented), so `train.py --set data_path=OUT` trains on it. The scheme, its
parameters, the seed, the run and the source file are the file's attributes; `OUT.png`
shows real cubes next to generated ones. The same seed gives the same file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from deepdensity.data.cubes import DataError, check_regular_data, load_cubes, read_columns
from deepdensity.data.writer import Split, write_cubes
from deepdensity.utils.args import parser
from deepdensity.utils.errors import command
from deepdensity.utils.files import check_output
from deepdensity.utils.machine import check_fits_in_memory
from deepdensity.utils.plots import pyplot, save_figure

SCHEMES = ("interpolate", "perturb")


def latent_draws(
    latents: np.ndarray,
    masses: np.ndarray,
    n: int,
    scheme: str,
    rng: np.random.Generator,
    noise: float = 0.1,
    t_min: float = 0.0,
) -> tuple:
    """(y (n, l), mass (n,), sources [(a, b or None)]): the latent vectors to decode."""
    m = len(latents)
    a = rng.integers(0, m, n)
    if scheme == "interpolate":
        b = (a + rng.integers(1, m, n)) % m if m > 1 else a  # another cube than a
        t = rng.uniform(t_min, 1.0 - t_min, n)[:, None]
        y = (1 - t) * latents[a] + t * latents[b]
        mass = (1 - t[:, 0]) * masses[a] + t[:, 0] * masses[b]
        return y, mass, list(zip(a.tolist(), b.tolist()))
    if scheme == "perturb":
        spread = latents.std(axis=0)
        y = np.maximum(0.0, latents[a] + noise * spread * rng.standard_normal((n, latents.shape[1])))
        return y, masses[a], [(i, None) for i in a.tolist()]
    raise DataError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")


@command
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.generate")
    ap.add_argument("--run", required=True, help="a run folder with weights.h5 and config.json")
    ap.add_argument("--data", required=True, help="the cubes it was trained on (deepdensity HDF5)")
    ap.add_argument("--n", type=int, required=True, help="cubes to generate")
    ap.add_argument("--out", required=True, help="output .h5 (and OUT.png)")
    ap.add_argument(
        "--scheme",
        choices=SCHEMES,
        default="interpolate",
        help="how new latent vectors are drawn from the training cubes' (below)",
    )
    ap.add_argument("--noise", type=float, default=0.1, help="perturb: noise in units of y's spread")
    ap.add_argument("--t-min", type=float, default=0.0, help="interpolate: t in [t_min, 1 - t_min]")
    ap.add_argument("--seed", type=int, default=0, help="the same seed gives the same file")
    ap.add_argument("--batch", type=int, default=256, help="cubes per forward pass of the decoder")
    ap.add_argument("--force", action="store_true", help="replace --out (and OUT.png) if they exist")
    args = ap.parse_args(argv)
    out = check_output(args.out, [args.data, Path(args.run) / "weights.h5"], args.force, suffix=".h5")
    check_output(out.with_suffix(".png"), [args.data], args.force)
    if args.n < 1 or args.batch < 1:
        raise DataError("--n and --batch must be >= 1")
    if not (0 <= args.t_min < 0.5) or not (0 <= args.noise < float("inf")) or args.seed < 0:
        raise DataError("--t-min must be in [0, 0.5), --noise a finite number >= 0, --seed >= 0")
    check_regular_data(args.data)  # before h5py opens it: a FIFO would hold it forever
    voxels = _cube_voxels(args.data)
    if voxels:  # the decoded cubes (float64, density times mass) and their float32 copy, held together
        check_fits_in_memory(
            args.n * voxels * 12,
            f"generate --n {args.n} of {voxels}-voxel cubes",
            lambda have: f"at most about --n {have // (voxels * 12)} fits",
            error=DataError,
        )
    generate(args)
    return 0


def _cube_voxels(path) -> int:
    """Voxels of one cube of a data file, from its metadata (0 when it cannot say: the loader
    then names the problem)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            shape = f["train/cubes"].shape
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return 0
    return int(np.prod(shape[1:])) if shape and len(shape) > 1 else 0


def generate(args) -> None:
    # TensorFlow once the flags are read: --help and a refused flag need none
    import tensorflow as tf

    from deepdensity.tools.trained import TrainedRun, batches

    cubes = load_cubes(args.data)
    run = TrainedRun(args.run, cubes.grid_size, cubes.ndim)
    tf.keras.utils.set_random_seed(args.seed)
    params, masses = run.encode_cubes(cubes.train, args.batch)
    latents = params["latent"]
    y, mass, sources = latent_draws(
        latents, masses, args.n, args.scheme, np.random.default_rng(args.seed), args.noise, args.t_min
    )
    made = []
    for span in batches(args.n, args.batch):
        density = run.decoder(y[span].astype(np.float32), training=False).numpy()[..., 0]
        made.append(np.clip(density * mass[span].reshape((-1,) + (1,) * cubes.ndim), 0.0, 1.0))
    made = np.concatenate(made).astype(np.float32)
    uids = np.array([f"generated:{a}" if b is None else f"generated:{a}+{b}" for a, b in sources], dtype=object)
    train = Split(made, uids, np.full((args.n, 3), np.nan), np.full(args.n, np.nan))
    val_cols = read_columns(args.data, "val")
    val = Split(
        cubes.val,
        val_cols.get("seriesuid", np.array(["?"] * len(cubes.val), dtype=object)),
        val_cols.get("world_xyz", np.full((len(cubes.val), 3), np.nan)),
        val_cols.get("diameter_mm", np.full(len(cubes.val), np.nan)),
    )
    attrs = {k: v for k, v in cubes.attrs.items() if k in ("cube_size", "ndim", "spacing_mm", "hu_window")}
    attrs.update(
        {
            "source": "generated",
            "created_by": "python -m deepdensity.generate",
            "generated_from": str(args.data),
            "run": str(args.run),
            "scheme": args.scheme,
            "noise": args.noise,
            "t_min": args.t_min,
            "seed": args.seed,
            "n": args.n,
            "val_split": "the source file's validation split, unchanged",
        }
    )
    write_cubes(args.out, train, val, attrs)
    figure = Path(f"{Path(args.out).with_suffix('')}.png")
    _figure(figure, cubes.train, made, sources)
    print(
        f"wrote {args.out}: {args.n} generated cubes ({args.scheme}, seed {args.seed}) + "
        f"{len(cubes.val)} validation cubes from {args.data}; {figure}"
    )


def _figure(path: Path, real: np.ndarray, made: np.ndarray, sources: list, shown: int = 6) -> None:
    """Central slices: each generated cube after the real one(s) it came from."""
    plt = pyplot()

    def centre(c):
        return c[c.shape[0] // 2] if c.ndim == 3 else c if c.ndim == 2 else c[None]

    shown = min(shown, len(made))
    fig, axes = plt.subplots(shown, 3, figsize=(5.4, 1.8 * shown), squeeze=False)
    for r in range(shown):
        a, b = sources[r]
        panels = [
            (real[a], f"real {a}"),
            (made[r], "generated"),
            (real[b], f"real {b}") if b is not None else (None, ""),
        ]
        for ax, (img, title) in zip(axes[r], panels):
            ax.axis("off")
            if img is not None:
                ax.imshow(centre(img), cmap="gray", vmin=0, vmax=1)
                ax.set_title(title, fontsize=8)
    save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
