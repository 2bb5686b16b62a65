"""Reports are generated, never edited: rendering a study's record (study.json) again must
give its committed reports exactly, so that a hand edit, or a report older than the code that
renders it, fails here; and the study's kind (rerender.PAPER, rerender.BEYOND), told from a
preset or a record, names the reports it renders."""

import json
import shutil
from pathlib import Path

import pytest

from deepdensity.scaling import policies
from deepdensity.study import rerender
from deepdensity.study.core.preset import Study, load_study
from deepdensity.study.record import FORMAT
from deepdensity.study.report import paper_report as report
from deepdensity.study.report import report_beyond
from tests.support import ROOT

# A tiny study's record and reports (python -m deepdensity.repro on a 96-cube preset, then
# `python -m deepdensity report --from tests/study/data/tiny-reports` after a rendering change).
FIXTURE = Path(__file__).parent / "data" / "tiny-reports"


def test_a_record_renders_to_its_committed_reports(tmp_path):
    rerender.rerender(FIXTURE, tmp_path / "r")
    assert rerender.differences(FIXTURE, tmp_path / "r") == []
    for name in ("fig1.png", "fig2.png", "fig_efficiency.png", "fig_collapse.png", "fig4.png", "fig5.png"):
        assert (tmp_path / "r" / name).stat().st_size > 0, name


@pytest.mark.medium
def test_a_one_word_hand_edit_fails_the_check(tmp_path, capsys):
    copy = tmp_path / "reports"
    shutil.copytree(FIXTURE, copy)
    text = (copy / "REPORT.md").read_text()
    assert rerender.main(["--from", str(copy), "--check"]) == 0
    assert "**inconclusive**" in text
    (copy / "REPORT.md").write_text(text.replace("**inconclusive**", "**reproduced**", 1))
    assert rerender.main(["--from", str(copy), "--check"]) == 1
    out = capsys.readouterr().out
    assert "-| Strong scaling always converges" in out and "1 report(s) differ" in out


def test_a_record_of_format_1_is_refused_in_one_line(tmp_path, capsys):
    """Format 1 (the lr search under "sweep") is no longer read: no committed record holds it,
    and a report rendered from one would be from code that no longer judges it. It is refused."""
    copy = tmp_path / "reports"
    shutil.copytree(FIXTURE, copy)
    record = json.loads((copy / "study.json").read_text())
    assert record["format"] == FORMAT == 2 and "sweep" not in record
    old = {**{k: v for k, v in record.items() if k != "lr_search"}, "format": 1, "sweep": record["lr_search"]}
    (copy / "study.json").write_text(json.dumps(old, indent=1))
    assert rerender.main(["--from", str(copy), "--check"]) == 2
    assert "is not a study record of format 2 (got 1)" in capsys.readouterr().err


def test_a_folder_without_a_record_is_refused(tmp_path, capsys):
    assert rerender.main(["--from", str(tmp_path)]) == 2
    assert "study.json does not exist" in capsys.readouterr().err


@pytest.mark.medium
@pytest.mark.smoke
@pytest.mark.parametrize("folder", ["reports", "reports/beyond"])
def test_committed_reports_are_what_the_code_renders(folder, tmp_path):
    committed = ROOT / folder
    if not (committed / "study.json").is_file():
        pytest.skip(f"no study committed at {folder}/ (make repro writes one)")
    assert json.loads((committed / "study.json").read_text()).get("format") == FORMAT, (
        f"{folder}/study.json predates the record format: run the study again"
    )
    rerender.rerender(committed, tmp_path / "r")
    assert rerender.differences(committed, tmp_path / "r") == []


def test_a_figure_not_drawn_is_neither_described_nor_left_stale(tmp_path):
    """A record without Fig. 1's slices renders no fig1.png: an earlier render's is removed (the
    renderer owns its figures' names, nothing else in the folder), and the captions do not
    describe it."""
    copy = tmp_path / "reports"
    shutil.copytree(FIXTURE, copy)
    record = json.loads((copy / "study.json").read_text())
    (copy / "study.json").write_text(json.dumps({**record, "fig1": None}, indent=1))
    (copy / "fig1.png").write_bytes(b"an earlier render's")
    (copy / "notes.png").write_bytes(b"not the renderer's")
    rerender.rerender(copy, copy)
    text = (copy / "REPORT.md").read_text()
    assert not (copy / "fig1.png").exists() and (copy / "notes.png").exists()
    assert "Fig. 1: not drawn" in text and "Fig. 1: central slices" not in text and "![fig1]" not in text
    assert "Fig. 1: central slices" in (FIXTURE / "REPORT.md").read_text()


