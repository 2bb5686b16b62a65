"""The second look in REPORT.md (report/two_looks.py), on the committed record with second-look runs
added: the first look's verdicts are the committed study's own (reports/claims.json, judged when
there was one look), the stacks' test is Fisher's exact test as written out below with math.comb,
and the runs an open cell would need come from the exact interval computed here with scipy."""

import copy
import json
import math

import pytest
from scipy.stats import beta

from deepdensity.study.core import stats
from deepdensity.study.record import study_of
from deepdensity.study.report import two_looks
from tests.support import ROOT

# reports/claims.json as the first look left it, before the second look's runs were added
FIRST_LOOK_VERDICTS = {
    "strong_converges": "reproduced",
    "linear_fails": "inconclusive",
    "warmup_to_four": "inconclusive",
    "weak_efficiency": "inconclusive",
    "strong_fastest": "reproduced",
    "double_eta_diverges": "inconclusive",
}


def _first_look() -> dict:
    """The committed record as the first look left it (docs/decision-rules.md): the sequential
    runs' seeds 3-10 (strong scaling and every N = 1 read off them, and 2 x eta's), the other
    cells' 0-7."""
    record = json.loads((ROOT / "reports" / "study.json").read_text())
    record["study"].pop("second_look_seeds", None)
    sequential = range(3, 11)
    record["cells"] = [
        c for c in record["cells"] if c["seed"] in (sequential if c["mode"] == "strong" or c["n"] == 1 else range(8))
    ]
    record["seq_2eta"] = [r for r in record["seq_2eta"] if r["seed"] in sequential]
    return record


def _with_second_look(missed: dict, missed_2eta: int) -> dict:
    """The first look's record, each cell of `missed` ((mode, N): misses among 16 more seeds, the
    first ones) and 2 x eta given seeds 8-23 (2 x eta 11-26), as the second look gives them."""
    record = _first_look()
    record["study"]["second_look_seeds"] = 24
    for (mode, n), k in missed.items():
        cell = [c for c in record["cells"] if (c["mode"], c["n"]) == (mode, n)]
        reached = next(c for c in cell if c["status"] == "reached_target")
        miss = {**reached, "status": "max_epochs", "epochs_to_target": None, "passes_to_target": None}
        for i, seed in enumerate(range(8, 24)):
            record["cells"].append(
                {**copy.deepcopy(miss if i < k else reached), "seed": seed, "run": f"{mode}-n{n}-s{seed}"}
            )
    reached = next(r for r in record["seq_2eta"] if r["status"] == "reached_target")
    for i, seed in enumerate(range(11, 27)):
        record["seq_2eta"].append(
            {**reached, "seed": seed, "status": "collapsed" if i < missed_2eta else reached["status"]}
        )
    return record


OPEN_CELLS = {("weak", 4): 0, ("warmup", 4): 0, ("warmup", 8): 6, ("linear", 2): 9, ("linear", 4): 16}


def test_the_first_looks_verdicts_are_the_first_looks_whatever_the_second_look_found():
    record = _with_second_look(OPEN_CELLS, 12)
    study = study_of(record)
    assert two_looks.has_second_look(record, study)
    assert not two_looks.has_second_look(_first_look(), study)
    assert two_looks.first_look_verdicts(record, study) == FIRST_LOOK_VERDICTS


def _fisher_two_sided(a: int, n_a: int, b: int, n_b: int) -> float:
    """The sum of the hypergeometric probabilities of the tables with the margins of the observed
    one and a probability no larger than its (Fisher 1935; R's fisher.test, relative 1e-7)."""
    total, missed = n_a + n_b, a + b

    def prob(x: int) -> float:
        return math.comb(n_a, x) * math.comb(n_b, missed - x) / math.comb(total, missed)

    seen = prob(a)
    return sum(prob(x) for x in range(max(0, missed - n_b), min(n_a, missed) + 1) if prob(x) <= seen * (1 + 1e-7))


