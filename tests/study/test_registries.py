"""Adding a claim or a clock is one registry entry and its own function (claims.CLAIMS,
clocks.JUDGED): a dummy of each, registered here, reaches the rendered REPORT.md and
claims.json of the tiny study's record with nothing else changed."""

import json
from pathlib import Path

import pytest

from deepdensity.study import rerender
from deepdensity.study.core import clocks
from deepdensity.study.judge import call_claims, claims

FIXTURE = Path(__file__).parent / "data" / "tiny-reports"


def every_mode_ran(v, seq_2eta) -> dict:
    """A dummy claim: every (mode, N) cell of the study holds a run."""
    ran = sorted({c.mode for c in v.cells})
    return call_claims.claim_row(
        "Every mode ran (a dummy claim)",
        "-",
        "a cell of each mode holds a run",
        f"modes run: {', '.join(ran)}",
        "reproduced",
        "-",
        (f"{len(ran)} modes ran", "-"),
    )


@pytest.mark.medium
def test_a_registered_claim_and_clock_reach_the_rendered_report(tmp_path, monkeypatch):
    monkeypatch.setitem(
        claims.CLAIMS, "every_mode_ran", claims.ClaimRule("every_mode_ran", every_mode_ran, lambda v, seq_2eta: True)
    )
    # a clock whose communication costs 5 x compute: time claims are judged under it too
    monkeypatch.setattr(
        clocks,
        "JUDGED",
        clocks.JUDGED
        + (
            clocks.JudgedClock(
                "slow_network", "a slow network's clock", lambda host: host.with_rho(5.0, "slow_network")
            ),
        ),
    )
    rerender.rerender(FIXTURE, tmp_path)
    written = json.loads((tmp_path / "claims.json").read_text())
    assert [c["key"] for c in written][-1] == "every_mode_ran"
    assert all(set(c["verdicts"]) == {"paper", "host", "device", "slow_network"} for c in written)
    text = (tmp_path / "REPORT.md").read_text()
    answer, full = text.split("## Claims", 1)
    assert "| Every mode ran (a dummy claim) | - | 4 modes ran | **reproduced** | - |" in answer
    # each claim judged under every registered clock: a row of its own in the claim's section
    assert full.count("| a slow network's clock | ") == len(written)
    # what the registries held before is rendered as committed
    monkeypatch.undo()
    rerender.rerender(FIXTURE, tmp_path / "again")
    assert rerender.differences(FIXTURE, tmp_path / "again") == []
