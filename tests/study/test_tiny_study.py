"""The tiny study end to end (tests/study/conftest.py: trained once per pytest run): every
report and record it writes, the seeds its design added, the clock and its real run at N = 2,
the ISA check, a second invocation that trains nothing, and the beyond study on its runs."""

import json
import re

import pytest

from deepdensity.study import rerender
from tests.support import assert_keras2, prose, run

pytestmark = pytest.mark.slow

MODES = ("strong", "weak", "linear", "warmup")


def record(reports) -> dict:
    return json.loads((reports / "study.json").read_text())


def test_the_study_writes_every_report_and_names_its_target(tiny_study):
    assert "target: val_loss" in tiny_study.stdout
    for name in (
        "table1.md",
        "table1.csv",
        "table2.md",
        "table2.csv",
        "REPORT.md",
        "claims.json",
        "study.json",
        "fig1.png",
        "fig2.png",
        "fig4.png",
        "fig5.png",
        "fig_efficiency.png",
        "fig_collapse.png",
    ):
        assert (tiny_study.reports / name).stat().st_size > 0, name
    text = prose((tiny_study.reports / "REPORT.md").read_text())
    assert "## Decision rules" in text and "## Seeds run, and why" in text and "oneDNN ISA" in text
    table1 = (tiny_study.reports / "table1.csv").read_text().splitlines()
    assert table1[1].endswith("100.00,100.00") and "105.17" in table1[2]


def test_every_cell_is_there_and_the_design_adds_a_third_seed(tiny_study):
    cells = record(tiny_study.reports)["cells"]
    assert {(c["mode"], c["n"]) for c in cells} == {(m, n) for m in MODES for n in (1, 2)}
    # two first seeds leave every unanimous cell unsettled: the design gives each a third
    assert {c["seed"] for c in cells} == {0, 1, 2}
    extra = [r for r in record(tiny_study.reports)["seed_reasons"] if r["seed"] == 2]
    assert extra and all(r["why"] != "first seeds of the preset" for r in extra)
    strong2 = next(c for c in cells if c["mode"] == "strong" and c["n"] == 2 and c["seed"] == 0)
    assert strong2["run"] == "seq-s0", "strong N = 2 is read off the sequential run"
    assert all(c["time_source"] == "modelled" for c in cells), "one model for every N"
    for c in cells:  # the study's own subprocesses, each on Keras 2
        assert_keras2(json.loads((tiny_study.runs / c["run"] / "config.json").read_text()))


def test_the_clock_and_its_real_strong_run_follow_the_sequential_path(tiny_study):
    study = record(tiny_study.reports)
    timing = study["timing"]
    assert set(timing["real_epoch_seconds"]) == {"1", "2", "4"} and timing["compute_scale"] > 0
    # the rounds kept as the fixture left them, the rest measured here (tests/study/conftest.py:
    # where Slurm runs, its clock test measures the round and all three are kept here). The
    # record's figures are the rounds' medians, so the kept rounds' (tiny_clock's): what is
    # checked of this host's measurement is its round, every probe of it
    assert f"timing: rounds 1-{tiny_study.kept_rounds} of 3 kept from an interrupted invocation" in tiny_study.stdout
    assert len(timing["rounds"]) == 3 and timing["rounds"][0] == timing["rounds"][1]
    measured = timing["rounds"][2]
    assert set(measured["real"]) == {"1", "2", "4"} and set(measured["shared"]) == {"2", "4"}
    assert all(
        t > 0
        for t in [
            measured["eval"],
            *(v for k in ("steps", "shared", "real", "real_steps") for v in measured[k].values()),
        ]
    ), measured
    assert (timing["rounds"][2] == timing["rounds"][0]) == (tiny_study.kept_rounds == 3), (
        "the third round measured here"
    )
    text = prose((tiny_study.reports / "REPORT.md").read_text())
    assert "| 2 | " in text.split("## The clock")[1].split("## Table I")[0], "real -np 2 beside the model"
    # strong scaling run for real at N = 2 follows the sequential path: the same passes to target
    real = study["real_strong"]
    assert [(r["n"], r["seed"]) for r in real] == [(2, 0)] and real[0]["passes_to_target"] is not None
    # the same path up to the order in which two workers' part gradients are summed: measured
    # losses agree to 5e-4 (tests/training/test_horovod.py), which can move a crossing by a pass
    assert abs(real[0]["passes_to_target"] - real[0]["sequential_passes"]) <= 1, real
    # the controller its ranks ran under, as the run recorded it, is named in the report
    assert real[0]["controller"] in ("gloo", "mpi") and f"| {real[0]['controller']} (" in text, real


def test_the_isa_check_trains_seed_0_of_every_unit_again_below_this_machines_isa(tiny_study):
    check = record(tiny_study.reports)["isa_check"]
    assert check["seed"] == 0 and check["isa"] in ("AVX2", "SSE41")
    prefix = f"isa-{check['isa'].lower()}-"
    assert {c["run"] for c in check["cells"] if c["seed"] == 0} == {
        prefix + name for name in ("seq-s0", "weak-n2-s0", "linear-n2-s0", "warmup-n2-s0")
    }
    text = prose((tiny_study.reports / "REPORT.md").read_text())
    assert f"capped at {check['isa']}" in text and "cells had the same outcome" in text


