"""The sequential design (study/run/design.py) on stand-in units: which cells get more seeds, in
what order, and when it stops (max_seeds, settled cells, the time budget)."""
import time

import pytest

from deepdensity.study.run.design import Book, FIRST, run_first_seeds, run_more_seeds
from deepdensity.study.run.runner import StudyRunner


def _units(book, runner, outcome, cost):
    """Units whose seed s 'reaches the target' per outcome(unit, s); each run costs cost[unit] s."""
    def job(unit, seed):
        name = f"{unit[0]}-n{unit[1]}-s{seed}"
        book.results[(unit[0], unit[1], seed)] = ({"status": "reached_target" if outcome(unit, seed) else "stalled",
                                                   "epochs": 3}, name)
        runner.wall[name] = cost[unit]
        return [name]
    return {u: (lambda s, u=u: job(u, s)) for u in cost}


def test_every_cell_gets_seeds_up_to_the_cap_mixed_ones_too(tmp_path):
    """A failure rate's interval narrows with every run, so a mixed cell (the one where failure
    is a basin a run falls into by chance) gets seeds as a unanimous one does."""
    runner = StudyRunner(tmp_path, tmp_path / "t.yaml", None, parallel=2, say=lambda *a: None)
    book = Book()
    cost = {("weak", 2): 1.0, ("weak", 8): 5.0, ("linear", 2): 2.0}
    mixed = {("linear", 2)}                        # seed 1 of linear N = 2 fails, the rest reach
    units = _units(book, runner, lambda u, s: not (u in mixed and s == 1), cost)
    run_first_seeds(runner, book, units, [0, 1, 2])
    assert all(book.seeds[u] == [0, 1, 2] for u in units) and book.why[(("weak", 2), 0)] == FIRST
    stopped = run_more_seeds(runner, book, units, max_seeds=5, deadline=time.perf_counter() + 60,
                             say=lambda *a: None)
    assert all(book.seeds[u] == [0, 1, 2, 3, 4] for u in units)
    assert "narrows its missed rate's interval" in book.why[(("linear", 2), 3)]
    assert stopped == "every cell settled or at max_seeds"


def test_more_seeds_go_to_every_cell_alike_and_the_budget_is_kept(tmp_path):
    runner = StudyRunner(tmp_path, tmp_path / "t.yaml", None, parallel=1, say=lambda *a: None)
    book = Book()
    cost = {("weak", 2): 1.0, ("warmup", 2): 1000.0}
    units = _units(book, runner, lambda u, s: not (u == ("weak", 2) and s == 0), cost)
    run_first_seeds(runner, book, units, [0, 1, 2])
    stopped = run_more_seeds(runner, book, units, max_seeds=4,
                             deadline=time.perf_counter() + 60, say=lambda *a: None)
    assert book.seeds[("weak", 2)] == [0, 1, 2, 3]
    assert "narrows its missed rate's interval" in book.why[(("weak", 2), 3)], "not to settle one answer"
    assert book.seeds[("warmup", 2)] == [0, 1, 2], "a 1000 s seed does not fit a 60 s budget"
    assert stopped == "the time budget"


@pytest.mark.parametrize("base_lr, want", [("edge", [3, 4, 5]), ("default_study", [3, 4, 5]), (0.001, [0, 1, 2])])
def test_the_sequential_runs_keep_apart_from_the_seeds_that_chose_eta(base_lr, want):
    """Seeds on which an edge search chose eta converge at eta by construction: a study whose eta
    came from one (its own, or the default study's) runs its sequential cell on other seeds; a
    study with a given eta keeps its seeds. Calibration seeds are never used by a cell."""
    from deepdensity.study.core.preset import Study
    study = Study(seeds=[0, 1, 2], edge_seeds=[0, 1, 2], base_lr=base_lr, calibration_seeds=[100, 101, 102])
    assert study.sequential_seeds() == want
    assert Study(seeds=[99, 100, 101], edge_seeds=[0], base_lr=0.001,
                 calibration_seeds=[100]).sequential_seeds() == [0, 1, 2]
