"""Stability across instruction sets (the preset's isa_check): which cap a machine is checked
under, and the report judging every claim again with the re-run seed in place of the original."""

import copy
import json
from pathlib import Path

import pytest

from deepdensity.study.core.preset import isa_to_check
from deepdensity.study.report import paper_report as report
from tests.support import prose

RECORD = json.loads((Path(__file__).parents[1] / "data" / "tiny-reports" / "study.json").read_text())


@pytest.mark.parametrize(
    "setting, machine, cap",
    [
        ("auto", "Intel AVX-512 with Intel DL Boost and bfloat16 support", "AVX2"),
        ("auto", "Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX", "AVX2"),
        ("auto", "Intel AVX2", "SSE41"),
        ("AVX2", "Intel AVX2", "AVX2"),
        (None, "Intel AVX-512", None),
    ],
)
def test_auto_checks_one_instruction_set_below_the_machines(setting, machine, cap):
    assert isa_to_check(setting, machine) == cap


@pytest.mark.medium
def test_every_claim_is_judged_again_with_the_re_run_seed(tmp_path):
    record = copy.deepcopy(RECORD)
    again = copy.deepcopy(record["cells"])
    # under the other instruction set, seed 0 of linear N = 2 diverged; every other re-run matched
    for c in again:
        if (c["mode"], c["n"], c["seed"]) == ("linear", 2, 0):
            c.update(
                status="diverged",
                epochs_to_target=None,
                time_to_target_s=None,
                final_val_loss=None,
                run="isa-sse41-linear-n2-s0",
            )
    record["isa_check"] = {"isa": "SSE41", "seed": 0, "cells": again, "seq_2eta": record["seq_2eta"]}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "study.json").write_text(json.dumps(record))
    claims = report.render_reports(tmp_path / "out", record)
    text = (tmp_path / "out" / "REPORT.md").read_text()
    seed_0_cells = sum(c["seed"] == 0 for c in record["cells"])  # 8: 4 modes at N = 1, 2
    assert f"{seed_0_cells - 1} of {seed_0_cells} cells had the same outcome (reached, slow or failed)" in prose(text)
    assert "capped at SSE41" in prose(text) and "with seed 0 under SSE41" in text
    rows = [
        line for line in text.splitlines() if line.startswith("| ") and line.endswith(("the same |", "**changed** |"))
    ]
    assert len(rows) == len(claims), "one row a claim"
    # "the linear rule fails at every N > 1": 0 of 3 failed before; 1 of 3 under SSE41 moves its
    # failure rate but not the call (inconclusive either way), so no verdict changed here
    assert all(row.endswith("the same |") for row in rows), rows


@pytest.mark.medium
def test_a_verdict_the_re_run_seed_changes_is_marked_changed(tmp_path):
    """Linear N = 2 with six seeds, five failed: 5 of 6 failed is inconclusive (exact lower bound
    0.36); the re-run of seed 0 failing makes it 6 of 6 (lower bound 0.54 > 0.5): 'fails', and the
    claim that the linear rule fails at every N > 1 turns from inconclusive to reproduced."""
    record = copy.deepcopy(RECORD)
    linear = [c for c in record["cells"] if (c["mode"], c["n"]) == ("linear", 2)]
    record["cells"] = [c for c in record["cells"] if (c["mode"], c["n"]) != ("linear", 2) or c["seed"] == 0]
    record["cells"] += [{**copy.deepcopy(linear[0]), "seed": seed, "run": f"linear-n2-s{seed}"} for seed in range(1, 6)]
    failed = dict(status="diverged", epochs_to_target=None, time_to_target_s=None, final_val_loss=None)
    for c in record["cells"]:
        if (c["mode"], c["n"]) == ("linear", 2) and c["seed"] > 0:
            c.update(failed)
    again = copy.deepcopy(record["cells"])
    for c in again:
        if (c["mode"], c["n"], c["seed"]) == ("linear", 2, 0):
            c.update(failed)
    record["isa_check"] = {"isa": "AVX2", "seed": 0, "cells": again, "seq_2eta": record["seq_2eta"]}
    report.render_reports(tmp_path, record)
    row = next(
        line
        for line in (tmp_path / "REPORT.md").read_text().splitlines()
        if line.startswith("| The linear scaling rule fails at every N > 1 | inconclusive")
    )
    assert row.split(" | ")[2] == "reproduced" and row.endswith("**changed** |"), row
