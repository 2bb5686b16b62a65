"""`repro` as a newcomer meets it: the plan first (alone with --dry-run), reports in the study's
own folder unless `--out reports` asks for the committed ones, published only when complete,
one study per runs folder, and the command that continues an interrupted study."""

import os
import re
import subprocess
import sys

import pytest

from deepdensity.study import repro
from deepdensity.study.core.preset import load_study
from deepdensity.study.plan.study_plan import plan_lines, run_counts
from deepdensity.study.run import session
from deepdensity.study.run.runner import StudyRunner
from deepdensity.training.runs import locked
from deepdensity.utils.files import mark_folder
from tests.support import ROOT

TINY = (
    "data: {n: 96, val: 32, seed: 0}\ncalibration_epochs: 6\nworkers: [1, 2, 4]\nmodes: [strong, weak]\n"
    "seeds: [0, 1]\nmax_seeds: 3\nbudget_minutes: 10\nbase_lr: 0.00105\n"
)


@pytest.fixture
def tiny(tmp_path):
    preset = tmp_path / "tiny.yaml"
    preset.write_text(TINY)
    return preset


def test_the_plan_counts_the_runs_the_design_can_start(tiny):
    _, study = load_study(str(tiny))
    # trained units: weak N = 2 and 4, the sequential model at 2 x eta, the sequential runs
    # (strong scaling is read off them): 4 units, 2 seeds each at first, up to 3 within the budget
    assert run_counts(study) == (8, 12)
    lines = plan_lines("tiny", study, "", "R", "O")
    assert lines[0] == "plan for preset tiny: runs in R, reports to O"
    assert any("runs: 8 to 12" in line for line in lines)
    assert any("weak N = 2, 4" in line for line in lines)
    assert any("strong scaling at N = 1, 2, 4 read off them" in line for line in lines)
    # with a real runner strong scaling is trained at every N > 1 instead of read off the
    # sequential runs; the clock is measured all the same (run_study), so the plan lists it
    assert run_counts(study, real_runner=True) == (12, 18)
    runner_lines = plan_lines("tiny", study, "horovodrun", "R", "O")
    assert runner_lines[1].startswith("  1. the clock: training steps and allreduces timed alone on this host")
    assert not any("read off them" in line for line in runner_lines)


def test_the_plan_counts_the_filters_and_the_batch_sweeps_runs(tiny):
    """Beyond the cells: each filter mode at each first seed on network, random and full data
    (3 runs at most: the full data's is the default study's where it holds one), and the sweep's every batch
    but the study's own (the sequential run) under both lr
    rules at each sequential seed. Counted by hand for 1 filter mode, 2 seeds, batches 16, 32, 64
    (B = 32): 1 x 2 x 3 = 6 and 2 x 2 x 2 = 8 runs more than the cells alone."""
    import dataclasses

    _, study = load_study(str(tiny))
    beyond = dataclasses.replace(study, filter_modes=["weak"], batch_sweep=[16, 32, 64])
    assert len(study.seeds) == 2 and study.runs.batch_size == 32
    assert not study.filter_modes and not study.batch_sweep
    assert run_counts(beyond) == tuple(count + 6 + 8 for count in run_counts(study))


def test_the_plan_gives_the_last_studys_own_minutes_beside_its_wall_time(tiny):
    # a study that reused every run took minutes; what training its runs takes is their own clocks
    _, study = load_study(str(tiny))
    earlier = {
        "provenance": {
            "wall_minutes": 5.7,
            "trained": 0,
            "reused": 99,
            "parallel_runs": 2,
            "runs_minutes": 127.3,
            "generated": "2026-11-25 15:30 UTC",
        },
        "environment": {"cpu": "AMD EPYC", "cores": 2},
    }
    assert plan_lines("tiny", study, "", "R", "O", earlier)[-1] == (
        "  time: the last study of this preset took 5.7 min (0 runs trained and 99 reused, 2 at a time; its "
        "runs' own clocks add up to 127.3 min) on AMD EPYC (2 cores, generated 2026-11-25 15:30 UTC); finished "
        "runs in the runs folder are reused"
    )
    # a record that is not whole (its machine unknown) is not gone by, and the plan still prints
    del earlier["environment"]["cores"]
    assert plan_lines("tiny", study, "", "R", "O", earlier)[-1] == (
        "  time: no earlier study of this preset to go by; the budget above bounds the extra seeds"
    )


