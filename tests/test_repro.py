"""The study's bookkeeping on hand-made tables: efficiency per mode, and the claims' verdicts."""
import math

import pytest

from deepdensity import repro
from deepdensity.repro import Cell, efficiency_table, evaluate_claims, load_study

W = [1, 2, 4, 8, 16, 32]


def cell(mode, n, t, seed=0):
    reached = t is not None
    return Cell(mode, n, seed, "reached_target" if reached else "max_epochs", 10, 10 if reached else None,
                1.0, "modelled", t, f"{mode}-n{n}")


def papers_outcome():
    """A table shaped like the paper's Fig. 2: strong fastest; weak slow; warmup to 4; linear never."""
    cells = []
    for n in W:
        cells.append(cell("strong", n, 100.0 / n ** 0.8))
        cells.append(cell("weak", n, 100.0 * n ** 0.5 if n > 1 else 100.0))
        cells.append(cell("warmup", n, 100.0 if n <= 4 else None))
        cells.append(cell("linear", n, 100.0 if n == 1 else None))
    return cells


def test_the_papers_outcome_reproduces_every_claim():
    claims = evaluate_claims(papers_outcome(), W, seq_2eta_reached=False)
    assert len(claims) == 6
    assert [c["verdict"] for c in claims] == ["reproduced"] * 6, claims


def test_each_claim_can_fail():
    cells = papers_outcome()
    # strong fails at 32, linear reaches at 2, warmup reaches at 8, weak at 16 does not converge
    cells = [c for c in cells if not (c.n == 32 and c.mode == "strong")] + [cell("strong", 32, None)]
    cells = [c for c in cells if not (c.n == 2 and c.mode == "linear")] + [cell("linear", 2, 1.0)]
    cells = [c for c in cells if not (c.n == 8 and c.mode == "warmup")] + [cell("warmup", 8, 500.0)]
    cells = [c for c in cells if not (c.n == 16 and c.mode == "weak")] + [cell("weak", 16, None)]
    claims = {c["claim"]: c for c in evaluate_claims(cells, W, seq_2eta_reached=True)}
    assert all(c["verdict"] == "not reproduced" for c in claims.values()), claims
    assert "failed at N = 4, 8, 16, 32" in claims["The linear scaling rule fails at every N > 1"]["ours"]
    # linear at N=2 was fastest, so strong is not the fastest everywhere
    assert "2" not in claims["Strong scaling is the fastest at every N"]["ours"].split("= ")[1].split(", ")


def test_efficiency_table_uses_median_over_seeds_and_nan_for_failures():
    cells = [cell("strong", 1, 100.0), cell("strong", 1, 120.0, seed=1), cell("strong", 1, 80.0, seed=2),
             cell("strong", 2, 50.0), cell("strong", 2, 60.0, seed=1), cell("strong", 2, 40.0, seed=2),
             cell("weak", 2, 100.0), cell("weak", 2, None, seed=1)]
    eff = efficiency_table(cells, ["strong", "weak"], [1, 2])
    assert eff["strong"][1] == pytest.approx(100.0)
    assert eff["strong"][2] == pytest.approx(100.0 * 100.0 / (2 * 50.0))
    assert math.isnan(eff["weak"][2]), "a seed that did not reach the target makes the cell NaN"


def test_paper_tables_are_the_papers():
    assert list(repro.PAPER_TABLE1.values()) == [100.00, 105.17, 86.81, 90.09, 58.08, 46.25]
    assert list(repro.PAPER_TABLE2["weak"].values()) == [100.00, 96.96, 63.86, 42.32, 19.65, 9.45]
    assert [v for v in repro.PAPER_TABLE2["warmup"].values() if not math.isnan(v)] == [100.00, 84.95, 75.49]


def test_presets_load_and_bad_presets_are_clear(tmp_path):
    for name in ("default", "paper"):
        _, study = load_study(name)
        assert study.workers == W and set(study.modes) == {"strong", "weak", "linear", "warmup"}
    with pytest.raises(repro.StudyError, match="no study preset 'nope'"):
        load_study("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers: [2, 4]\n")
    with pytest.raises(repro.StudyError, match="must include 1"):
        load_study(str(bad))
    bad.write_text("wokers: [1]\n")
    with pytest.raises(repro.StudyError, match="unknown study keys"):
        load_study(str(bad))


def test_a_tiny_study_runs_end_to_end_and_skips_finished_runs(tmp_path):
    import json
    import sys

    from conftest import run
    preset = tmp_path / "tiny.yaml"
    preset.write_text("data: {n: 96, val: 32, seed: 0}\n"
                      "train: {n_components: 4, conv_filters: [4, 4, 4], latent_dim: 8}\n"
                      "calibration_epochs: 2\ntarget_loss: null\nworkers: [1, 2]\n"
                      "modes: [strong, weak, linear, warmup]\nseeds: [0]\nlr_sweep: [1]\n")
    args = [sys.executable, "-m", "deepdensity.repro", "--preset", str(preset),
            "--runs", str(tmp_path / "runs"), "--reports", str(tmp_path / "reports")]
    first = run(args)
    assert "[5/5]" in first.stdout and "target: val_loss" in first.stdout
    reports = tmp_path / "reports"
    for name in ("table1.md", "table1.csv", "table2.md", "table2.csv", "REPORT.md",
                 "fig1.png", "fig2.png", "fig4.png", "fig5.png"):
        assert (reports / name).stat().st_size > 0, name
    cells = json.loads((reports / "cells.json").read_text())
    assert {(c["mode"], c["n"]) for c in cells} == {(m, n) for m in ("strong", "weak", "linear", "warmup")
                                                    for n in (1, 2)}
    seq = next(c for c in cells if c["mode"] == "strong" and c["n"] == 1)
    assert seq["epochs_to_target"] == 2 and seq["time_source"] == "measured"
    assert all(c["time_source"] == "modelled" for c in cells if c["n"] == 2)
    table1 = (reports / "table1.csv").read_text().splitlines()
    assert table1[1].endswith("100.00,100.00") and "105.17" in table1[2]
    second = run(args)
    assert second.stdout.count("finished earlier, skipped") == 5, "sequential, 3 modes at N=2, 2 x eta"
