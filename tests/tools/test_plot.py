"""`deepdensity plot`: passes over the data computed from what each epoch did, the figure
written, and folders that are not runs refused in one line."""

import json

import pytest

from deepdensity.tools import plot


def _run(folder, n_train, rows, target=0.002):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"n_train": n_train, "target_loss": target}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _row(epoch, steps, batch, loss=0.01):
    return {"epoch": epoch, "loss": loss, "val_loss": loss * 1.1, "lr": 1e-3, "steps": steps, "global_batch": batch}


def test_passes_count_samples_seen_over_the_training_set():
    # a weak-scaling epoch at N = 4: 14 steps of 128 on 1844 cubes is 1792 / 1844 of a pass;
    # an adaptive run whose batch grows from 32 to 64 in its second epoch
    assert plot.passes([_row(1, 14, 128), _row(2, 14, 128)], 1844) == pytest.approx([1792 / 1844, 3584 / 1844])
    assert plot.passes([_row(1, 57, 32), _row(2, 28, 64)], 1844) == pytest.approx([1824 / 1844, 3616 / 1844])


def test_plot_draws_runs_at_different_n_and_refuses_what_is_not_a_run(tmp_path, capsys):
    a = _run(tmp_path / "strong", 1844, [_row(e, 57, 32, 0.01 / e) for e in range(1, 5)])
    b = _run(tmp_path / "weak", 1844, [_row(e, 14, 128, 0.01 / e) for e in range(1, 3)])
    out = tmp_path / "curves.png"
    assert plot.main([str(a), str(b), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "2 run(s)" in capsys.readouterr().out
    assert plot.main([str(a), "--out", str(out)]) == 2, "an existing figure is not replaced without --force"
    assert "exists; pass --force" in capsys.readouterr().err
    assert plot.main([str(tmp_path), "--out", str(tmp_path / "x.png")]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    empty = _run(tmp_path / "empty", 1844, [])
    assert plot.main([str(empty), "--out", str(tmp_path / "y.png")]) == 2
    assert "no finished epoch" in capsys.readouterr().err


def test_legends_name_policy_and_workers_and_mixed_data_is_said(tmp_path, capsys):
    settings = {"mode": "weak", "workers": 4, "n_train": 1844, "data_fingerprint": "a"}
    assert plot.run_label("run-7", settings) == "weak N=4 (run-7)"
    assert plot.run_label("run-7", {"n_train": 1844}) == "run-7", "an older config.json keeps its folder name"
    same = {"a": (settings, []), "b": ({**settings, "mode": "strong"}, [])}
    assert plot.data_note(same) == ""
    mixed = {**same, "c": ({**settings, "data_fingerprint": "b"}, [])}
    assert "2 different data sets" in plot.data_note(mixed)
    a = _run(tmp_path / "a", 1844, [_row(1, 57, 32)])
    b = _run(tmp_path / "b", 1000, [_row(1, 31, 32)])
    assert plot.main([str(a), str(b), "--out", str(tmp_path / "c.png")]) == 0
    assert "2 different data sets" in capsys.readouterr().err
