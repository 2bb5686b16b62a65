"""Filter a training set for large batches, after Gahlot et al. (2020): `python -m deepdensity.filter`.

    python -m deepdensity.filter --run runs/seq --data data/synth.h5 --out data/filtered.h5

Features of every training cube from a trained run's encoder, reduced with PCA and then
t-SNE to 2-D, clustered with DBSCAN; the cubes DBSCAN calls noise are dropped from the
training split (the validation split is copied untouched). Writes
  OUT             the network-filtered data, in the project's layout, loadable by train.py;
  OUT.random.h5   Gahlot's control: as many training cubes dropped, uniformly at random;
  OUT.embedding.png  the 2-D embedding coloured by cluster, noise in black (their Fig. 3);
  OUT.dropped.png    central slices of the dropped cubes.
Every parameter, the source file, the run and the number of cubes dropped are attributes of
both files (`filter_*`), and /filter/dropped_index lists the dropped cubes' source indices.

Features: the encoder's latent vector y (paper eq. 9). Gahlot et al. take the penultimate
layer of their classifier (the input of its last, fully connected layer); y is this model's
penultimate representation, the code every head of the mixture is computed from, and with
64 numbers it is what the paper's autoencoder itself deems the summary of a cube (the last
convolution's output, 2x2x2x32 = 256 numbers, still carries where in the cube things are).
eps: the knee of the sorted k-distance curve (Ester et al. 1996's k-dist graph; the knee
as the point farthest below the chord from its first to its last point, Satopaa et al.
2011), with k = min_samples - 1 other points so that exactly the points up to the knee are
DBSCAN's core points. min_samples = 4, Ester et al.'s choice for 2-D data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np

from deepdensity.data.cubes import DataError, load_cubes
from deepdensity.utils.args import parser
from deepdensity.utils.errors import command
from deepdensity.utils.files import check_output, hdf5_atomic
from deepdensity.utils.plots import pyplot, save_figure

MIN_SAMPLES = 4  # Ester et al. (1996): MinPts = 4 for 2-D data
PERPLEXITY = 30.0  # t-SNE's usual value (van der Maaten and Hinton 2008; scikit-learn's default)
PCA_COMPONENTS = 50  # t-SNE's usual first reduction


# ------------------------------------------------------------------------------------
# The rules: no TensorFlow
# ------------------------------------------------------------------------------------
def knee_index(curve: np.ndarray) -> int:
    """Index of the knee of an increasing curve: the point farthest below the straight line
    from its first to its last point, both axes scaled to [0, 1] (Kneedle's difference curve)."""
    y = np.asarray(curve, float)
    if y.ndim != 1 or len(y) < 3:
        raise ValueError("a knee needs a curve of at least 3 points")
    span = y[-1] - y[0]
    if span <= 0:
        return len(y) - 1  # flat: no knee, every point is as dense
    x = np.linspace(0.0, 1.0, len(y))
    return int(np.argmax(x - (y - y[0]) / span))


def k_distances(points: np.ndarray, min_samples: int) -> np.ndarray:
    """Each point's distance to its (min_samples - 1)-th nearest other point, sorted ascending:
    a point is a DBSCAN core point (min_samples counting itself) exactly when this is <= eps."""
    from sklearn.neighbors import NearestNeighbors

    if len(points) <= min_samples:
        raise DataError(f"{len(points)} points are too few for DBSCAN with min_samples {min_samples}")
    dist, _ = NearestNeighbors(n_neighbors=min_samples).fit(points).kneighbors(points)
    return np.sort(dist[:, min_samples - 1])  # column 0 is the point itself


def eps_from_k_distances(points: np.ndarray, min_samples: int) -> float:
    """DBSCAN's eps for `points`: the k-distance at the knee of the sorted k-distance curve."""
    kd = k_distances(points, min_samples)
    # a hair above the knee's own distance: DBSCAN's radius query and the k-neighbour query
    # compute distances on different paths, and the knee point itself must count as core
    return float(kd[knee_index(kd)]) * (1 + 1e-9)


def embed(features: np.ndarray, seed: int, perplexity: float = PERPLEXITY) -> np.ndarray:
    """PCA to at most 50 dimensions, then t-SNE to 2-D (scikit-learn), seeded."""
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    n, d = features.shape
    check_perplexity(n, perplexity, "the features")
    reduced = PCA(n_components=min(PCA_COMPONENTS, d, n), random_state=seed).fit_transform(features)
    return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(reduced)


def check_perplexity(n: int, perplexity: float, what: str) -> None:
    """t-SNE weighs each point's neighbours to an effective number of `perplexity`, so it needs
    more points than that (scikit-learn's own condition)."""
    if n <= perplexity:
        raise DataError(
            f"{what}: the training split has {n} cubes, too few for t-SNE with perplexity "
            f"{perplexity:g} (it needs more cubes than its perplexity); use more data or a "
            f"smaller --perplexity"
        )


def noise_points(embedding: np.ndarray, min_samples: int = MIN_SAMPLES) -> tuple:
    """(DBSCAN labels with -1 for noise, eps) on the 2-D embedding, eps by the k-distance knee."""
    from sklearn.cluster import DBSCAN

    eps = eps_from_k_distances(embedding, min_samples)
    return DBSCAN(eps=eps, min_samples=min_samples).fit_predict(embedding), eps


def random_drop(n: int, n_drop: int, seed: int) -> np.ndarray:
    """Gahlot's control: `n_drop` of `n` indices, uniformly at random (sorted)."""
    if not 0 <= n_drop <= n:
        raise ValueError("cannot drop more cubes than there are")
    return np.sort(np.random.default_rng([seed, 7]).choice(n, size=n_drop, replace=False))


# ------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------
def write_filtered(src: Path, dst: Path, dropped: np.ndarray, attrs: dict) -> None:
    """A copy of `src` whose training split lacks the cubes `dropped` (and their rows of every
    other per-cube dataset); the validation split and the attributes are kept, `attrs` added.
    Built in memory and written in one rename: never half a file, and a full disk is one line."""
    with h5py.File(src, "r") as f, hdf5_atomic(dst) as g:
        g.attrs.update(dict(f.attrs))
        g.attrs.update(
            {f"filter_{k}": v if isinstance(v, (int, float, str)) else json.dumps(v) for k, v in attrs.items()}
        )
        n_train = f["train/cubes"].shape[0]
        keep = np.setdiff1d(np.arange(n_train), dropped)
        for split in f:
            if not isinstance(f[split], h5py.Group):
                continue
            out = g.create_group(split)
            for name, ds in f[split].items():
                data = ds[...]
                if split == "train" and data.ndim and data.shape[0] == n_train:
                    data = data[keep]
                packed = (
                    dict(compression="gzip", compression_opts=4, shuffle=True, chunks=(1,) + data.shape[1:])
                    if name == "cubes" and len(data)
                    else {}
                )
                out.create_dataset(name, data=data, dtype=ds.dtype, **packed)
        g.create_dataset("filter/dropped_index", data=np.asarray(dropped, np.int64))


def figure_paths(out: Path) -> list:
    """The filter's figures beside OUT: the embedding, the dropped cubes."""
    return [out.with_suffix(".embedding.png"), out.with_suffix(".dropped.png")]


def _figures(
    out: Path, embedding: np.ndarray, labels: np.ndarray, eps: float, cubes: np.ndarray, dropped: np.ndarray
) -> list:
    plt = pyplot()

    paths = figure_paths(out)
    fig, ax = plt.subplots(figsize=(6, 5.4))
    clusters = sorted(set(labels) - {-1})
    cmap = plt.get_cmap("tab20")
    for i, c in enumerate(clusters):
        pts = embedding[labels == c]
        ax.scatter(pts[:, 0], pts[:, 1], s=4, color=cmap(i % 20))
    noise = embedding[labels == -1]
    ax.scatter(noise[:, 0], noise[:, 1], s=10, color="black", label=f"noise: {len(noise)} cubes dropped")
    ax.set(
        title=f"t-SNE of the encoder's y: {len(clusters)} DBSCAN clusters (eps {eps:.3g})",
        xlabel="t-SNE 1",
        ylabel="t-SNE 2",
    )
    ax.legend(loc="best", fontsize=8)
    save_figure(fig, paths[0])

    shown = dropped[:64]
    cols = 8
    rows = max(1, -(-len(shown) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.1, rows * 1.2 + 0.4), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, i in zip(axes.ravel(), shown):
        cube = cubes[i]
        ax.imshow(cube[cube.shape[0] // 2] if cube.ndim == 3 else np.atleast_2d(cube), cmap="gray", vmin=0, vmax=1)
        ax.set_title(str(i), fontsize=6)
    fig.suptitle(f"central slices of the dropped training cubes ({len(shown)} of {len(dropped)} shown)", fontsize=9)
    save_figure(fig, paths[1])
    return paths


# ------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------
@command
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.filter")
    ap.add_argument("--run", required=True, help="a trained run folder (weights.h5, config.json)")
    ap.add_argument("--data", required=True, help="the HDF5 data file the run was trained on")
    ap.add_argument("--out", required=True, help="the filtered file (its random control goes beside it)")
    ap.add_argument("--seed", type=int, default=0, help="seeds PCA, t-SNE and the random control")
    ap.add_argument("--min-samples", type=int, default=MIN_SAMPLES, help="DBSCAN's min_samples (Ester et al.: 4)")
    ap.add_argument("--perplexity", type=float, default=PERPLEXITY, help="t-SNE's perplexity")
    ap.add_argument("--batch", type=int, default=256, help="cubes per forward pass of the encoder")
    ap.add_argument("--force", action="store_true", help="replace --out and its random control if they exist")
    args = ap.parse_args(argv)
    print(run_filter(args))
    return 0


def run_filter(args) -> str:
    data, out = Path(args.data), Path(args.out)
    if args.min_samples < 2 or args.batch < 1 or not 0 < args.perplexity < float("inf") or not 0 <= args.seed < 2**32:
        raise DataError(
            "--min-samples must be >= 2, --batch >= 1, --perplexity a positive number and --seed in [0, 2^32)"
        )
    if out.suffix != ".h5":
        raise DataError(f"--out {out} must end in .h5 (the random control is written as OUT.random.h5)")
    if out.resolve() == data.resolve() or out.with_suffix(".random.h5").resolve() == data.resolve():
        raise DataError(f"--out {out} would overwrite the data it filters; choose another name")
    # the figures too: a user's OUT.embedding.png is theirs until --force says otherwise
    for path in (out, out.with_suffix(".random.h5"), *figure_paths(out)):
        check_output(path, [data], getattr(args, "force", False))
    cubes = load_cubes(data)
    n = len(cubes.train)
    check_perplexity(n, args.perplexity, str(data))
    # TensorFlow once the data and the flags are checked: --help and bad input need none
    from deepdensity.tools.trained import TrainedRun

    run = TrainedRun(args.run, cubes.train.shape[1], cubes.train.ndim - 1)
    params, _ = run.encode_cubes(cubes.train, args.batch, progress=sys.stderr.isatty())
    embedding = embed(params["latent"].astype(np.float64), args.seed, args.perplexity)
    labels, eps = noise_points(embedding, args.min_samples)
    dropped = np.flatnonzero(labels == -1)
    clusters = len(set(labels.tolist()) - {-1})
    common = {
        "source": str(data),
        "run": str(args.run),
        "features": "latent y (encoder, eq. 9)",
        "pca_components": min(PCA_COMPONENTS, params["latent"].shape[1], n),
        "tsne_perplexity": args.perplexity,
        "dbscan_min_samples": args.min_samples,
        "dbscan_eps": eps,
        "eps_rule": "knee of the k-distance curve",
        "seed": args.seed,
        "n_train_before": n,
        "n_dropped": int(len(dropped)),
        "clusters": clusters,
    }
    write_filtered(data, out, dropped, {**common, "kind": "network"})
    control = random_drop(n, len(dropped), args.seed)
    write_filtered(data, out.with_suffix(".random.h5"), control, {**common, "kind": "random"})
    figs = _figures(out, embedding, labels, eps, cubes.train, dropped)
    return (
        f"{n} training cubes: {clusters} clusters, {len(dropped)} noise ({100 * len(dropped) / n:.1f} %, "
        f"eps {eps:.4g}) dropped -> {out} ({n - len(dropped)} train, {len(cubes.val)} val untouched); "
        f"random control -> {out.with_suffix('.random.h5')}; figures {figs[0].name}, {figs[1].name}"
    )


if __name__ == "__main__":
    sys.exit(main())