def test_fig4_and_fig5_are_linked_and_described_only_where_drawn(tmp_path, monkeypatch):
    """A study without weak scaling draws no Fig. 5: the report neither links it nor describes it,
    and Fig. 4's caption still follows the collapse figure's (templates/report.md)."""
    record = json.loads((FIXTURE / "study.json").read_text())

    def captions(drawn: set) -> tuple:
        monkeypatch.setattr(report, "draw_figures", lambda *args: drawn)
        report.render_reports(tmp_path, record)
        text = (tmp_path / "REPORT.md").read_text()
        return text, [
            line[:6] for line in text[text.index("Collapse: share") :].splitlines() if line.startswith("Fig. ")
        ]

    text, later = captions({"fig2.png", "fig4.png"})
    assert "![fig4](fig4.png)" in text and "fig5" not in text and "Fig. 5" not in text
    assert later == ["Fig. 4"]
    assert captions({"fig4.png", "fig5.png", "fig6.png"})[1] == ["Fig. 4", "Fig. 5", "Fig. 6"]


def test_a_record_whose_clock_is_of_another_version_is_refused_in_one_line(tmp_path, capsys):
    """The clock's model reads version-5 clocks only (the keys older ones lacked have no defaults
    now); a record of format 2 with an older clock, as reports folders of 2026-11-26 hold, is
    refused in one line, not a KeyError."""
    copy = tmp_path / "reports"
    shutil.copytree(FIXTURE, copy)
    record = json.loads((copy / "study.json").read_text())
    old = {k: v for k, v in record["timing"].items() if k not in ("controller", "allreduce_latency_s")}
    (copy / "study.json").write_text(json.dumps({**record, "timing": {**old, "clock_version": 3}}, indent=1))
    assert rerender.main(["--from", str(copy), "--check"]) == 2
    err = capsys.readouterr().err
    assert "holds a clock of version 3; this code reads version 5 only" in err and "Traceback" not in err


def test_a_preset_running_a_mode_past_the_paper_is_a_beyond_study():
    assert rerender.of_study(Study(modes=list(policies.paper()))) is rerender.PAPER
    for mode in policies.beyond():
        assert rerender.of_study(Study(modes=[policies.STRONG, mode])) is rerender.BEYOND
    assert rerender.of_study(load_study("default")[1]) is rerender.PAPER
    assert rerender.of_study(load_study("beyond")[1]) is rerender.BEYOND


@pytest.mark.parametrize(
    "folder, kind",
    [
        ("reports", rerender.PAPER),
        ("reports/beyond", rerender.BEYOND),
        ("tests/study/data/tiny-reports", rerender.PAPER),
    ],
)
def test_a_committed_record_is_read_as_the_kind_that_wrote_it(folder, kind):
    record = json.loads((ROOT / folder / "study.json").read_text())
    assert record["kind"] == kind.name and rerender.of_record(record) is kind


def test_a_record_without_a_kind_reads_as_the_papers_as_it_always_did():
    assert rerender.of_record({}) is rerender.PAPER and rerender.of_record({"kind": "other"}) is rerender.PAPER


@pytest.mark.medium
def test_a_beyond_report_rendered_over_an_earlier_one_keeps_only_its_own_files(tmp_path):
    """The committed beyond study ran the filter and the batch sweep; rendered into a folder that
    holds an earlier study's adaptive figure, a study that ran neither leaves none of fig7-fig9,
    their JSON or the filter's figures behind; the committed record re-rendered keeps its own."""
    beyond = ROOT / "reports" / "beyond"
    record = json.loads((beyond / "study.json").read_text())
    out = tmp_path / "reports"
    shutil.copytree(beyond, out)
    (out / "fig7.png").write_bytes((out / "fig8.png").read_bytes())  # an earlier study's adaptive figure
    report_beyond.render_reports(out, {**record, "filtering": None, "batch_sweep": None})
    stale = (
        "fig7.png",
        "fig8.png",
        "fig9.png",
        "filtering.json",
        "batch_sweep.json",
        "filter.embedding.png",
        "filter.dropped.png",
    )
    assert [name for name in stale if (out / name).exists()] == []
    report_beyond.render_reports(out, record)
    assert all((out / name).exists() for name in ("fig8.png", "fig9.png", "filtering.json", "batch_sweep.json"))
