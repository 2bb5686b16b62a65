"""encode and generate on a smoke run: the saved mixture renders back to the model's output,
world coordinates follow prepare's geometry, generation is deterministic and trainable."""

import sys

import h5py
import numpy as np
import pytest

from deepdensity.model.layers import grid_points, mixture_density
from deepdensity.tools import encode, generate
from tests.support import ROOT, SMOKE, run


@pytest.mark.slow
def test_a_file_prepared_with_val_0_encodes_its_training_split(tmp_path, smoke_run, smoke_data, capsys):
    no_val = tmp_path / "no-val.h5"
    with h5py.File(smoke_data) as src, h5py.File(no_val, "w") as dst:
        dst.attrs.update(src.attrs)
        dst.create_dataset("train/cubes", data=src["train/cubes"][:40])
        dst.create_dataset("val/cubes", data=np.zeros((0, 16, 16, 16), np.float32))
    out = tmp_path / "params.h5"
    assert encode.main(["--run", str(smoke_run), "--data", str(no_val), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "train: 40 cubes encoded" in printed and "val: empty" in printed
    with h5py.File(out) as f:
        assert set(f) == {"train"} and f["train/alpha"].shape == (40, 8)
    assert (
        encode.main(["--run", str(smoke_run), "--data", str(no_val), "--out", str(tmp_path / "v.h5"), "--split", "val"])
        == 2
    ), "asking for the empty split is refused in one line"
    assert "val/cubes is empty" in capsys.readouterr().err


@pytest.mark.slow
def test_encoded_mixture_renders_back_to_the_models_output(tmp_path, smoke_run, smoke_data, capsys):
    out = tmp_path / "params.h5"
    assert (
        encode.main(
            ["--run", str(smoke_run), "--data", str(smoke_data), "--out", str(out), "--density", "--batch", "24"]
        )
        == 0
    )
    with h5py.File(out) as f:
        assert set(f) == {"train", "val"} and f.attrs["n_components"] == 8
        g = f["val"]
        alpha, mu, cov, dens = g["alpha"][:], g["mu"][:], g["cov"][:], g["density"][:]
        assert g["latent"].shape == (64, 16) and alpha.shape == (64, 8) and cov.shape == (64, 8, 3, 3)
        assert len(g["seriesuid"]) == 64
        mu_world, world_xyz = g["mu_world_mm"][:], None
    np.testing.assert_allclose(alpha.sum(axis=1), 1.0, rtol=1e-5)
    assert np.all(np.linalg.eigvalsh(cov) > 0)
    again = (
        mixture_density(
            grid_points(16, 3).astype(np.float64),
            alpha.astype(np.float64),
            mu.astype(np.float64),
            cov.astype(np.float64),
        )
        .numpy()
        .reshape(dens.shape)
    )
    np.testing.assert_allclose(again, dens, rtol=2e-3, atol=1e-4 * dens.max())
    with h5py.File(smoke_data) as f:
        world_xyz = f["val/world_xyz"][:]
    np.testing.assert_allclose(mu_world, world_xyz[:, None, :] + 8.0 * mu[..., ::-1], rtol=1e-5)


def test_cube_to_world_follows_the_geometry_prepare_cuts_with():
    G, s, centre = 6, 0.8, np.array([10.0, -20.0, 35.5])
    offsets = (np.arange(G) - (G - 1) / 2) * s  # ingest.cut_cube's voxel offsets
    dz, dy, dx = np.meshgrid(offsets, offsets, offsets, indexing="ij")
    want = centre + np.stack([dx, dy, dz], axis=-1).reshape(-1, 3)
    got = encode.cube_to_world(grid_points(G, 3)[None], centre[None], G, s)[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    cov = np.diag([1.0, 4.0, 9.0])  # variances along z, y, x in cube units
    np.testing.assert_allclose(encode.cov_to_world(cov, G, s), np.diag([9.0, 4.0, 1.0]) * (G * s / 2) ** 2)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["interpolate", "perturb"])
def test_generation_is_deterministic_recorded_and_trainable(tmp_path, smoke_run, smoke_data, scheme):
    def make(name, seed):
        out = tmp_path / name
        assert (
            generate.main(
                [
                    "--run",
                    str(smoke_run),
                    "--data",
                    str(smoke_data),
                    "--n",
                    "40",
                    "--out",
                    str(out),
                    "--scheme",
                    scheme,
                    "--seed",
                    str(seed),
                ]
            )
            == 0
        )
        with h5py.File(out) as f:
            return f["train/cubes"][:], dict(f.attrs), f["val/cubes"][:]

    a, attrs, val = make("a.h5", 3)
    b, _, _ = make("b.h5", 3)
    c, _, _ = make("c.h5", 4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.shape == (40, 16, 16, 16) and a.min() >= 0 and a.max() <= 1 and a.max() > 0
    assert attrs["scheme"] == scheme and attrs["seed"] == 3 and attrs["run"] == str(smoke_run)
    with h5py.File(smoke_data) as f:
        np.testing.assert_array_equal(val, f["val/cubes"][:]), "validation is never augmented"
    assert (tmp_path / "a.png").stat().st_size > 1000
    proc = run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--set",
            f"data_path={tmp_path / 'a.h5'}",
            "--set",
            "max_epochs=1",
            "--set",
            "max_train_cubes=0",
        ]
    )
    assert "epoch    1" in proc.stdout


def test_latent_draws_stay_between_or_near_their_sources():
    rng = np.random.default_rng(0)
    lat, mass = rng.random((10, 4)), rng.random(10) + 1
    y, m, src = generate.latent_draws(lat, mass, 50, "interpolate", np.random.default_rng(1))
    for (a, b), yi, mi in zip(src, y, m):
        assert a != b
        lo, hi = np.minimum(lat[a], lat[b]), np.maximum(lat[a], lat[b])
        assert np.all(yi >= lo - 1e-12) and np.all(yi <= hi + 1e-12)
        assert min(mass[a], mass[b]) - 1e-12 <= mi <= max(mass[a], mass[b]) + 1e-12
    y, m, src = generate.latent_draws(lat, mass, 50, "perturb", np.random.default_rng(1), noise=0.0)
    np.testing.assert_array_equal(y, lat[[a for a, _ in src]])


@pytest.mark.slow
@pytest.mark.parametrize("cli", ["encode", "generate"])
def test_a_run_without_weights_or_data_of_another_size_is_one_error_line(tmp_path, smoke_run, smoke_data, capsys, cli):
    import shutil

    main = encode.main if cli == "encode" else generate.main
    extra = ["--n", "4"] if cli == "generate" else []
    bare = tmp_path / "bare"
    shutil.copytree(smoke_run, bare)
    (bare / "weights.h5").unlink()
    assert main(["--run", str(bare), "--data", str(smoke_data), "--out", str(tmp_path / "o.h5"), *extra]) == 2
    assert "holds no weights.h5" in capsys.readouterr().err
    small = tmp_path / "small.h5"
    with h5py.File(small, "w") as f:
        f["train/cubes"] = np.zeros((4, 8, 8, 8), "f4")
        f["val/cubes"] = np.zeros((2, 8, 8, 8), "f4")
    assert main(["--run", str(smoke_run), "--data", str(small), "--out", str(tmp_path / "o.h5"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "does not fit a model of 8^3 cubes" in err[0]
    assert not (tmp_path / "o.h5").exists()
