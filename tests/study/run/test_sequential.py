"""Strong scaling read off the sequential run (sequential.py): the run extended until every N is decided."""
from deepdensity.study.run.sequential import strong_from_sequential
from tests.support import FakeRunner


def test_strong_cells_extend_the_sequential_run_until_every_n_is_decided(tmp_path):
    passes = [0.5, 0.4, 0.3, 0.29, 0.31, 0.28, 0.27, 0.26, 0.25, 0.24, 0.23, 0.22]
    runner = FakeRunner(tmp_path, lambda lr, seed, e: passes[e] if e < len(passes) else 0.2)
    got, vals = strong_from_sequential(runner, 0, 0.001, 4, [1, 2, 4], target=0.29, cap=100, patience=0)
    assert vals == passes[:4]
    # N = 1 at pass 4; N = 2 validates at passes 2, 4: reached at its epoch 2;
    # N = 4 validates at passes 4, 8: its first epoch end (0.29) is on target
    assert got == {1: ("reached_target", 4), 2: ("reached_target", 2), 4: ("reached_target", 1)}
    got, _ = strong_from_sequential(runner, 0, 0.001, 4, [1, 8], target=0.255, cap=100, patience=0)
    assert got == {1: ("reached_target", 9), 8: ("reached_target", 2)}
    assert [c[1] for c in runner.calls][-3:] == [4, 12, 20], "extended by the largest undecided N"