@pytest.mark.parametrize(
    "a, n_a, b, n_b", [(1, 8, 2, 16), (3, 8, 9, 16), (4, 8, 16, 16), (0, 8, 16, 16), (17, 48, 42, 96)]
)
def test_the_stacks_test_is_fishers_two_sided(a, n_a, b, n_b):
    assert stats.fisher_two_sided(a, n_a, b, n_b) == pytest.approx(_fisher_two_sided(a, n_a, b, n_b), rel=1e-9)


def test_the_stacks_are_tested_cell_by_cell_and_pooled_and_a_cell_that_differs_gives_each_stacks_rate():
    """warmup N = 8 at 1 of 8 then 16 of 16 missed differs after Holm over the six cells; the
    others do not."""
    record = _with_second_look({**OPEN_CELLS, ("warmup", 8): 16}, 4)
    text = two_looks.stacks_section(record, study_of(record), [])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    p = _fisher_two_sided(1, 8, 16, 16)
    assert rows["warmup N = 8"].endswith(f"| {p:.2g} | {min(1, 6 * p):.2g} **differ** |")
    assert "**differ**" not in rows["weak N = 4"] and rows["2 x eta"].startswith("| 2 x eta | 4 of 8 (")
    # the first look's misses as docs/decision-rules.md lists them, then the ones given above
    first, second = [1, 1, 1, 3, 7, 4], [0, 0, 16, 9, 16, 4]
    assert f"Pooled over the 6 cells: {sum(first)} of 48 missed at the first look, {sum(second)} of 96 at" in text
    assert "warmup N = 8: 1 of 8 missed (12%, 95% CI 0.00-0.53): inconclusive on the first look's stack" in text
    assert "16 of 16 missed (100%, 95% CI 0.79-1.00): fails on the second's" in text


def _leaves_band(missed: int, runs: int, level: float) -> bool:
    """Clopper-Pearson at `level`, written out: the bounds are beta quantiles."""
    tail = (1 - level) / 2
    low = beta.ppf(tail, missed, runs - missed + 1) if missed else 0.0
    high = beta.ppf(1 - tail, missed + 1, runs - missed) if missed < runs else 1.0
    return high < 0.5 or low > 0.5


def test_a_cell_still_open_says_its_rate_and_the_runs_that_rate_would_need():
    """warmup N = 8 at 7 of 24 (1 + 6), linear N = 2 at 12 of 24 (3 + 9) and 2 x eta at 12 of 24
    (4 + 8) stay open at 97.5 %;
    at 7/24 the band is left first at the n where the exact interval of round(7/24 n) clears
    0.5; at 1/2 never."""
    record = _with_second_look(OPEN_CELLS, 8)
    opened = two_looks.still_open(record, study_of(record))
    need = next(n for n in range(24, 2000) if _leaves_band(round(7 / 24 * n), n, 0.975))
    assert opened["warmup_to_four"] == [
        f"N = 8: 7 of 24 missed (29%, 97.5% CI 0.11-0.54): inconclusive; at that rate {need} runs in all would "
        "leave the 0.5 band"
    ]
    assert opened["linear_fails"][0].endswith("at that rate no number of runs would leave the 0.5 band")
    assert opened["double_eta_diverges"][0].startswith("2 x eta: 12 of 24 missed (50%, 97.5% CI")
    assert "weak_efficiency" not in opened, "weak N = 4 at 1 of 24 converges"


def test_the_committed_report_says_after_each_cell_still_open_that_no_third_look_follows():
    """reports/REPORT.md (both looks): each claim with a cell still open after the second look
    says that the rules give it no third look, beside the runs its rate would need."""
    text = (ROOT / "reports" / "REPORT.md").read_text().replace("\n", " ")
    blocks = text.split("Still inconclusive after both looks: ")[1:]
    assert len(blocks) == 2, "linear (N = 2, 4) and 2 x eta stay open"
    assert all("The rules give no cell a third look" in block.split("###")[0] for block in blocks)
