"""A run's outcome under the sensitivity definition of failure (deepdensity/study/core/outcomes.py).
The statuses are written as the records hold them (result.json, the ledger), strings."""
import pytest

from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import outcomes


@pytest.mark.parametrize("status, final, want", [
    ("reached_target", 0.001, outcomes.REACHED), ("diverged", None, outcomes.FAILED),
    ("stalled", 0.0049, outcomes.FAILED),                  # ended at the collapse level: learnt nothing
    ("stalled", 0.0026, outcomes.SLOW),                    # warmup N = 8 seed 4 of the AVX-512 study
    ("max_epochs", 0.003, outcomes.SLOW), ("max_epochs", float("nan"), outcomes.FAILED),
    ("collapsed", 0.0049, outcomes.FAILED),
])
def test_a_run_fails_only_at_the_collapse_level_or_a_non_finite_loss(status, final, want):
    assert outcomes.outcome(status, final, collapse_loss=0.00488) == want


def test_a_status_reads_and_writes_as_the_string_the_records_hold():
    """RunStatus is the status string itself: JSON writes the string, and a record's string
    compares equal to the member (records made before the enum read the same)."""
    import json
    assert json.dumps({"status": RunStatus.REACHED}) == '{"status": "reached_target"}'
    assert [s.value for s in RunStatus] == ["reached_target", "diverged", "collapsed", "stalled", "max_epochs"]
    assert "stalled" == RunStatus.STALLED and f"{RunStatus.CAPPED}" == "max_epochs"
