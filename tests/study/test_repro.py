"""The study's bookkeeping on hand-made tables: efficiency per mode, and the claims' verdicts."""
import dataclasses
import math

import pytest

from deepdensity.study import repro
from deepdensity.scaling import rules
from deepdensity.study import tables
from deepdensity.study.preset import StudyError, load_study
from deepdensity.study.tables import Cell, efficiency_table

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
    assert list(tables.PAPER_TABLE1.values()) == [100.00, 105.17, 86.81, 90.09, 58.08, 46.25]
    assert list(tables.PAPER_TABLE2["weak"].values()) == [100.00, 96.96, 63.86, 42.32, 19.65, 9.45]
    assert [v for v in tables.PAPER_TABLE2["warmup"].values() if not math.isnan(v)] == [100.00, 84.95, 75.49]


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
    assert rerender.main(["--from", str(out), "--check"]) == 0, "the beyond reports render from their record alone"


def test_failure_groups_by_global_batch_and_lr():
    cells = [c for c in papers_outcome() if c.n <= 4]
    groups = tables.failure_groups(cells, [{"status": "stalled"}, {"status": "reached_target"}], 32)
    by_key = {(b, lr, sched): (modes, runs, missed) for b, lr, sched, modes, runs, missed in groups}
    assert by_key[(32, 1.0, "constant")] == (["strong"], 6, 0), "N = 1 is the sequential run, counted once a seed"
    assert by_key[(32, 2.0, "constant")] == (["2 x eta"], 2, 1)
    assert by_key[(64, 2.0, "constant")] == (["linear"], 6, 6) and by_key[(64, 2.0, "warmup")] == (["warmup"], 6, 0)
    assert by_key[(128, 1.0, "constant")] == (["weak"], 6, 0)
    assert all(b <= 128 for b, *_ in groups), "strong scaling at N > 1 is not counted again"
    assert tables.failure_margins(groups, 0)[:2] == [(32, 8, 1), (64, 18, 6)]


def test_failures_list_every_cell_that_missed_the_target():
    cells = [cell("strong", 1, 10.0), Cell("linear", 2, 0, "stalled", 4, None, 1.0, "modelled", None, "l", 0.2),
             Cell("linear", 2, 1, "diverged", 1, None, 1.0, "modelled", None, "l", None)]
    assert tables.failures(cells) == [("linear", 2, 0, "stalled", 4, 0.2), ("linear", 2, 1, "diverged", 1, None)]


class FakeRunner:
    """Stands in for StudyRunner: writes a run's metrics from a loss curve of (lr, seed, epoch)."""

    parallel = 1

    def __init__(self, root, curve):
        self.root, self.curve, self.calls = root, curve, []

    def run_all(self, jobs, label=""):
        return [job() for job in jobs]

    def run(self, name, mode, n, settings, need_weights=False):
        import json
        self.calls.append((name, settings["max_epochs"]))
        out = self.root / name
        out.mkdir(parents=True, exist_ok=True)
        lr, patience = float(settings["base_lr"]), int(settings.get("stall_patience", 0))
        vals = []
        for e in range(int(settings["max_epochs"])):
            vals.append(self.curve(lr, settings["seed"], e))
            if rules.stop_reason(e, vals[-1], vals[-1], float(settings["target_loss"]), 10 ** 6, vals, patience):
                break
        (out / "metrics.jsonl").write_text("".join(json.dumps({"epoch": i + 1, "val_loss": v}) + "\n"
                                                   for i, v in enumerate(vals)))
        return {"status": "max_epochs", "epochs": len(vals)}


def test_the_edge_search_through_the_study_finds_the_last_converging_lr(tmp_path):
    edge = 0.00105 * 2 ** 1.5           # grid index 3 converges, 4 diverges
    def curve(lr, seed, e):               # converges below the edge; Fig. 3 above it
        return 0.1 / (1 + e) if lr <= edge * 1.0001 else [0.05, 0.03, 0.2][min(e, 2)]
    runner = FakeRunner(tmp_path, curve)
    eta, probes = repro.find_edge(runner, 0.00105, 12, 3, [0], None, say=lambda *a: None)
    assert eta == pytest.approx(edge)
    assert [p["k"] for p in probes] == [0, 1, 2, 3, 4] and [p["diverges"] for p in probes] == [False] * 4 + [True]
    assert probes[-1]["epochs"] == 5, "the diverging probe stalled 3 epochs after its best"


