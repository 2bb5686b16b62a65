"""`python -m deepdensity.study.ledger_import`: an earlier record's runs into a ledger. Only the
refusal of a record it cannot read is checked here, without a runs folder."""
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
