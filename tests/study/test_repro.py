"""The study's bookkeeping on hand-made tables: efficiency per mode, and the claims' verdicts."""

import dataclasses
import math

import pytest

from deepdensity.study.core.cells import Cell, efficiency_table, failure_groups, failure_margins, failures
from deepdensity.study.core.preset import load_study
from deepdensity.study.core.protocol_text import PAPER_TABLE1, PAPER_TABLE2, protocol_table
from deepdensity.utils.errors import StudyError

W = [1, 2, 4, 8, 16, 32]


COLLAPSE = 0.5  # the collapse level of these hand-made studies: a failed run ends above it


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
            cells.append(cell("strong", n, jitter * 100.0 / n**0.8, s))
            cells.append(cell("weak", n, jitter * (100.0 * n**0.5 if n > 1 else 100.0), s))
            cells.append(cell("warmup", n, jitter * 150.0 if n <= 4 else None, s))
            cells.append(cell("linear", n, jitter * 100.0 if n == 1 else None, s))
    return cells


def test_efficiency_table_uses_median_over_seeds_and_nan_for_failures():
    cells = [
        cell("strong", 1, 100.0),
        cell("strong", 1, 120.0, seed=1),
        cell("strong", 1, 80.0, seed=2),
        cell("strong", 2, 50.0),
        cell("strong", 2, 60.0, seed=1),
        cell("strong", 2, 40.0, seed=2),
        cell("weak", 2, 100.0),
        cell("weak", 2, None, seed=1),
    ]
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
    for text, message in (
        ("base_lr: fast\n", "base_lr must be 'edge', 'default_study' or a positive number"),
        ("base_lr: -1\n", "base_lr must be"),
        ("mode_workers: {weak: [1, 3]}\n", "mode_workers.weak"),
        ("mode_workers: [1]\n", "mode_workers must map"),
        ("seeds: [0, 1]\nsecond_look_seeds: 2\n", "second_look_seeds must be 0 .* above the number"),
        ("second_look_seeds: 4\nsecond_look_confidence: 0.9\n", "between the first look's 0.95 and 1"),
        ("seeds: [0, 1]\nsecond_look_seeds: 4\nmax_seeds: 3\n", "a second look .* or the sequential"),
    ):
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


def test_a_presets_training_settings_are_one_config_with_the_studys_thread_default(tmp_path):
    """Study.runs: `train` over the run settings' defaults, one intra-op thread per run unless the
    preset says otherwise; a bad training key names the preset's file and `train`."""
    _, study = load_study("default")
    runs = study.runs
    assert runs is study.runs, "parsed once"
    assert (runs.stall_patience, runs.epoch_definition, runs.intra_op_threads) == (
        study.train["stall_patience"],
        "per_worker",
        1,
    )
    assert runs.batch_size == 32 and "batch_size" not in study.train, "Config's default beneath the preset"
    preset = tmp_path / "threads.yaml"
    preset.write_text("train: {intra_op_threads: 2, stall_patience: 5}\n")
    assert (load_study(str(preset))[1].runs.intra_op_threads, load_study(str(preset))[1].runs.stall_patience) == (2, 5)
    preset.write_text("train: {bacth_size: 16}\n")
    with pytest.raises(StudyError, match=r"threads.yaml: train: unknown config key 'bacth_size'"):
        load_study(str(preset))
    preset.write_text("train: {batch_size: 0}\n")
    with pytest.raises(StudyError, match=r"threads.yaml: train: batch_size must be >= 1"):
        load_study(str(preset))


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
    cells = [
        cell("strong", 1, 10.0),
        Cell("linear", 2, 0, "stalled", 4, None, 1.0, "modelled", None, "l", 0.2),
        Cell("linear", 2, 1, "diverged", 1, None, 1.0, "modelled", None, "l", None),
    ]
    assert failures(cells) == [("linear", 2, 0, "stalled", 4, 0.2), ("linear", 2, 1, "diverged", 1, None)]


def protocol_rows(*args) -> dict:
    """The protocol table's rows by point, each [point, paper, ours, difference]."""
    lines = protocol_table(*args).splitlines()
    assert lines[0] == "| point | paper | ours | difference and why |" and lines[1] == "|---|---|---|---|"
    return {r[0]: r for r in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}


def test_protocol_table_names_each_difference():
    from deepdensity.config import Config

    _, study = load_study("default")
    cfg = Config(stall_patience=3, base_lr=0.0084)
    sweep = {"grid_base_lr": 0.00105, "epochs": 16}
    rows = protocol_rows(study, cfg, 1844, 256, 0.0022, 64, 0.0084, sweep, "")
    assert all(len(r) == 4 for r in rows.values())
    assert rows["split"][3] == "" and rows["K (Gaussians)"][3] == "", "no difference, no excuse"
    assert "16 calibration epochs" in rows["target"][3]
    assert "weak: 1, 2, 4, 8, 16, 32" in rows["N"][2] and "strong: 1, 2, 4, 8, 16, 32" in rows["N"][2]
    assert rows["N"][3] == "", "the default preset runs every cell of the paper's grid"
    cut = dataclasses.replace(study, mode_workers={"weak": [1, 2, 4, 8]})
    rows = protocol_rows(cut, cfg, 1844, 256, 0.0022, 64, 0.0084, sweep, "")
    assert "weak: 1, 2, 4, 8" in rows["N"][2] and "time budget" in rows["N"][3]
    assert "0.0084" in rows["eta and how chosen"][2] and "literal-eta" in rows["eta and how chosen"][3]
    _, paper = load_study("paper")
    rows = protocol_rows(paper, Config(stall_patience=10), 1844, 256, 0.0016, 400, 0.00105, None, "horovodrun -np {n}")
    assert rows["N"][3] == "" and rows["hardware"][3] == "" and rows["target"][3] == ""


def test_calibration_seeds_must_be_none_of_the_studys(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("seeds: [0, 1, 2]\ncalibration_seeds: [2, 100]\n")
    with pytest.raises(StudyError, match="calibration_seeds must be below 2\\^32 and none of the study's seeds"):
        load_study(str(preset))
    preset.write_text("seeds: [0, 1, 2]\ncalibration_seeds: [100, 101, 102]\n")
    assert load_study(str(preset))[1].calibration_seeds == [100, 101, 102]
    assert load_study("default")[1].calibration_seeds == [100, 101, 102]
