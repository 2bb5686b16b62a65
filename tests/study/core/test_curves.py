"""A run's curve read in passes and epochs (deepdensity/study/core/curves.py): passes to target,
strong scaling read off the sequential run, the edge-of-stability search and the target's
calibration, checked against the paper's section VI and VII wording."""

import pytest

from deepdensity.scaling import rules
from deepdensity.study.core import curves


def derive_strong(
    passes,
    workers,
    target,
    cap,
    stall_patience=0,
    collapse_loss=0.0,
    collapse_patience=0,
    stall_near=0.0,
    stall_near_patience=0,
):
    return curves.derive_strong(
        passes,
        workers,
        rules.StoppingRules(
            target, cap, stall_patience, stall_near, stall_near_patience, collapse_loss, collapse_patience
        ),
    )


def test_derive_strong_applies_the_near_target_allowance():
    passes = [2.0, 1.05, 1.06, 1.07, 1.08, 1.06, 0.99]
    assert derive_strong(passes, 1, 1.0, 400, 3) == ("stalled", 5)
    assert derive_strong(passes, 1, 1.0, 400, 3, 0.0, 0, 0.10, 12) == ("reached_target", 7)


def test_derive_strong_reads_the_sequential_run_at_its_own_epochs():
    passes = [0.9, 0.5, 0.31, 0.29, 0.3, 0.28, 0.2, 0.19]
    assert curves.sample_epoch_losses(passes, 2) == [0.5, 0.29, 0.28, 0.19]
    assert curves.sample_epoch_losses(passes, 4) == [0.29, 0.19]
    assert derive_strong(passes, 1, 0.3, 400) == ("reached_target", 4)
    assert derive_strong(passes, 2, 0.3, 400) == ("reached_target", 2)
    # pass 3 (0.31) is above the target and is where strong N = 3 validates first
    assert derive_strong(passes, 3, 0.3, 400) == ("reached_target", 2)
    assert derive_strong(passes, 8, 0.1, 400) is None, "not long enough to decide"
    assert derive_strong(passes, 2, 0.1, 3) == ("max_epochs", 3)
    assert derive_strong([0.1, 0.2, 0.2, 0.2, 0.2, 0.2], 1, 0.01, 400, 3) == ("stalled", 4)
    assert derive_strong([0.1, float("nan")], 2, 0.01, 400) == ("diverged", 1)


def walk_edge(diverges_from, n_seeds=1):
    """Run the edge search against a fake model: seed i diverges at grid index >= k0[i]
    (one int: the same k0 for every seed)."""
    k0 = [diverges_from] * n_seeds if isinstance(diverges_from, int) else diverges_from
    outcomes = {}
    while (probe := curves.edge_probe(outcomes, n_seeds)) is not None:
        assert probe not in outcomes, "never probes twice"
        k, i = probe
        outcomes[probe] = k >= k0[i]
    return curves.edge_index(outcomes, n_seeds), outcomes


def test_calibrate_target():
    losses = [0.5, 0.3, 0.2, 0.15, 0.12]
    assert curves.calibrate_target(losses, 3) == (0.2, 12)
    with pytest.raises(ValueError):
        curves.calibrate_target(losses, 6)
    with pytest.raises(ValueError):
        curves.calibrate_target([0.5, float("nan")], 2)


def test_passes_to_target_reads_between_and_at_epoch_ends():
    rows = [
        {"epoch": 1, "val_loss": 0.5, "pass_val_losses": [[1.0, 0.6], [2.0, 0.55], [3.0, 0.52]]},
        {"epoch": 2, "val_loss": 0.1, "pass_val_losses": [[5.0, 0.3], [6.0, 0.15], [7.0, 0.09]]},
    ]
    assert curves.passes_to_target(rows, 0.2, 4) == 6.0  # between epochs
    assert curves.passes_to_target(rows, 0.5, 4) == 4.0  # at the first epoch's end
    assert curves.passes_to_target(rows, 0.01, 4) is None
    plain = [{"epoch": e, "val_loss": v} for e, v in ((1, 0.5), (2, 0.3), (3, float("nan")))]
    assert curves.passes_to_target(plain, 0.3, 8) == 16.0  # rows without passes: epoch x N
    assert [curves.passes_per_epoch(n, d) for n, d in ((8, "per_worker"), (8, "global"))] == [8, 1]


def test_the_target_from_calibration_runs_is_their_median_at_epoch_e():
    runs = [[0.5, 0.30, 0.2], [0.5, 0.25, 0.1], [0.5, 0.40, 0.3]]
    assert curves.calibrate_target_median(runs, 2) == (0.30, 8)  # median of 0.30, 0.25, 0.40
    assert curves.calibrate_target_median(runs[:2], 3) == (pytest.approx(0.15), 12)  # even count: the mean of the two
    with pytest.raises(ValueError):
        curves.calibrate_target_median([], 2)


@pytest.mark.parametrize("k0", [-3, -1, 0, 1, 2, 5])
def test_edge_search_finds_the_largest_converging_lr(k0):
    edge, outcomes = walk_edge(k0)
    assert edge == k0 - 1
    # climbs 0..k0 when the base lr converges, else descends 0..k0-1: the fewest probes
    assert sorted(k for k, _ in outcomes) == (list(range(0, k0 + 1)) if k0 > 0 else list(range(k0 - 1, 1)))


@pytest.mark.parametrize("k0", [[4, 4, 4], [4, 2, 4], [4, 4, 1], [0, 3], [-1, -3], [3, 0, -2]])
def test_the_edge_converges_on_every_seed(k0):
    edge, outcomes = walk_edge(k0, len(k0))
    assert edge == min(k0) - 1, "the largest k below every seed's divergence"
    assert all(outcomes[(edge, i)] is False for i in range(len(k0)))
    assert any(outcomes.get((edge + 1, i)) for i in range(len(k0))), "one step above diverges on some seed"
    # the other seeds are only checked at candidate edges, between the edge and the first
    # seed's own edge, never along the first seed's climb
    assert all(edge <= k < k0[0] for k, i in outcomes if i > 0)


def test_edge_search_with_one_seed_diverging_everywhere_gives_up():
    with pytest.raises(rules.PlanError, match="no edge of stability"):
        walk_edge([3, -100], 2)


def test_edge_search_gives_up_with_a_clear_error():
    with pytest.raises(rules.PlanError, match="no edge of stability"):
        walk_edge(100)
    assert curves.EDGE_STEP == pytest.approx(2**0.5)
    with pytest.raises(ValueError):
        curves.edge_probe({}, 0)
