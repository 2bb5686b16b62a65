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


def test_the_cells_stopping_rules_are_the_settings_at_the_studys_target_cap_and_collapse_level():
    from deepdensity.config import Config
    from deepdensity.study.run.session import Protocol

    cfg = Config(
        target_loss=0.5, max_epochs=400, stall_patience=3, stall_near=0.1, stall_near_patience=9, collapse_patience=2
    )
    got = Protocol(eta=0.001, target=0.002, max_epochs=24, seq_max_epochs=40, cfg=cfg, collapse_loss=0.0049).stopping()
    assert got == StoppingRules(0.002, 24, 3, 0.1, 9, 0.0049, 2), "the study's target, cap and collapse level"
    off = Protocol(
        eta=0.001, target=0.002, max_epochs=24, seq_max_epochs=40, cfg=Config(collapse_patience=0), collapse_loss=0.0049
    ).stopping()
    assert (off.collapse_loss, off.collapse_patience) == (0.0, 0), "no collapse level where the rule is off"
