"""Strong scaling read off the sequential run (sequential.py): the run extended until every N is decided."""
from deepdensity.scaling.rules import StoppingRules
from deepdensity.study.run.sequential import strong_from_sequential
from tests.support import FakeRunner


def test_strong_cells_extend_the_sequential_run_until_every_n_is_decided(tmp_path):
    passes = [0.5, 0.4, 0.3, 0.29, 0.31, 0.28, 0.27, 0.26, 0.25, 0.24, 0.23, 0.22]
    runner = FakeRunner(tmp_path, lambda lr, seed, e: passes[e] if e < len(passes) else 0.2)
    got, vals = strong_from_sequential(runner, 0, 0.001, 4, [1, 2, 4], StoppingRules(0.29, 100))
    assert vals == passes[:4]
    # N = 1 at pass 4; N = 2 validates at passes 2, 4: reached at its epoch 2;
    # N = 4 validates at passes 4, 8: its first epoch end (0.29) is on target
    assert got == {1: ("reached_target", 4), 2: ("reached_target", 2), 4: ("reached_target", 1)}
    got, _ = strong_from_sequential(runner, 0, 0.001, 4, [1, 8], StoppingRules(0.255, 100))
    assert got == {1: ("reached_target", 9), 8: ("reached_target", 2)}
    assert [c[1] for c in runner.calls][-3:] == [4, 12, 20], "extended by the largest undecided N"


def test_a_real_run_the_ledger_gave_back_names_its_keys_controller_and_no_transport(tmp_path):
    """A real strong-scaling run answered by the ledger has a folder without its launch; its row
    names the controller its ledger key was made with (the runner's) and says the transport was
    not recorded, rather than nothing at all (a study started on a new runs folder)."""
    from types import SimpleNamespace

    from deepdensity.study.report.report_checks import _controller_cell
    from deepdensity.study.run.sequential import _launched
    runner = SimpleNamespace(controller=lambda: "mpi")
    (tmp_path / "given-back").mkdir()
    (tmp_path / "given-back" / "config.json").write_text('{"config": {}}')
    (tmp_path / "trained").mkdir()
    (tmp_path / "trained" / "config.json").write_text('{"launch": {"controller": "gloo", "transport": "tcp"}}')
    assert _launched(tmp_path / "given-back", runner) == {"controller": "mpi", "transport": None}
    assert _launched(tmp_path / "trained", runner) == {"controller": "gloo", "transport": "tcp"}
    assert _controller_cell({"controller": "mpi", "transport": None}) == "mpi (transport not recorded)"
    assert _controller_cell({"controller": "gloo", "transport": "tcp"}) == "gloo (tcp)"
    assert _controller_cell({"controller": None}) == "not recorded"