def test_the_edge_holds_for_every_seed_and_a_collapsed_run_does_not_converge(tmp_path):
    collapse = 0.005
    def curve(lr, seed, e):
        k = round(math.log(lr / 0.00105, 2 ** 0.5))
        if seed == 7 and k in (3, 4):     # falls steadily, but onto the collapse level
            return 0.0065 - 0.0015 * (1 - 0.5 ** e)
        return 0.01 / (1 + e) if k < 5 else [0.05, 0.03, 0.2][min(e, 2)]
    runner = FakeRunner(tmp_path, curve)
    eta, probes = repro.find_edge(runner, 0.00105, 12, 3, [0, 7], collapse, say=lambda *a: None)
    assert eta == pytest.approx(0.00105 * 2 ** 1.0), "k = 3, 4 collapse on seed 7: the edge is k = 2"
    assert [(p["k"], p["seed"], p["diverges"]) for p in probes] == [
        (0, 0, False), (1, 0, False), (2, 0, False), (2, 7, False), (3, 0, False), (3, 7, True),
        (4, 0, False), (4, 7, True), (5, 0, True)]
    assert (tmp_path / "edge-k+3-s7").is_dir()
    # without the collapse level, the collapsed run would pass for converging
    eta, _ = repro.find_edge(FakeRunner(tmp_path / "b", curve), 0.00105, 12, 3, [0, 7], None, say=lambda *a: None)
    assert eta == pytest.approx(0.00105 * 2 ** 2.0)


def test_strong_cells_extend_the_sequential_run_until_every_n_is_decided(tmp_path):
    passes = [0.5, 0.4, 0.3, 0.29, 0.31, 0.28, 0.27, 0.26, 0.25, 0.24, 0.23, 0.22]
    runner = FakeRunner(tmp_path, lambda lr, seed, e: passes[e] if e < len(passes) else 0.2)
    got, vals = repro.strong_from_sequential(runner, 0, 0.001, 4, [1, 2, 4], target=0.29, cap=100, patience=0)
    assert vals == passes[:4]
    # N = 1 at pass 4; N = 2 validates at passes 2, 4: reached at its epoch 2;
    # N = 4 validates at passes 4, 8: its first epoch end (0.29) is on target
    assert got == {1: ("reached_target", 4), 2: ("reached_target", 2), 4: ("reached_target", 1)}
    got, _ = repro.strong_from_sequential(runner, 0, 0.001, 4, [1, 8], target=0.255, cap=100, patience=0)
    assert got == {1: ("reached_target", 9), 8: ("reached_target", 2)}
    assert [c[1] for c in runner.calls][-3:] == [4, 12, 20], "extended by the largest undecided N"


def test_protocol_table_names_each_difference():
    from deepdensity.config import Config
    _, study = load_study("default")
    cfg = Config(stall_patience=3, base_lr=0.0084)
    sweep = {"grid_base_lr": 0.00105, "epochs": 16}
    rows = {r[0]: r for r in tables.protocol_rows(study, cfg, 1844, 256, 0.0022, 64, 0.0084, sweep, "")}
    assert all(len(r) == 4 for r in rows.values())
    assert rows["split"][3] == "" and rows["K (Gaussians)"][3] == "", "no difference, no excuse"
    assert "16 calibration epochs" in rows["target"][3]
    assert "weak: 1, 2, 4, 8, 16, 32" in rows["N"][2] and "strong: 1, 2, 4, 8, 16, 32" in rows["N"][2]
    assert rows["N"][3] == "", "the default preset runs every cell of the paper's grid"
    cut = dataclasses.replace(study, mode_workers={"weak": [1, 2, 4, 8]})
    rows = {r[0]: r for r in tables.protocol_rows(cut, cfg, 1844, 256, 0.0022, 64, 0.0084, sweep, "")}
    assert "weak: 1, 2, 4, 8" in rows["N"][2] and "time budget" in rows["N"][3]
    assert "0.0084" in rows["eta and how chosen"][2] and "literal-eta" in rows["eta and how chosen"][3]
    _, paper = load_study("paper")
    rows = {r[0]: r for r in tables.protocol_rows(paper, Config(stall_patience=10), 1844, 256, 0.0016, 400,
                                                  0.00105, None, "horovodrun -np {n}")}
    assert rows["N"][3] == "" and rows["hardware"][3] == "" and rows["target"][3] == ""


