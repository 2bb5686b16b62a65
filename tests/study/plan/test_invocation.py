"""The dry run's first lines (plan/invocation.py) against the committed study: its record with the
names of the runs an invocation asked for, and its ledger. The expected counts come from the
decision rules, not from the code: the second look is 16 more seeds in each of six cells
(docs/decision-rules.md, "Second look"), and Fig. 1's run is one more where no weights are here."""

import json
import re

import pytest

from deepdensity.study.core import ledger
from deepdensity.study.core.preset import load_study
from deepdensity.study.plan.invocation import invocation_lines
from tests.support import ROOT

SECOND_LOOK = 6 * 16
FIRST_LOOK = "2026-11-28 13:06 UTC"  # the first look's record was made (docs/decision-rules.md: at 4064109)
AVX512 = "fpu sse4_1 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16"  # the first look's set (AMD EPYC)
AVX2 = "fpu sse4_1 avx avx2"


@pytest.fixture(scope="module")
def committed():
    """(study, ledger entries, record): the default preset, the committed ledger as the first
    look left it (its entries finished by the first look's record, FIRST_LOOK), and the committed
    record naming as its runs every run of those entries (the last invocation's, as record.py
    now writes them)."""
    _, study = load_study("default")
    entries = [e for e in ledger.read_entries(ROOT / "reports" / "ledger.jsonl") if e["finished"] <= FIRST_LOOK]
    record = json.loads((ROOT / "reports" / "study.json").read_text())
    names = sorted({e["run"] for e in entries})
    record["provenance"] = {**record["provenance"], "runs": {"trained": names[:18], "reused": names[18:]}}
    return study, entries, record


def counts(lines) -> tuple:
    trains, reuses = re.match(r"this invocation: trains (\d+) run\(s\) and reuses (\d+), about ", lines[0]).groups()
    return int(trains), int(reuses)


def test_a_new_runs_folder_trains_the_second_look_and_fig1s_run_and_reuses_the_rest(committed, tmp_path):
    study, entries, record = committed
    names = {e["run"] for e in entries}
    stack = {n for n in names if n.startswith("stack-tf2210-")}
    lines = invocation_lines(study, entries, record, 2, tmp_path, "stack-tf2210-", AVX512)
    assert counts(lines) == (SECOND_LOOK + 1, len(names)), lines
    assert "with the clock first, 8-12 min" in lines[0]
    assert lines[1] == "  to train: 96 of the second look; fig1-seq-s3 for Fig. 1's weights"
    # without --stack-check its runs are not asked for
    lines = invocation_lines(study, entries, record, 2, tmp_path, "", AVX512)
    assert counts(lines) == (SECOND_LOOK + 1, len(names) - len(stack))


def test_runs_the_folder_holds_are_reused_and_its_clock_held(committed, tmp_path):
    study, entries, record = committed
    (tmp_path / "timing.json").write_text("{}")
    (tmp_path / "fig1-seq-s3").mkdir()
    (tmp_path / "fig1-seq-s3" / "weights.h5").write_bytes(b"")
    for name in ("weak-n4-s8", "seq-2eta-s11"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text("{}")
    lines = invocation_lines(study, entries, record, 2, tmp_path, "stack-tf2210-", AVX512)
    names = {e["run"] for e in entries}
    # Fig. 1 reads the weights the folder holds: its run is not asked for (repro.py)
    assert counts(lines) == (SECOND_LOOK - 2, len(names) + 2), lines
    assert "the clock held in its runs folder" in lines[0] and "fig1" not in lines[1]


def test_an_avx2_machine_trains_the_isa_check_under_its_own_cap_and_none_of_the_second_look(committed, tmp_path):
    """The check caps oneDNN one set below the machine's: AVX2 on AVX-512 (the committed runs'),
    SSE4.1 on AVX2, whose runs no ledger holds. The second look trains only where oneDNN can be
    held to the first look's set (second_look.py): not on AVX2, and what is not trained is not
    counted by the invocation either."""
    study, entries, record = committed
    isa = {e["run"] for e in entries if e["run"].startswith("isa-avx2-")}
    lines = invocation_lines(study, entries, record, 2, tmp_path, "stack-tf2210-", AVX2)
    assert counts(lines) == (1 + len(isa), len({e["run"] for e in entries}) - len(isa)), lines
    assert f"{len(isa)} of the last study's runs no ledger holds (isa-sse41-" in lines[1]
    assert lines[2] == (
        "  not counted: 96 run(s) no ledger holds that it will not train (the second look's: this CPU cannot "
        "be held to Intel AVX-512 with Intel DL Boost and bfloat16 support)"
    )


def test_no_train_trains_nothing_and_counts_what_it_holds(committed, tmp_path):
    study, entries, record = committed
    lines = invocation_lines(study, entries, record, 2, tmp_path, "stack-tf2210-", AVX512, no_train=True)
    assert counts(lines) == (0, len({e["run"] for e in entries}))
    assert lines[1] == f"  not counted: {SECOND_LOOK + 1} run(s) no ledger holds that it will not train (--no-train)"


def test_a_record_that_does_not_name_its_runs_says_so(committed, tmp_path):
    study, entries, record = committed
    older = {**record, "provenance": {k: v for k, v in record["provenance"].items() if k != "runs"}}
    assert invocation_lines(study, entries, older, 2, tmp_path, "", AVX512) == [
        "this invocation: its last record does not name its runs: the runs below, each trained unless held "
        "(with the clock first, 8-12 min)"
    ]
    assert invocation_lines(study, entries, None, 2, tmp_path, "", AVX512)[0].startswith(
        "this invocation: no earlier record of this preset"
    )
