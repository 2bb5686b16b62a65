"""The pooled contrasts beside the claims and warmup's claim as the runs have it (contrasts.py),
on the hand-made studies of test_claims.py."""

import math

import pytest

from deepdensity.study.core.cells import MISSED, Evidence, TimeBase
from deepdensity.study.judge.contrasts import contrasts, warmup_holds_to
from tests.study.judge.test_claims import CLOCKS, COLLAPSE, W, papers_outcome


def test_the_pooled_contrasts_and_warmups_reformulation():
    v = Evidence(papers_outcome(), W, MISSED, COLLAPSE, CLOCKS, TimeBase(320, 64))
    rows = {r[0].split(",")[0]: r for r in contrasts(v)}
    linear_weak = rows["linear misses more often than weak"]
    assert linear_weak[1] == "40/40 against 0/40"
    # all 40 linear runs missed, no weak run did: Fisher's one-sided p = 1 / C(80, 40)
    assert float(linear_weak[3]) == pytest.approx(1 / math.comb(80, 40), rel=0.05)
    assert warmup_holds_to(v).startswith("every warmup cell converges up to N = 4; the first that fails is N = 8")


def test_the_seeds_that_could_call_a_comparison_read_the_same_in_both_studies():
    from deepdensity.study.judge.contrasts import more_a_side

    assert more_a_side(3) == "3 more a side"
    assert more_a_side(None) == "not within 50 more a side", "seeds_to_reject looks 50 seeds a side far"
