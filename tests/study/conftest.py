"""The tiny study, trained once per pytest run and read by every test that checks what a study
writes (tests/study/test_tiny_study.py). A test that must train a study of its own (a study
interrupted, a study through Slurm) says why where it does."""

import sys

import pytest

from deepdensity.study.run.timing import ROUNDS
from tests.support import run, seed_kept_rounds

# The one round of the clock that `make test-all` measures for real, every probe of it checked
# (tests/study/test_tiny_study.py): the tiny study's third. The Slurm clock test keeps all three
# (tests/cluster/test_slurm.py says why).
KEPT_ROUNDS = ROUNDS - 1


# Every paper mode at N = 1 and 2 on 96 cubes, two first seeds (the design adds a third), its own
# clock with a real strong-scaling run at N = 2, one calibration seed and the ISA check. Of the
# clock's three rounds the fixture leaves two (KEPT_ROUNDS) as an interrupted study keeps them
# (tiny_clock's figures): the study measures the third for real, 100 s a round here.
# XLA off, as in configs/smoke.yaml: compiling the coefficients cost 4-5 s of CPU in each of its
# run processes of a few epochs (tests/training/test_horovod.py trains under the default).
TINY_PRESET = (
    "data: {n: 96, val: 32, seed: 0}\n"
    "calibration_epochs: 2\ntarget_loss: null\nworkers: [1, 2]\n"
    "modes: [strong, weak, linear, warmup]\nseeds: [0, 1]\nbase_lr: 0.00105\n"
    "max_seeds: 3\nbudget_minutes: 30\nreal_strong: [2]\ncalibration_seeds: [7]\nisa_check: auto\n"
    "train: {n_components: 4, conv_filters: [4, 4, 4], latent_dim: 8, validate_every_pass: true, xla: 'off'}\n"
)


class TinyStudy:
    """A study's folders and the command that made them."""

    def __init__(self, root, preset, reports, stdout):
        self.root, self.preset, self.reports, self.stdout = root, preset, reports, stdout
        self.runs = root / "runs"
        self.kept_rounds = 0  # the clock's rounds left as an interrupted study keeps them

    def command(self, preset=None, reports=None, *extra) -> list:
        return [
            sys.executable,
            "-m",
            "deepdensity.repro",
            "--preset",
            str(preset or self.preset),
            "--runs",
            str(self.runs),
            "--reports",
            str(reports or self.reports),
            *extra,
        ]


# The timeouts guard against a hang, they time nothing: alone on 2 cores the study takes
# minutes, beside other work it took over 10.
@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """The tiny preset's study, trained from nothing by `python -m deepdensity.repro`. Its tests
    only read it; a test that runs the study again writes its reports to a folder of its own."""
    root = tmp_path_factory.mktemp("tiny-study")
    preset = root / "tiny.yaml"
    preset.write_text(TINY_PRESET)
    study = TinyStudy(root, preset, root / "reports", "")
    study.kept_rounds = KEPT_ROUNDS
    seed_kept_rounds(preset, study.runs, study.kept_rounds)
    study.stdout = run(study.command(), timeout=1800).stdout
    return study


@pytest.fixture(scope="session")
def tiny_beyond(tiny_study):
    """The beyond modes, the data filter and the batch sweep on the tiny study's runs folder,
    with its eta and calibrated target (--compare-with its reports): (study, reports folder)."""
    beyond = tiny_study.root / "beyond.yaml"
    beyond.write_text(
        TINY_PRESET.replace("[strong, weak, linear, warmup]", "[strong, adaptive, local]").replace(
            "base_lr: 0.00105", "base_lr: default_study"
        )  # eta from the study above
        + "mode_workers: {adaptive: [1, 2], local: [1, 2]}\n"
        + "filter_modes: [weak]\nbatch_sweep: [16, 32, 64]\n"
    )
    out = tiny_study.root / "beyond_reports"
    run(tiny_study.command(beyond, out, "--compare-with", str(tiny_study.reports)), timeout=1800)
    return tiny_study, out