def test_the_speculative_edge_search_finds_the_same_edge(tmp_path):
    """With room for two runs the search runs the probe it would ask next beside the current
    one; the extra outcomes cannot move the edge."""
    collapse = 0.005

    def curve(lr, seed, e):
        k = round(math.log(lr / 0.00105, 2 ** 0.5))
        if seed == 7 and k in (3, 4):
            return 0.0065 - 0.0015 * (1 - 0.5 ** e)
        return 0.01 / (1 + e) if k < 5 else [0.05, 0.03, 0.2][min(e, 2)]
    one, two = FakeRunner(tmp_path / "one", curve), FakeRunner(tmp_path / "two", curve)
    two.parallel = 2
    eta1, probes1 = repro.find_edge(one, 0.00105, 12, 3, [0, 7], collapse, say=lambda *a: None)
    eta2, probes2 = repro.find_edge(two, 0.00105, 12, 3, [0, 7], collapse, say=lambda *a: None)
    assert eta2 == eta1 == pytest.approx(0.00105 * 2 ** 1.0)
    seen = {(p["k"], p["seed"]) for p in probes2}
    assert {(p["k"], p["seed"]) for p in probes1} <= seen and len(seen) <= len(probes1) + 2


def test_calibration_seeds_must_be_none_of_the_studys(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("seeds: [0, 1, 2]\ncalibration_seeds: [2, 100]\n")
    with pytest.raises(StudyError, match="calibration_seeds must be below 2\\^32 and none of the study's seeds"):
        load_study(str(preset))
    preset.write_text("seeds: [0, 1, 2]\ncalibration_seeds: [100, 101, 102]\n")
    assert load_study(str(preset))[1].calibration_seeds == [100, 101, 102]
    assert load_study("default")[1].calibration_seeds == [100, 101, 102]


def test_the_stall_check_continues_stopped_runs_and_a_run_that_reaches_counts_as_reached(tmp_path):
    """Every stalled run at N >= 16, of the others the preset's count; strong scaling (read off the
    sequential runs) is not continued; a continued run that reaches the target replaces the stopped one."""
    import json
    from types import SimpleNamespace
    from deepdensity.study.design import Book

    class Runner:
        def __init__(self):
            self.asked = []

        def run(self, name, mode, n, settings, continue_from=None):
            self.asked.append((name, mode, n, settings["stall_patience"], settings["base_lr"], continue_from))
            status = "reached_target" if name.startswith("warmup-n32") else "max_epochs"
            (tmp_path / name).mkdir()
            (tmp_path / name / "result.json").write_text(json.dumps({"status": status, "epochs": 40}))
            return {"status": status, "epochs": 40, "final_val_loss": 1.0}

        def run_all(self, jobs, label=""):
            return [job() for job in jobs]

    book = Book()
    stalled = {"status": "stalled", "epochs": 9}
    book.results = {("warmup", 32, 0): (stalled, "warmup-n32-s0"), ("linear", 16, 1): (stalled, "linear-n16-s1"),
                    ("weak", 4, 0): (stalled, "weak-n4-s0"), ("weak", 2, 0): (stalled, "weak-n2-s0"),
                    ("2eta", 1, 3): (stalled, "seq-2eta-s3"), ("strong", 8, 3): (stalled, "seq-s3"),
                    ("weak", 8, 0): ({"status": "reached_target", "epochs": 9}, "weak-n8-s0")}
    s = SimpleNamespace(study=SimpleNamespace(stall_check=3), runner=Runner(), root=tmp_path)
    proto = SimpleNamespace(eta=0.002, common=lambda: {"base_lr": repr(0.002), "target_loss": "1.0", "max_epochs": 64})
    rows = repro.stall_check(s, proto, book)
    asked = {a[0]: a for a in s.runner.asked}
    assert [a[2] for a in s.runner.asked] == sorted(a[2] for a in s.runner.asked), \
        "the cheapest continuations (smallest N) first"
    assert set(asked) == {"warmup-n32-s0-to-cap", "linear-n16-s1-to-cap", "weak-n4-s0-to-cap",
                          "weak-n2-s0-to-cap", "seq-2eta-s3-to-cap"}, \
        "every one at N >= 16, then 3 of the others spread over their cells; never strong"
    assert all(a[3] == 0 for a in asked.values()), "the stall rule off"
    assert all(a[5] + "-to-cap" == name for name, a in asked.items()), "each from the run the rule stopped"
    assert asked["seq-2eta-s3-to-cap"][1:3] == ("strong", 1) and asked["seq-2eta-s3-to-cap"][4] == repr(0.004)
    assert [r["status"] for r in rows if r["run"] == "warmup-n32-s0-to-cap"] == ["reached_target"]
    assert book.results[("warmup", 32, 0)][1] == "warmup-n32-s0-to-cap"
    assert book.results[("linear", 16, 1)][1] == "linear-n16-s1", "a continued run that missed leaves the stopped one"
