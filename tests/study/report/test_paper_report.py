"""REPORT.md of the default study (report/paper_report.py), on the tiny study's record: what the
cells below the design's seeds would cost, by the plan's estimate (study_plan.passes_to_expect
and hours_here), worked by hand from the record."""
import json
import re
from pathlib import Path

import pytest

from deepdensity.study import rerender

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
    assert said.group(1) == (f"about 28 passes, {hours:.1f} h here at 1.83 s a pass (this study's runs' own "
                             f"clocks), 2 at a time")
    assert said.group(2) == ("weak N = 2: 3 of 4 seeds run; linear N = 2: 3 of 4 seeds run; "
                             "warmup N = 2: 3 of 4 seeds run; 2 x eta: 3 of 4 seeds run")
