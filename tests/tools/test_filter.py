"""The data filter (Gahlot et al. 2020): the eps rule, DBSCAN's noise, the files it writes
(validation untouched, the random control's size) and its command line on a trained run."""

import json
import sys

import h5py
import numpy as np
import pytest

from deepdensity.data.cubes import DataError, load_cubes
from deepdensity.tools import filter as filt
from tests.support import ROOT, SMOKE, run


def train_one_epoch(data, out, *extra):
    """A trained run to filter with: the smoke model, one epoch on `data`."""
    run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--set",
            f"data_path={data}",
            "--set",
            "max_epochs=1",
            "--out",
            str(out),
            "--quiet",
            *extra,
        ]
    )


def test_the_knee_is_the_corner_of_a_two_segment_curve():
    flat, steep = np.linspace(0, 1, 81), np.linspace(1, 20, 21)[1:]
    assert filt.knee_index(np.concatenate([flat, steep])) == 80
    assert filt.knee_index(np.full(10, 2.0)) == 9, "no knee: nothing is sparser than the rest"
    with pytest.raises(ValueError):
        filt.knee_index([1.0, 2.0])


def test_k_distances_against_brute_force():
    pts = np.random.default_rng(0).normal(size=(60, 2))
    d = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    brute = np.sort(np.sort(d, axis=1)[:, 2])  # min_samples 4: the 3rd nearest other point
    np.testing.assert_allclose(filt.k_distances(pts, 4), brute, rtol=1e-12)
    with pytest.raises(DataError):
        filt.k_distances(pts[:4], 4)


def test_with_the_knee_eps_the_core_points_are_those_left_of_the_knee():
    from sklearn.cluster import DBSCAN

    rng = np.random.default_rng(1)
    pts = np.concatenate([rng.normal(0, 0.3, (200, 2)), rng.uniform(-6, 6, (20, 2))])
    eps = filt.eps_from_k_distances(pts, 4)
    kd = filt.k_distances(pts, 4)
    core = DBSCAN(eps=eps, min_samples=4).fit(pts).core_sample_indices_
    assert len(core) == int(np.sum(kd <= eps)) >= filt.knee_index(kd) + 1
    assert 200 * 0.9 <= len(core) < 220, "the dense blob is core, the scattered points mostly not"


def test_dbscan_calls_the_scattered_points_noise():
    rng = np.random.default_rng(2)
    blobs = np.concatenate([rng.normal((0, 0), 0.5, (300, 2)), rng.normal((10, 0), 0.5, (300, 2))])
    far = rng.uniform(-40, 50, (30, 2))
    far = far[np.min(np.hypot(*(far[:, None] - np.array([(0, 0), (10, 0)])[None]).transpose(2, 0, 1)), axis=1) > 5]
    labels, eps = filt.noise_points(np.concatenate([blobs, far]))
    assert np.mean(labels[len(blobs) :] == -1) >= 0.9, "the isolated points are noise"
    assert np.mean(labels[: len(blobs)] == -1) <= 0.03, "the dense blobs are not"
    assert len(set(labels[: len(blobs)]) - {-1}) == 2 and eps > 0


def test_random_control_has_the_same_size_and_is_seeded():
    a = filt.random_drop(1844, 37, seed=3)
    assert len(a) == len(set(a)) == 37 and a.min() >= 0 and a.max() < 1844
    np.testing.assert_array_equal(a, filt.random_drop(1844, 37, seed=3))
    assert not np.array_equal(a, filt.random_drop(1844, 37, seed=4))
    with pytest.raises(ValueError):
        filt.random_drop(5, 6, 0)


def test_write_filtered_drops_train_rows_only(tmp_path, smoke_data):
    out = tmp_path / "f.h5"
    dropped = np.array([0, 5, 17, 255])
    filt.write_filtered(smoke_data, out, dropped, {"kind": "network", "n_dropped": 4, "list": [1, 2]})
    with h5py.File(smoke_data, "r") as f, h5py.File(out, "r") as g:
        keep = np.setdiff1d(np.arange(f["train/cubes"].shape[0]), dropped)
        for name in f["train"]:
            np.testing.assert_array_equal(g["train"][name][...], f["train"][name][...][keep], err_msg=name)
        for name in f["val"]:
            np.testing.assert_array_equal(g["val"][name][...], f["val"][name][...], err_msg=name)
        assert g.attrs["filter_kind"] == "network" and json.loads(g.attrs["filter_list"]) == [1, 2]
        assert g.attrs["format"] == f.attrs["format"]
        np.testing.assert_array_equal(g["filter/dropped_index"][...], dropped)
    assert len(load_cubes(out).train) == 252


