"""`python -m deepdensity.study.ledger_import`: an earlier record's runs into a ledger. Checked here
without a runs folder: the refusal of a record it cannot read, and which runs a record describes
fully enough to import."""

import json

from deepdensity.study import ledger_import
from tests.support import ROOT


def test_a_record_of_another_format_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    record = json.loads((ROOT / "reports" / "study.json").read_text())
    old = tmp_path / "study.json"
    old.write_text(json.dumps({**record, "format": 1}))
    out = tmp_path / "ledger.jsonl"
    assert ledger_import.main([str(old), "--runs", str(tmp_path), "--source", "test", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not a study record of format 2 (got 1)" in err and "Traceback" not in err
    assert not out.exists()


def test_a_cell_that_reached_without_its_passes_is_not_imported():
    """At N > 1 an epoch is N passes (per_worker): a cell that reached the target and kept no
    passes could only be priced at its epochs' ends, up to N - 1 passes too high. Its record's
    other runs are imported; a miss has no passes to keep."""
    record = json.loads((ROOT / "reports" / "study.json").read_text())
    assert record["settings"]["epoch_definition"] == "per_worker"
    names = lambda r: {run[0] for run in ledger_import.record_runs(r)}  # noqa: E731
    every = names(record)
    trained = [c for c in record["cells"] if c["n"] > 1 and c["run"] in every and not c["run"].startswith("seq-")]
    reached = next(c for c in trained if c["status"] == "reached_target")
    missed = next(c for c in trained if c["status"] != "reached_target")
    reached["passes_to_target"] = missed["passes_to_target"] = None
    assert names(record) == every - {reached["run"]}
