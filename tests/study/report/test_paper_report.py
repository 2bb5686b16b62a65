"""REPORT.md of the default study (report/paper_report.py), on the tiny study's record: what the
cells below the design's seeds would cost, by the plan's estimate (study_plan.passes_to_expect
and hours_here), worked by hand from the record; and the sentences of templates/report.md that
no committed record shows, on the record changed to show them."""

import json
import re
from pathlib import Path

import pytest

from deepdensity.study import rerender
from tests.support import ROOT

FIXTURE = Path(__file__).parents[1] / "data" / "tiny-reports"


@pytest.mark.medium
def test_the_cells_below_the_designs_seeds_are_priced_as_the_plan_prices_them(tmp_path):
    record = json.loads((FIXTURE / "study.json").read_text())
    # every trained cell holds seeds 0-2; a design of four seeds leaves each one seed short
    record["study"]["seeds"] = [0, 1, 2, 3]
    folder = tmp_path / "record"
    folder.mkdir()
    (folder / "study.json").write_text(json.dumps(record))
    rerender.rerender(folder, tmp_path / "out")
    text = " ".join((tmp_path / "out" / "REPORT.md").read_text().split())
    said = re.search(r"Cells below the design's 4 seeds, .*?\((about .*?)\): (.*?)\. A claim", text)
    assert said, "the report names the cells below the design's seeds"
    # one missing seed each, at the median (lower) of the cell's epochs x N passes an epoch:
    # weak N = 2 ran 5, 5, 6 epochs: 10 passes; linear 3, 3, 4: 6; warmup 4, 4, 4: 8;
    # 2 x eta 4, 3, 4 at N = 1: 4. 28 passes at the record's 1.827 s a pass, 2 at a time.
    hours = 28 * 1.827 / 3600 / 2
    assert said.group(1) == (
        f"about 28 passes, {hours:.1f} h here at 1.83 s a pass (this study's runs' own clocks), 2 at a time"
    )
    assert said.group(2) == (
        "weak N = 2: 3 of 4 seeds run; linear N = 2: 3 of 4 seeds run; "
        "warmup N = 2: 3 of 4 seeds run; 2 x eta: 3 of 4 seeds run"
    )


def _rendered(tmp_path, change) -> str:
    """REPORT.md of the tiny study's record after `change(record)`, its lines joined."""
    record = json.loads((FIXTURE / "study.json").read_text())
    change(record)
    folder = tmp_path / "record"
    folder.mkdir()
    (folder / "study.json").write_text(json.dumps(record))
    rerender.rerender(folder, tmp_path / "out")
    return " ".join((tmp_path / "out" / "REPORT.md").read_text().split())


@pytest.mark.medium
def test_the_sentences_the_committed_reports_never_show_still_render(tmp_path):
    """The template's branches no committed record takes (templates/report.md): an interim
    report, a stall check in which a stopped run reached the target when trained on, and an lr
    search that kept no collapse level. Each sentence is written out here by hand."""
    committed = json.loads((ROOT / "reports" / "study.json").read_text())

    def change(record):
        record["provenance"]["more_seeds_stopped_at"] = "--no-train: the ledger's runs only"
        record["stall_check"] = [
            {"mode": "weak", "n": 2, "seed": 1, "stopped_after": 3, "status": "reached_target", "epochs": 9},
            {"mode": "linear", "n": 2, "seed": 0, "stopped_after": 4, "status": "max_epochs", "epochs": 20},
        ]
        record["lr_search"] = {k: v for k, v in committed["lr_search"].items() if k != "collapse_loss"}

    text = _rendered(tmp_path, change)
    assert "by `python -m deepdensity.repro --no-train` at git revision" in text
    assert "**An interim report**: rendered with `--no-train` from the runs the ledger holds;" in text
    assert (
        "The stall rule, checked: of 2 run(s) it stopped, trained again to the cap with the rule off, 1 reached "
        "the target, so the rule ended runs that would have reached the target: those count as reached above, "
        "and the rule is wrong for this study (weak N = 2 seed 1: stopped after 3 epochs, to the cap "
        "reached_target after 9; linear N = 2 seed 0: stopped after 4 epochs, to the cap max_epochs after 20)."
    ) in text
    assert (
        "eta is the edge of stability on this data: the largest lr on the grid 0.00105 x sqrt(2)^k that converges "
        "over 16 sequential epochs for every seed (tried: "
    ) in text
    assert "collapse level" not in text[text.index("eta is the edge of stability") :][:300]


@pytest.mark.medium
def test_a_record_of_real_runs_says_so_in_its_header_and_its_convergence_line(tmp_path):
    text = _rendered(tmp_path, lambda record: record.update(runner="horovodrun -np {n}"))
    assert "Preset `tiny` (real runs: horovodrun -np {n}); generated" in text
    assert "- Convergence (epochs to target): real multi-worker runs." in text
    assert "emulated workers, modelled time" not in text


def test_a_run_of_seeds_with_one_reason_is_one_entry_of_the_seeds_table():
    """A second look's 16 seeds are "seeds 8-23: why", not 16 entries (a 1,430-character line)."""
    from deepdensity.study.report.paper_report import _seeds_and_why

    reasons = [{"seed": s, "why": "second look"} for s in range(8, 24)] + [
        {"seed": 25, "why": "second look"},
        {"seed": 26, "why": "stall check"},
    ]
    assert _seeds_and_why(reasons) == ["seeds 8-23: second look", "seed 25: second look", "seed 26: stall check"]
    assert _seeds_and_why([]) == []