@pytest.mark.slow
def test_filter_a_trained_run_and_train_on_its_output(tmp_path, smoke_data, smoke_run):
    run_dir = smoke_run
    out = tmp_path / "filtered.h5"
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity.filter",
            "--run",
            str(run_dir),
            "--data",
            str(smoke_data),
            "--out",
            str(out),
        ]
    )
    assert "noise" in proc.stdout
    src, net, rnd = load_cubes(smoke_data), load_cubes(out), load_cubes(tmp_path / "filtered.random.h5")
    with h5py.File(out, "r") as g:
        n_dropped, attrs = int(g.attrs["filter_n_dropped"]), dict(g.attrs)
        dropped = g["filter/dropped_index"][...]
    assert len(net.train) == len(rnd.train) == len(src.train) - n_dropped
    np.testing.assert_array_equal(net.val, src.val)
    np.testing.assert_array_equal(rnd.val, src.val)
    np.testing.assert_array_equal(net.train, np.delete(src.train, dropped, axis=0))
    assert attrs["filter_source"] == str(smoke_data) and attrs["filter_run"] == str(run_dir)
    assert attrs["filter_eps_rule"] == "knee of the k-distance curve" and attrs["filter_dbscan_min_samples"] == 4
    for fig in ("filtered.embedding.png", "filtered.dropped.png"):
        assert (tmp_path / fig).stat().st_size > 0
    train_one_epoch(out, tmp_path / "on_filtered")


@pytest.mark.slow
def test_filter_prepared_scans_keeps_every_per_cube_row_in_step(tmp_path):
    from deepdensity.data import ingest

    scans = tmp_path / "scans"
    csv_path = ingest.synth_scans(scans, n_scans=24, seed=3, fmt="dicom")
    data = tmp_path / "scans.h5"
    run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "prepare",
            "--dicom",
            str(scans),
            "--annotations",
            str(csv_path),
            "--out",
            str(data),
            "--val",
            "8",
        ]
    )
    run_dir = tmp_path / "run"
    train_one_epoch(data, run_dir, "--set", "max_train_cubes=0")
    out = tmp_path / "filtered.h5"
    run(
        [
            sys.executable,
            "-m",
            "deepdensity.filter",
            "--run",
            str(run_dir),
            "--data",
            str(data),
            "--out",
            str(out),
            "--perplexity",
            "10",
        ]
    )
    with h5py.File(data, "r") as f, h5py.File(out, "r") as g:
        dropped = g["filter/dropped_index"][...]
        assert len(dropped) == g.attrs["filter_n_dropped"] and len(f["train/cubes"]) == 40
        for name in ("cubes", "seriesuid", "world_xyz", "diameter_mm"):
            np.testing.assert_array_equal(g[f"train/{name}"][...], np.delete(f[f"train/{name}"][...], dropped, axis=0))
            np.testing.assert_array_equal(g[f"val/{name}"][...], f[f"val/{name}"][...])
    train_one_epoch(out, tmp_path / "on_filtered", "--set", "max_train_cubes=0")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["no_weights", "other_cube_size", "too_small", "overwrite"])
def test_bad_input_is_one_error_line(tmp_path, smoke_data, smoke_run, capsys, case):
    run_dir, data = smoke_run, smoke_data
    if case == "no_weights":
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "config.json").write_text("{}")
        expected = "holds no weights.h5"
    argv = []
    if case == "other_cube_size":
        data = tmp_path / "c8.h5"
        run(
            [
                sys.executable,
                "-m",
                "deepdensity.data",
                "synth",
                "--out",
                str(data),
                "--n",
                "80",
                "--val",
                "16",
                "--cube",
                "8",
            ]
        )
        expected = "does not fit a model of 8^3 cubes"
    elif case == "too_small":
        argv, expected = ["--perplexity", "300"], "too few for t-SNE with perplexity 300"
    elif case == "overwrite":
        expected = "would overwrite the data it filters"
    out = data if case == "overwrite" else tmp_path / "out.h5"
    before = sorted(p.name for p in tmp_path.iterdir())
    status = filt.main(["--run", str(run_dir), "--data", str(data), "--out", str(out), *argv])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing written"
