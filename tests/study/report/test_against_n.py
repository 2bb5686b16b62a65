"""What the beyond study's figures draw and say, apart from drawing it (issue 46): N = 1 is the
sequential cell's seeds once (against_n.py, the against-N drawing both studies share), and the
sweep's legend and caption name what it draws."""

from deepdensity.scaling import policies
from deepdensity.study.core.cells import Cell
from deepdensity.study.report import against_n
from deepdensity.study.report import against_n as figs


def cell(mode: str, n: int, seed: int, epochs: int = 10, passes=None, status: str = "reached_target") -> Cell:
    return Cell(
        mode=mode,
        n=n,
        seed=seed,
        status=status,
        epochs=epochs,
        epochs_to_target=epochs,
        epoch_seconds=1.0,
        time_source="modelled",
        time_to_target_s=1.0,
        run=f"{mode}-n{n}-s{seed}",
        passes_to_target=passes,
    )


def test_n_1_is_drawn_once_with_the_sequential_cells_seeds_and_the_caption_says_which():
    cells = (
        [cell(policies.SEQUENTIAL, 1, s, passes=20.0) for s in (0, 1, 2)]
        + [cell(policies.WEAK, 1, s) for s in (0, 1, 2, 3)]
        + [cell(policies.WEAK, 2, s) for s in (0, 1, 2)]
    )
    modes = [policies.SEQUENTIAL, policies.WEAK]
    assert [c.seed for c in against_n.sequential_cells(cells, modes)] == [0, 1, 2]
    assert all(c.mode == policies.SEQUENTIAL for c in against_n.sequential_cells(cells, modes))
    said = against_n.against_n_caption(cells, modes)
    assert against_n.SEQUENTIAL_LABEL in said and "(seeds 0, 1, 2)" in said and "0, 1, 2, 3" in said
    assert "holds other seeds" not in against_n.against_n_caption(cells[:3], [policies.SEQUENTIAL])


def test_the_sweep_names_its_base_batch_and_draws_a_median_bar_only_over_seeds():
    assert "B = 32" in figs.rule_label(policies.LINEAR, 32) and "B = 64" in figs.rule_label(policies.LINEAR, 64)
    one = {"eta": {16: [cell(policies.SEQUENTIAL, 1, 0)], 32: [cell(policies.SEQUENTIAL, 1, 0)]}}
    two = {"eta": {16: [cell(policies.SEQUENTIAL, 1, 0), cell(policies.SEQUENTIAL, 1, 1)]}}
    assert not figs.several_seeds(one) and "no median bar" in figs.sweep_caption(one)
    assert figs.several_seeds(two) and "bar" in figs.sweep_caption(two) and "no median" not in figs.sweep_caption(two)
