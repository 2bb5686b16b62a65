"""Ranks.chief_check: a refusal rank 0 alone can see stops every rank (under horovodrun the
others went on into a collective rank 0 had left, and crashed there with tracebacks)."""

import pytest

from deepdensity.training.agree import Ranks
from deepdensity.training.run_folder import RunError


class TwoRanks:
    """One rank of two; broadcast_object hands out what rank 0 sent (`chief_sends`)."""

    def __init__(self, rank, chief_sends=None):
        self._rank, self.chief_sends, self.broadcasts = rank, chief_sends, 0

    def rank(self):
        return self._rank

    def size(self):
        return 2

    def broadcast_object(self, obj):
        self.broadcasts += 1
        return obj if self._rank == 0 else self.chief_sends


def test_the_chief_returns_its_value_and_the_others_none_without_running_the_check():
    ran = []
    chief, other = TwoRanks(0), TwoRanks(1)
    assert Ranks(chief).chief_check(lambda: ran.append(0) or {"epoch": 3}, on_chief=True) == {"epoch": 3}
    assert Ranks(other).chief_check(lambda: ran.append(1), on_chief=False) is None
    assert ran == [0]
    assert chief.broadcasts == other.broadcasts == 1, "every rank joins the one broadcast"


def test_a_refusal_on_the_chief_is_raised_on_every_rank():
    refusal = RunError("output folder runs/x already holds a run")

    def refuse():
        raise refusal

    with pytest.raises(RunError, match="already holds a run"):
        Ranks(TwoRanks(0)).chief_check(refuse, on_chief=True)
    with pytest.raises(RunError, match="already holds a run"):
        Ranks(TwoRanks(1, chief_sends=refusal)).chief_check(refuse, on_chief=False)


def test_other_errors_are_not_swallowed():
    def crash():
        raise KeyError("a bug, not a refusal")

    with pytest.raises(KeyError):
        Ranks(TwoRanks(0)).chief_check(crash, on_chief=True)
