"""The study's bookkeeping on hand-made tables: efficiency per mode, and the claims' verdicts."""
import dataclasses
import math

import pytest

from deepdensity.study.cells import Cell, efficiency_table, failure_groups, failure_margins, failures
from deepdensity.study.paper import PAPER_TABLE1, PAPER_TABLE2
from deepdensity.study.errors import StudyError
from deepdensity.study.preset import load_study
from deepdensity.study.protocol_text import protocol_rows

W = [1, 2, 4, 8, 16, 32]


COLLAPSE = 0.5          # the collapse level of these hand-made studies: a failed run ends above it


def cell(mode, n, t, seed=0, slow=False):
    """A cell that reached the target after `t` epochs (its time to target too), or,
    with t None, failed (ended above the collapse level) or, `slow`, missed it below that level."""
    reached = t is not None
    status = "reached_target" if reached else "max_epochs" if slow else "stalled"
    final = 0.01 if reached else 0.1 if slow else 1.0
    return Cell(mode, n, seed, status, 10, t, 1.0, "modelled", t, f"{mode}-n{n}", final)


SEEDS = tuple(range(6))


def papers_outcome(seeds=SEEDS):
    """A table shaped like the paper's Fig. 2 (epochs to target differ a little by seed):
    strong fastest; weak slow; warmup to 4; linear never."""
    cells = []
    for n in W:
        for s in seeds:
            jitter = 1 + s / 100
            cells.append(cell("strong", n, jitter * 100.0 / n ** 0.8, s))
            cells.append(cell("weak", n, jitter * (100.0 * n ** 0.5 if n > 1 else 100.0), s))
            cells.append(cell("warmup", n, jitter * 150.0 if n <= 4 else None, s))
            cells.append(cell("linear", n, jitter * 100.0 if n == 1 else None, s))
    return cells


def test_efficiency_table_uses_median_over_seeds_and_nan_for_failures():
    cells = [cell("strong", 1, 100.0), cell("strong", 1, 120.0, seed=1), cell("strong", 1, 80.0, seed=2),
             cell("strong", 2, 50.0), cell("strong", 2, 60.0, seed=1), cell("strong", 2, 40.0, seed=2),
             cell("weak", 2, 100.0), cell("weak", 2, None, seed=1)]
    eff = efficiency_table(cells, ["strong", "weak"], [1, 2])
    assert eff["strong"][1] == pytest.approx(100.0)
    assert eff["strong"][2] == pytest.approx(100.0 * 100.0 / (2 * 50.0))
    assert math.isnan(eff["weak"][2]), "a seed that did not reach the target makes the cell NaN"


def test_paper_tables_are_the_papers():
    assert list(PAPER_TABLE1.values()) == [100.00, 105.17, 86.81, 90.09, 58.08, 46.25]
    assert list(PAPER_TABLE2["weak"].values()) == [100.00, 96.96, 63.86, 42.32, 19.65, 9.45]
    assert [v for v in PAPER_TABLE2["warmup"].values() if not math.isnan(v)] == [100.00, 84.95, 75.49]


def test_presets_load_and_bad_presets_are_clear(tmp_path):
    for name in ("default", "paper", "literal-eta"):
        _, study = load_study(name)
        assert study.workers == W and set(study.modes) == {"strong", "weak", "linear", "warmup"}
        assert study.train["epoch_definition"] == "per_worker" and study.train["stall_patience"] > 0
        assert len(study.seeds) >= 2 and study.data == {"n": 2100, "val": 256, "seed": 0}
    assert load_study("default")[1].base_lr == "edge" and load_study("literal-eta")[1].base_lr == 0.00105
    with pytest.raises(StudyError, match="no study preset 'nope'"):
        load_study("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers: [2, 4]\n")
    with pytest.raises(StudyError, match="must include 1"):
        load_study(str(bad))
    bad.write_text("wokers: [1]\n")
    with pytest.raises(StudyError, match=r"unknown study key .wokers. \(did you mean workers\?\)"):
        load_study(str(bad))
    for text, message in (("base_lr: fast\n", "base_lr must be 'edge', 'default_study' or a positive number"),
                          ("base_lr: -1\n", "base_lr must be"),
                          ("mode_workers: {weak: [1, 3]}\n", "mode_workers.weak"),
                          ("mode_workers: [1]\n", "mode_workers must map")):
        bad.write_text(text)
        with pytest.raises(StudyError, match=message):
            load_study(str(bad))
    bad.write_bytes("# étude\nseeds: [0]\n".encode("latin-1"))
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    with pytest.raises(StudyError, match="empty.yaml is empty"):
        load_study(str(empty))
    twice = tmp_path / "twice.yaml"
    twice.write_text("seeds: [0, 1, 2]\nworkers: [1, 2]\nseeds: [3]\n")
    with pytest.raises(StudyError, match="line 3, column 1: key 'seeds' is given twice"):
        load_study(str(twice))
    with pytest.raises(StudyError, match="study preset .* is not UTF-8 text"):
        load_study(str(bad))
    bad.write_text("1: [0]\n")
    with pytest.raises(StudyError, match="key 1 is not a setting name"):
        load_study(str(bad))


