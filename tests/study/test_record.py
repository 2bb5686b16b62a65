"""The record (deepdensity/study/record.py, study.json): what a committed record may name. A
beyond study's record holds the default study's note and the data filter's facts, which name
the folders the study ran in; the record shows each by its last two parts."""

import json
import time
from types import SimpleNamespace

from deepdensity.config import Config
from deepdensity.study import record
from deepdensity.study.core.preset import load_study


def test_a_beyond_record_names_no_folder_of_the_machine_that_made_it(tmp_path):
    runs, reports = tmp_path / "scratch" / "runs", tmp_path / "home" / "reports"
    s = SimpleNamespace(
        name="beyond",
        study=load_study("beyond")[1],
        root=runs,
        out=reports,
        n_train=1844,
        n_val=256,
        collapse_loss=0.005,
        t_start=time.perf_counter(),
        environment=lambda: {},
        runner=SimpleNamespace(trained=set(), reused=set(), parallel=1),
    )
    end = SimpleNamespace(
        s=s,
        proto=SimpleNamespace(cfg=Config(), eta=0.001, target=0.002, max_epochs=8, calibration=None),
        book=SimpleNamespace(runs={}, why={}),
        cells=[],
        timing={},
        stopped="the design's seeds",
        options=SimpleNamespace(runner=""),
    )
    facts = {"run": str(runs / "seq-s3"), "source": str(runs / "data.h5"), "clusters": 34, "kind": "network"}
    note = f"weak, linear and warmup: the default study's runs ({reports / 'study.json'}, same eta and target)"
    own = record.beyond_keys(runs, [], ([], note), {"rows": [], "filter": facts}, None)
    got = record.study_record("beyond", end, own)
    assert record.machine_paths(json.dumps(got)) == []
    assert got["filtering"]["filter"] == {
        "run": "runs/seq-s3",
        "source": "runs/data.h5",
        "clusters": 34,
        "kind": "network",
    }
    assert got["earlier"]["note"] == (
        "weak, linear and warmup: the default study's runs (reports/study.json, same eta and target)"
    )


def test_a_machine_path_in_a_record_is_shown_by_its_last_two_parts():
    assert record.without_machine_paths("runs (/work/main/reports/study.json, same") == "runs (reports/study.json, same"
    assert record.without_machine_paths('"run": "/scratch/u1/runs/seq-s3",') == '"run": "runs/seq-s3",'
    assert record.without_machine_paths("--set data_path=/home/u/scans/cubes.h5") == "--set data_path=scans/cubes.h5"
    for kept in ("s / epoch", "https://ui.perfetto.dev/trace", "p 1 / 0.38", "docs/beyond.md", "24/24", "ms/step"):
        assert record.without_machine_paths(kept) == kept and record.machine_paths(kept) == []