def test_the_target_is_calibrated_on_seeds_of_its_own(tiny_study):
    study = record(tiny_study.reports)
    assert study["calibration"]["source"] == "calibration seeds" and study["calibration"]["seeds"] == [7]
    assert "median of what the sequential runs of calibration seeds 7" in prose(
        (tiny_study.reports / "REPORT.md").read_text()
    )


def test_the_reports_render_again_from_their_record_alone(tiny_study):
    assert rerender.main(["--from", str(tiny_study.reports), "--check"]) == 0


def test_a_second_invocation_reuses_every_finished_run(tiny_study):
    """Run again on the same runs folder (reports to a folder of their own, so that the other
    tests read the first invocation's): nothing trains, as the dry run said first, counting the
    runs the first invocation's record names (plan/invocation.py)."""
    dry = run(tiny_study.command(None, None, "--dry-run")).stdout.splitlines()
    said = re.fullmatch(r"this invocation: trains (\d+) run\(s\) and reuses (\d+), about 0 min here .*", dry[0])
    assert said, dry[:3]
    asked = record(tiny_study.reports)["provenance"]["runs"]
    assert said.groups() == ("0", str(len(asked["trained"]) + len(asked["reused"]))), (dry[0], asked)
    again = tiny_study.root / "reports-again"
    second = run(tiny_study.command(reports=again))
    assert "[run " not in second.stdout, "every run finished earlier is reused"
    assert f"trained 0 run(s) and reused {said.group(2)} finished earlier" in prose((again / "REPORT.md").read_text())


def test_the_beyond_study_writes_its_answer_and_every_table(tiny_beyond):
    _, out = tiny_beyond
    for name in (
        "REPORT.md",
        "time_to_target.md",
        "time_to_target.csv",
        "fig2.png",
        "fig_passes.png",
        "answers.json",
        "study.json",
        "fig8.png",
        "fig9.png",
        "filter.embedding.png",
    ):
        assert (out / name).stat().st_size > 0, name
    text = (out / "REPORT.md").read_text()
    assert "## The answer" in text and any(a in text for a in ("Yes:", "No:", "No answer: too few seeds"))
    header = next(line for line in (out / "time_to_target.md").read_text().splitlines() if line.startswith("|"))
    assert all(m in header for m in ("strong", "weak", "linear", "warmup", "local")), header
    # adaptive is tabulated only where its test fired (docs/beyond.md); otherwise the report says why not
    assert ("adaptive" in header) != ("adaptive: not exercised" in text), header
    assert "## Filtering the data for large batches" in text and "## Batch size against time to target" in text
    assert rerender.main(["--from", str(out), "--check"]) == 0, "the beyond reports render from their record alone"


def test_the_beyond_cells_filter_and_sweep_are_the_presets(tiny_beyond):
    study, out = tiny_beyond
    b_record = record(out)
    b_cells = b_record["cells"]
    assert {(c["mode"], c["n"]) for c in b_cells} == {(m, n) for m in ("strong", "adaptive", "local") for n in (1, 2)}
    filtering = json.loads((out / "filtering.json").read_text())
    assert sorted((r["data"], r["seed"]) for r in filtering["runs"]) == [
        (d, s) for d in ("full", "network", "random") for s in (0, 1)
    ]
    assert {r["n"] for r in filtering["runs"]} == {2} and filtering["filter"]["n_train_before"] == 64
    sweep = json.loads((out / "batch_sweep.json").read_text())
    seeds = sorted({r["seed"] for r in sweep})
    assert len(seeds) > 1, "every seed of the study, not the first alone"
    assert sorted((r["batch"], r["lr_rule"], r["seed"]) for r in sweep) == [
        (b, rule, s) for b in (16, 32, 64) for rule in ("eta", "linear") for s in seeds
    ]
    assert next(r for r in sweep if r["batch"] == 64 and r["lr_rule"] == "linear")["lr"] == pytest.approx(0.0021)
    assert b_record["kind"] == "beyond" and b_record["target"] == pytest.approx(
        record(study.reports)["target"], rel=1e-9
    ), "the same calibrated target"
    assert set(b_record["run_rows"]) == {c["run"] for c in b_cells if c["n"] > 1 and c["mode"] != "strong"}


def test_the_beyond_compute_counts_the_filters_and_the_sweeps_runs(tiny_beyond):
    """The compute the report states covers the filter's and the sweep's own runs too, read off
    their folders (the runs folder also holds the default study's runs: only the beyond record's
    own count)."""
    study, out = tiny_beyond
    b_record = record(out)
    b_cells = b_record["cells"]
    own = {r["run"] for r in b_record["filtering"]["rows"] + b_record["batch_sweep"] if not r["run"].startswith("(")}
    own |= {c["run"] for c in b_cells}

    def seconds(names):
        return sum(json.loads((study.runs / r / "result.json").read_text())["seconds"] for r in names)

    assert b_record["provenance"]["runs_minutes"] >= round(seconds(own) / 60, 1)
    assert seconds(own) > seconds({c["run"] for c in b_cells})