@pytest.mark.slow
def test_a_tiny_study_runs_end_to_end_and_skips_finished_runs(tmp_path):
    import json
    import sys

    from deepdensity.study import rerender
    from tests.support import run
    preset = tmp_path / "tiny.yaml"
    preset.write_text("data: {n: 96, val: 32, seed: 0}\n"
                      "calibration_epochs: 2\ntarget_loss: null\nworkers: [1, 2]\n"
                      "modes: [strong, weak, linear, warmup]\nseeds: [0, 1]\nbase_lr: 0.00105\n"
                      "max_seeds: 3\nbudget_minutes: 30\nreal_strong: [2]\ncalibration_seeds: [7]\nisa_check: auto\n"
                      "train: {n_components: 4, conv_filters: [4, 4, 4], latent_dim: 8, validate_every_pass: true}\n")
    args = [sys.executable, "-m", "deepdensity.repro", "--preset", str(preset),
            "--runs", str(tmp_path / "runs"), "--reports", str(tmp_path / "reports")]
    # the timeouts guard against a hang, they time nothing: alone on 2 cores the study takes
    # minutes, beside other work it took over 10
    first = run(args, timeout=1800)
    assert "target: val_loss" in first.stdout
    reports = tmp_path / "reports"
    for name in ("table1.md", "table1.csv", "table2.md", "table2.csv", "REPORT.md", "claims.json", "study.json",
                 "fig1.png", "fig2.png", "fig4.png", "fig5.png", "fig_efficiency.png", "fig_collapse.png"):
        assert (reports / name).stat().st_size > 0, name
    record = json.loads((reports / "study.json").read_text())
    cells = record["cells"]
    assert {(c["mode"], c["n"]) for c in cells} == {(m, n) for m in ("strong", "weak", "linear", "warmup")
                                                    for n in (1, 2)}
    # two first seeds leave every unanimous cell unsettled: the design gives each a third
    assert {c["seed"] for c in cells} == {0, 1, 2}
    extra = [r for r in record["seed_reasons"] if r["seed"] == 2]
    assert extra and all(r["why"] != "first seeds of the preset" for r in extra)
    strong2 = next(c for c in cells if c["mode"] == "strong" and c["n"] == 2 and c["seed"] == 0)
    assert strong2["run"] == "seq-s0", "strong N = 2 is read off the sequential run"
    assert all(c["time_source"] == "modelled" for c in cells), "one model for every N"
    timing = record["timing"]
    assert set(timing["real_epoch_seconds"]) == {"1", "2", "4"} and timing["compute_scale"] > 0
    text = (reports / "REPORT.md").read_text()
    assert "## Decision rules" in text and "## Seeds run, and why" in text and "oneDNN ISA" in text
    assert "| 2 | " in text.split("## The clock")[1].split("## Table I")[0], "real -np 2 beside the model"
    # strong scaling run for real at N = 2 follows the sequential path: the same passes to target
    real = record["real_strong"]
    assert [(r["n"], r["seed"]) for r in real] == [(2, 0)] and real[0]["passes_to_target"] is not None
    # the same path up to the order in which two workers' part gradients are summed: measured
    # losses agree to 5e-4 (tests/training/test_horovod.py), which can move a crossing by a pass
    assert abs(real[0]["passes_to_target"] - real[0]["sequential_passes"]) <= 1, real
    # the controller its ranks ran under, as the run recorded it, is named in the report
    assert real[0]["controller"] in ("gloo", "mpi") and f"| {real[0]['controller']} (" in text, real
    # seed 0 of every trained unit again under the instruction set below this machine's
    check = record["isa_check"]
    assert check["seed"] == 0 and check["isa"] in ("AVX2", "SSE41")
    prefix = f"isa-{check['isa'].lower()}-"
    assert {c["run"] for c in check["cells"] if c["seed"] == 0} == {prefix + name for name in (
        "seq-s0", "weak-n2-s0", "linear-n2-s0", "warmup-n2-s0")}
    assert f"capped at {check['isa']}" in text and "cells had the same outcome" in text
    assert record["calibration"]["source"] == "calibration seeds" and record["calibration"]["seeds"] == [7]
    assert "median of what the sequential runs of calibration seeds 7" in text
    table1 = (reports / "table1.csv").read_text().splitlines()
    assert table1[1].endswith("100.00,100.00") and "105.17" in table1[2]
    assert rerender.main(["--from", str(reports), "--check"]) == 0
    second = run(args)
    assert "[run " not in second.stdout, "every run finished earlier is reused"
    assert "trained 0 run(s)" in (reports / "REPORT.md").read_text()

    # The beyond modes, with the same eta and target: the paper's other modes come from above.
    beyond = tmp_path / "beyond.yaml"
    beyond.write_text(preset.read_text().replace("[strong, weak, linear, warmup]", "[strong, adaptive, local]")
                      .replace("base_lr: 0.00105", "base_lr: default_study")     # eta from the study above
                      + "mode_workers: {adaptive: [1, 2], local: [1, 2]}\n"
                      + "filter_modes: [weak]\nbatch_sweep: [16, 32, 64]\n")
    out = tmp_path / "beyond_reports"
    run([sys.executable, "-m", "deepdensity.repro", "--preset", str(beyond), "--runs", str(tmp_path / "runs"),
         "--reports", str(out), "--compare-with", str(reports)], timeout=1800)
    for name in ("REPORT.md", "time_to_target.md", "time_to_target.csv", "fig2.png", "fig_passes.png",
                 "answers.json", "study.json"):
        assert (out / name).stat().st_size > 0, name
    text = (out / "REPORT.md").read_text()
    assert "## The answer" in text and any(a in text for a in ("Yes:", "No:", "No answer: too few seeds"))
    header = next(line for line in (out / "time_to_target.md").read_text().splitlines() if line.startswith("|"))
    assert all(m in header for m in ("strong", "weak", "linear", "warmup", "local")), header
    # adaptive is tabulated only where its test fired (docs/beyond.md); otherwise the report says why not
    assert ("adaptive" in header) != ("adaptive: not exercised" in text), header
    b_cells = json.loads((out / "study.json").read_text())["cells"]
    assert {(c["mode"], c["n"]) for c in b_cells} == {(m, n) for m in ("strong", "adaptive", "local") for n in (1, 2)}
    assert "## Filtering the data for large batches" in text and "## Batch size against time to target" in text
    filtering = json.loads((out / "filtering.json").read_text())
    assert sorted((r["data"], r["seed"]) for r in filtering["runs"]) == [(d, s) for d in ("full", "network", "random")
                                                                          for s in (0, 1)]
    assert {r["n"] for r in filtering["runs"]} == {2} and filtering["filter"]["n_train_before"] == 64
    sweep = json.loads((out / "batch_sweep.json").read_text())
    seeds = sorted({r["seed"] for r in sweep})
    assert len(seeds) > 1, "every seed of the study, not the first alone"
    assert sorted((r["batch"], r["lr_rule"], r["seed"]) for r in sweep) == \
        [(b, rule, s) for b in (16, 32, 64) for rule in ("eta", "linear") for s in seeds]
    assert next(r for r in sweep if r["batch"] == 64 and r["lr_rule"] == "linear")["lr"] == pytest.approx(0.0021)
    for name in ("fig8.png", "fig9.png", "filter.embedding.png"):
        assert (out / name).stat().st_size > 0, name
    b_record = json.loads((out / "study.json").read_text())
    assert b_record["kind"] == "beyond" and b_record["target"] == pytest.approx(
        json.loads((reports / "study.json").read_text())["target"], rel=1e-9), "the same calibrated target"
    assert set(b_record["run_rows"]) == {c["run"] for c in b_cells if c["n"] > 1 and c["mode"] != "strong"}
    # the compute the report states covers the filter's and the sweep's own runs too, read off their folders
    # (the runs folder also holds the default study's runs above: only the beyond record's own count)
    own = {r["run"] for r in b_record["filtering"]["rows"] + b_record["batch_sweep"] if not r["run"].startswith("(")}
    own |= {c["run"] for c in b_cells}
    seconds = sum(json.loads((tmp_path / "runs" / r / "result.json").read_text())["seconds"] for r in own)
    cells = sum(json.loads((tmp_path / "runs" / r / "result.json").read_text())["seconds"] for r in
                {c["run"] for c in b_cells})
    assert b_record["provenance"]["runs_minutes"] >= round(seconds / 60, 1) and seconds > cells
    assert rerender.main(["--from", str(out), "--check"]) == 0, "the beyond reports render from their record alone"


