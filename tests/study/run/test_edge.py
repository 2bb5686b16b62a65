"""The edge-of-stability search (sequential.py) through the study's runner: the last lr on the grid that
converges on every seed, a collapsed run counted as not converging, and the speculative probe
beside each that cannot move the edge."""

import math

import pytest

from deepdensity.study.run.sequential import find_edge
from tests.support import FakeRunner


def test_the_edge_search_through_the_study_finds_the_last_converging_lr(tmp_path):
    edge = 0.00105 * 2**1.5  # grid index 3 converges, 4 diverges

    def curve(lr, seed, e):  # converges below the edge; Fig. 3 above it
        return 0.1 / (1 + e) if lr <= edge * 1.0001 else [0.05, 0.03, 0.2][min(e, 2)]

    runner = FakeRunner(tmp_path, curve)
    eta, probes = find_edge(runner, 0.00105, 12, 3, [0], None, say=lambda *a: None)
    assert eta == pytest.approx(edge)
    assert [p["k"] for p in probes] == [0, 1, 2, 3, 4] and [p["diverges"] for p in probes] == [False] * 4 + [True]
    assert probes[-1]["epochs"] == 5, "the diverging probe stalled 3 epochs after its best"


def test_the_edge_holds_for_every_seed_and_a_collapsed_run_does_not_converge(tmp_path):
    collapse = 0.005

    def curve(lr, seed, e):
        k = round(math.log(lr / 0.00105, 2**0.5))
        if seed == 7 and k in (3, 4):  # falls steadily, but onto the collapse level
            return 0.0065 - 0.0015 * (1 - 0.5**e)
        return 0.01 / (1 + e) if k < 5 else [0.05, 0.03, 0.2][min(e, 2)]

    runner = FakeRunner(tmp_path, curve)
    eta, probes = find_edge(runner, 0.00105, 12, 3, [0, 7], collapse, say=lambda *a: None)
    assert eta == pytest.approx(0.00105 * 2**1.0), "k = 3, 4 collapse on seed 7: the edge is k = 2"
    assert [(p["k"], p["seed"], p["diverges"]) for p in probes] == [
        (0, 0, False),
        (1, 0, False),
        (2, 0, False),
        (2, 7, False),
        (3, 0, False),
        (3, 7, True),
        (4, 0, False),
        (4, 7, True),
        (5, 0, True),
    ]
    assert (tmp_path / "edge-k+3-s7").is_dir()
    # without the collapse level, the collapsed run would pass for converging
    eta, _ = find_edge(FakeRunner(tmp_path / "b", curve), 0.00105, 12, 3, [0, 7], None, say=lambda *a: None)
    assert eta == pytest.approx(0.00105 * 2**2.0)


def test_the_speculative_edge_search_finds_the_same_edge(tmp_path):
    """With room for two runs the search runs the probe it would ask next beside the current
    one; the extra outcomes cannot move the edge."""
    collapse = 0.005

    def curve(lr, seed, e):
        k = round(math.log(lr / 0.00105, 2**0.5))
        if seed == 7 and k in (3, 4):
            return 0.0065 - 0.0015 * (1 - 0.5**e)
        return 0.01 / (1 + e) if k < 5 else [0.05, 0.03, 0.2][min(e, 2)]

    one, two = FakeRunner(tmp_path / "one", curve), FakeRunner(tmp_path / "two", curve)
    two.parallel = 2
    eta1, probes1 = find_edge(one, 0.00105, 12, 3, [0, 7], collapse, say=lambda *a: None)
    eta2, probes2 = find_edge(two, 0.00105, 12, 3, [0, 7], collapse, say=lambda *a: None)
    assert eta2 == eta1 == pytest.approx(0.00105 * 2**1.0)
    seen = {(p["k"], p["seed"]) for p in probes2}
    assert {(p["k"], p["seed"]) for p in probes1} <= seen and len(seen) <= len(probes1) + 2
