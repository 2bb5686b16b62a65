"""What the beyond study's figures draw and say, apart from drawing it (issue 46): a seed whose
passes are only epochs x N is told from an exact one, N = 1 is the sequential cell's seeds once
(against_n.py, the against-N drawing both studies share), and the sweep's legend and caption name
what it draws."""
from deepdensity.scaling import policies
from deepdensity.study.core.cells import Cell, TimeBase
from deepdensity.study.judge import beyond_verdicts as bv
from deepdensity.study.report import against_n, against_n as figs

BASE = TimeBase(n_train=1000, n_val=100, definition="per_worker")


def cell(mode: str, n: int, seed: int, epochs: int = 10, passes=None, status: str = "reached_target") -> Cell:
    return Cell(mode=mode, n=n, seed=seed, status=status, epochs=epochs, epochs_to_target=epochs, epoch_seconds=1.0,
                time_source="modelled", time_to_target_s=1.0, run=f"{mode}-n{n}-s{seed}", passes_to_target=passes)


def test_passes_taken_as_epochs_x_n_are_a_bound_down_to_one_pass_after_the_epoch_before():
    bound, exact = cell(policies.WARMUP, 4, 0), cell(policies.WARMUP, 4, 1, passes=38.0)
    assert against_n.bounded(bound, BASE) and not against_n.bounded(exact, BASE)
    assert bv.values([bound], bv.PASSES, BASE) == [40.0]
    assert against_n.least([bound, exact], bv.PASSES, BASE) == [37.0, 38.0]
    # one pass an epoch (N = 1, or a global epoch) is counted exactly; a miss has no passes to bound
    assert not against_n.bounded(cell(policies.WEAK, 1, 0), BASE)
    assert not against_n.bounded(bound, TimeBase(1000, 100, "global"))
    assert not against_n.bounded(cell(policies.WEAK, 4, 0, status="collapsed"), BASE)


def test_n_1_is_drawn_once_with_the_sequential_cells_seeds_and_the_caption_says_which():
    cells = ([cell(policies.SEQUENTIAL, 1, s, passes=20.0) for s in (0, 1, 2)]
             + [cell(policies.WEAK, 1, s) for s in (0, 1, 2, 3)] + [cell(policies.WEAK, 2, s) for s in (0, 1, 2)])
    modes = [policies.SEQUENTIAL, policies.WEAK]
    assert [c.seed for c in against_n.sequential_cells(cells, modes)] == [0, 1, 2]
    assert all(c.mode == policies.SEQUENTIAL for c in against_n.sequential_cells(cells, modes))
    said = against_n.against_n_caption(cells, modes, BASE)
    assert against_n.SEQUENTIAL_LABEL in said and "(seeds 0, 1, 2)" in said and "0, 1, 2, 3" in said
    assert "Open markers" in said                   # weak at N = 2 kept no passes
    assert "Open markers" not in against_n.against_n_caption(cells[:3], [policies.SEQUENTIAL], BASE)


def test_the_sweep_names_its_base_batch_and_draws_a_median_bar_only_over_seeds():
    assert "B = 32" in figs.rule_label(policies.LINEAR, 32) and "B = 64" in figs.rule_label(policies.LINEAR, 64)
    one = {"eta": {16: [cell(policies.SEQUENTIAL, 1, 0)], 32: [cell(policies.SEQUENTIAL, 1, 0)]}}
    two = {"eta": {16: [cell(policies.SEQUENTIAL, 1, 0), cell(policies.SEQUENTIAL, 1, 1)]}}
    assert not figs.several_seeds(one) and "no median bar" in figs.sweep_caption(one)
    assert figs.several_seeds(two) and "bar" in figs.sweep_caption(two) and "no median" not in figs.sweep_caption(two)