def test_failure_groups_by_global_batch_and_lr():
    cells = [c for c in papers_outcome() if c.n <= 4]
    groups = failure_groups(cells, [{"status": "stalled"}, {"status": "reached_target"}], 32)
    by_key = {(b, lr, sched): (modes, runs, missed) for b, lr, sched, modes, runs, missed in groups}
    assert by_key[(32, 1.0, "constant")] == (["strong"], 6, 0), "N = 1 is the sequential run, counted once a seed"
    assert by_key[(32, 2.0, "constant")] == (["2 x eta"], 2, 1)
    assert by_key[(64, 2.0, "constant")] == (["linear"], 6, 6) and by_key[(64, 2.0, "warmup")] == (["warmup"], 6, 0)
    assert by_key[(128, 1.0, "constant")] == (["weak"], 6, 0)
    assert all(b <= 128 for b, *_ in groups), "strong scaling at N > 1 is not counted again"
    assert failure_margins(groups, 0)[:2] == [(32, 8, 1), (64, 18, 6)]


def test_failures_list_every_cell_that_missed_the_target():
    cells = [cell("strong", 1, 10.0), Cell("linear", 2, 0, "stalled", 4, None, 1.0, "modelled", None, "l", 0.2),
             Cell("linear", 2, 1, "diverged", 1, None, 1.0, "modelled", None, "l", None)]
    assert failures(cells) == [("linear", 2, 0, "stalled", 4, 0.2), ("linear", 2, 1, "diverged", 1, None)]


