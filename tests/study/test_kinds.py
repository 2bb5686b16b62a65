"""The study's kind is decided in one place (kinds.of_study, kinds.of_record), and a kind and
its record agree: a study's kind reads its own record back as itself (issue 44)."""
import json

import pytest

from deepdensity.scaling import policies
from deepdensity.study import kinds
from deepdensity.study.core.preset import load_study, Study
from deepdensity.study.report import paper_report as report, report_beyond
from tests.support import ROOT


def test_a_preset_running_a_mode_past_the_paper_is_a_beyond_study():
    assert kinds.of_study(Study(modes=list(policies.paper()))) is kinds.PAPER
    for mode in policies.beyond():
        assert kinds.of_study(Study(modes=[policies.STRONG, mode])) is kinds.BEYOND
    assert kinds.of_study(load_study("default")[1]) is kinds.PAPER
    assert kinds.of_study(load_study("beyond")[1]) is kinds.BEYOND


@pytest.mark.parametrize("folder, kind", [("reports", kinds.PAPER), ("reports/beyond", kinds.BEYOND),
                                          ("tests/study/data/tiny-reports", kinds.PAPER)])
def test_a_committed_record_is_read_as_the_kind_that_wrote_it(folder, kind):
    record = json.loads((ROOT / folder / "study.json").read_text())
    assert record["kind"] == kind.name and kinds.of_record(record) is kind


def test_a_record_without_a_kind_reads_as_the_papers_as_it_always_did():
    assert kinds.of_record({}) is kinds.PAPER and kinds.of_record({"kind": "other"}) is kinds.PAPER


def test_each_kind_names_its_own_reports():
    assert kinds.PAPER.text_outputs() == report.TEXT_OUTPUTS
    assert kinds.BEYOND.text_outputs() == report_beyond.TEXT_OUTPUTS