def test_a_dry_run_prints_the_plan_and_trains_nothing(tiny, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert repro.main(["--preset", str(tiny), "--runs", str(runs), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "plan for preset tiny" in out and "no earlier study of this preset" in out
    assert not runs.exists(), "a dry run writes nothing"


def test_reports_go_to_the_study_folder_unless_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs" / "study-x"
    assert session.reports_folder("default", None, runs) == runs / "reports"
    assert session.reports_folder("default", "reports", runs) == session.COMMITTED_REPORTS
    # a preset other than default never overwrites the default study's committed reports
    assert session.reports_folder("beyond", "reports", runs) == session.COMMITTED_REPORTS / "beyond"
    assert session.reports_folder("beyond", "elsewhere", runs).name == "elsewhere"


def test_publish_moves_a_complete_rendering_and_keeps_other_files(tmp_path):
    stage, out = tmp_path / "stage", tmp_path / "reports"
    stage.mkdir()
    out.mkdir()
    (stage / "REPORT.md").write_text("new")
    (stage / "study.json").write_text("{}")
    (out / "REPORT.md").write_text("old")
    (out / "bench.json").write_text("kept")
    session.publish(stage, out)
    assert (out / "REPORT.md").read_text() == "new" and (out / "study.json").exists()
    assert (out / "bench.json").read_text() == "kept"
    assert not stage.exists()


def test_a_second_study_on_the_same_runs_folder_is_refused(tiny, tmp_path, capsys):
    runs = tmp_path / "runs"
    with locked(runs, holder_is="another study", instead="pass another --runs folder"):
        assert repro.main(["--preset", str(tiny), "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"{runs} is in use by another study (pid {os.getpid()})" in err
    assert "pass another --runs folder" in err
    assert sorted(p.name for p in runs.iterdir()) == [], "the refused study wrote nothing there"


def test_the_continue_command_is_the_one_that_was_run(monkeypatch):
    monkeypatch.delenv("DEEPDENSITY_MAKE_TARGET", raising=False)
    monkeypatch.setenv("MAKELEVEL", "2")  # pytest under `make test-all`: not a study's make target
    assert (
        repro._invocation(["--preset", "my preset.yaml"]) == "`python -m deepdensity.repro --preset 'my preset.yaml'`"
    )
    monkeypatch.setenv("DEEPDENSITY_MAKE_TARGET", "repro")
    assert repro._invocation(["--preset", "default"]).startswith("the same `make repro` command")


def test_progress_lines_say_what_is_left_of_the_budget(tmp_path):
    said = []
    runner = StudyRunner(tmp_path, tmp_path / "train.yaml", None, say=said.append)
    assert runner._clock().endswith("so far")
    runner.budget_end = runner.t0 + 600
    assert "of the budget left" in runner._clock()
    runner.budget_end = runner.t0 - 1
    assert runner._clock().endswith("the budget is spent")


def test_make_repro_passes_out_and_bench_writes_outside_the_reports():
    dry = subprocess.run(["make", "-n", "repro", "OUT=reports"], cwd=ROOT, capture_output=True, text=True)
    assert "--out 'reports'" in dry.stdout, dry.stdout + dry.stderr
    dry = subprocess.run(["make", "-n", "repro"], cwd=ROOT, capture_output=True, text=True)
    assert "--out" not in dry.stdout
    from deepdensity.perf.bench import _parser

    assert _parser().parse_args([]).out == "runs/bench.json"


def test_bench_horovod_figures_go_into_the_out_file_beside_the_rest(tmp_path):
    from deepdensity.perf.bench_run import _write_entry

    out = tmp_path / "bench.json"
    out.write_text('{"steps": [1, 2]}')
    _write_entry(out, "horovod", {"ratio": 0.9})
    import json

    assert json.loads(out.read_text()) == {"steps": [1, 2], "horovod": {"ratio": 0.9}}
    _write_entry(tmp_path / "new.json", "horovod", {"ratio": 0.8})
    assert json.loads((tmp_path / "new.json").read_text()) == {"horovod": {"ratio": 0.8}}


def test_repro_help_names_out_and_dry_run():
    help_text = subprocess.run(
        [sys.executable, "-m", "deepdensity.repro", "--help"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    # Python 3.13's argparse names an aliased option's value once ("--out, --reports OUT"),
    # earlier ones after each alias ("--out OUT, --reports OUT")
    assert re.search(r"--out( OUT)?, --reports OUT\b", help_text), help_text
    assert "--dry-run" in help_text


def test_the_plan_counts_the_instruction_set_check(tmp_path):
    preset = tmp_path / "isa.yaml"
    preset.write_text(TINY + "isa_check: auto\n")
    _, study = load_study(str(preset))
    assert run_counts(study) == (8 + 4, 12 + 4), "seed 0 of the 4 units once more"
    assert any("stability: seed 0 of every trained cell" in line for line in plan_lines("isa", study, "", "R", "O"))


@pytest.mark.parametrize("flag", ["--runs", "--out"])
def test_a_study_writes_only_into_its_own_or_an_empty_folder(tiny, tmp_path, capsys, flag):
    """`--runs ~` or `--out ~/Documents` would spread a study's files among the user's: a folder
    holding files no study wrote is refused in one line before anything is written."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("mine")
    other = {"--runs": ["--out", str(tmp_path / "o")], "--out": ["--runs", str(tmp_path / "r")]}[flag]
    assert repro.main(["--preset", str(tiny), flag, str(theirs), *other, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"error: {flag} {theirs} holds files this project did not write (thesis.tex); nothing was "
        f"written there: pass a new or empty folder\n"
    )
    assert sorted(p.name for p in theirs.iterdir()) == ["thesis.tex"]
    # a file of the name a study writes, but the user's, is theirs too
    name = "train.yaml" if flag == "--runs" else "study.json"
    (theirs / name).write_text("my: notes\n")
    assert repro.main(["--preset", str(tiny), flag, str(theirs), *other, "--dry-run"]) == 2
    listed = ", ".join(sorted(["thesis.tex", name]))
    assert f"holds files this project did not write ({listed})" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, kind, made_before_marks",
    [
        ("--runs", "runs", ("train.yaml", "intra_op_threads: 1\ndeterministic: true\ndata_path: r/data.h5\n")),
        ("--runs", "runs", ("timing.json", '{"clock_version": 4}')),
        ("--out", "reports", ("study.json", '{"cells": []}')),
    ],
)
def test_a_study_writes_into_a_folder_it_marked_or_one_an_earlier_version_wrote(
    tiny, tmp_path, flag, kind, made_before_marks
):
    other = {"--runs": ["--out", str(tmp_path / "o")], "--out": ["--runs", str(tmp_path / "r")]}[flag]
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "bench.json").write_text("{}")
    name, text = made_before_marks
    (ours / name).write_text(text)
    assert repro.main(["--preset", str(tiny), flag, str(ours), *other, "--dry-run"]) == 0
    marked = tmp_path / "marked"
    mark_folder(marked, kind)
    (marked / "notes.txt").write_text("a study's folder holds what it holds")
    assert repro.main(["--preset", str(tiny), flag, str(marked), *other, "--dry-run"]) == 0
    run_folder = tmp_path / "a-run"
    mark_folder(run_folder, "run")
    (run_folder / "config.json").write_text("{}")
    assert repro.main(["--preset", str(tiny), flag, str(run_folder), *other, "--dry-run"]) == 2


def test_report_renders_only_into_a_reports_folder_or_an_empty_one(tmp_path, capsys):
    from deepdensity.study import rerender

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    assert rerender.main(["--from", str(ROOT / "tests" / "study" / "data" / "tiny-reports"), "--out", str(theirs)]) == 2
    assert "error: --out" in capsys.readouterr().err and sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    # a folder it rendered into (REPORT.md and the rest, no study.json) is its own the next time
    ours = tmp_path / "ours"
    for _ in range(2):
        assert (
            rerender.main(["--from", str(ROOT / "tests" / "study" / "data" / "tiny-reports"), "--out", str(ours)]) == 0
        )
    assert (ours / "REPORT.md").is_file() and not (ours / "study.json").exists()


@pytest.mark.parametrize(
    "argv0, filtered",
    [("/venv/bin/deepdensity", True), ("/src/deepdensity/repro.py", True), ("/venv/bin/pytest", False)],
)
def test_the_study_command_keeps_tensorflows_native_log_off_its_output(tiny, tmp_path, monkeypatch, argv0, filtered):
    """The driver's own TensorFlow (Fig. 1's inference) wrote absl's "WARNING: All log messages
    before absl::InitializeLog()" and XLA's "Compiled cluster" lines among the study's; the
    command passes its native stderr through the training processes' filter. A caller of main()
    (a test) keeps its stderr."""
    from deepdensity.training import console

    calls = []
    monkeypatch.setattr(console, "filter_native_logs", lambda: calls.append(argv0))
    monkeypatch.setattr(sys, "argv", [argv0])
    assert repro.main(["--preset", str(tiny), "--runs", str(tmp_path / "runs"), "--dry-run"]) == 0
    assert calls == ([argv0] if filtered else [])