def test_protocol_table_names_each_difference():
    from deepdensity.config import Config
    _, study = load_study("default")
    cfg = Config(stall_patience=3, base_lr=0.0084)
    sweep = {"grid_base_lr": 0.00105, "epochs": 16}
    rows = {r[0]: r for r in protocol_rows(study, cfg, 1844, 256, 0.0022, 64, 0.0084, sweep, "")}
    assert all(len(r) == 4 for r in rows.values())
    assert rows["split"][3] == "" and rows["K (Gaussians)"][3] == "", "no difference, no excuse"
    assert "16 calibration epochs" in rows["target"][3]
    assert "weak: 1, 2, 4, 8, 16, 32" in rows["N"][2] and "strong: 1, 2, 4, 8, 16, 32" in rows["N"][2]
    assert rows["N"][3] == "", "the default preset runs every cell of the paper's grid"
    cut = dataclasses.replace(study, mode_workers={"weak": [1, 2, 4, 8]})
    rows = {r[0]: r for r in protocol_rows(cut, cfg, 1844, 256, 0.0022, 64, 0.0084, sweep, "")}
    assert "weak: 1, 2, 4, 8" in rows["N"][2] and "time budget" in rows["N"][3]
    assert "0.0084" in rows["eta and how chosen"][2] and "literal-eta" in rows["eta and how chosen"][3]
    _, paper = load_study("paper")
    rows = {r[0]: r for r in protocol_rows(paper, Config(stall_patience=10), 1844, 256, 0.0016, 400,
                                                  0.00105, None, "horovodrun -np {n}")}
    assert rows["N"][3] == "" and rows["hardware"][3] == "" and rows["target"][3] == ""


def test_calibration_seeds_must_be_none_of_the_studys(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("seeds: [0, 1, 2]\ncalibration_seeds: [2, 100]\n")
    with pytest.raises(StudyError, match="calibration_seeds must be below 2\\^32 and none of the study's seeds"):
        load_study(str(preset))
    preset.write_text("seeds: [0, 1, 2]\ncalibration_seeds: [100, 101, 102]\n")
    assert load_study(str(preset))[1].calibration_seeds == [100, 101, 102]
    assert load_study("default")[1].calibration_seeds == [100, 101, 102]
