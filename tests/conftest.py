import os
import sys

import pytest

# first, before any test module imports TensorFlow: deepdensity sets TF_USE_LEGACY_KERAS=1 where
# tf_keras is installed, so that tf.keras is Keras 2 in pytest's own process too
import deepdensity  # noqa: F401,E402
from tests import support
from tests.support import ROOT, SMOKE, launch, run

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# as deepdensity/__init__.py does, for the tests that import TensorFlow before the package
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


@pytest.fixture(scope="session", autouse=True)
def runs_outside_the_checkout(tmp_path_factory):
    """A run started without --out (train.py's default run folder) lands in a temporary folder,
    not in the checkout's runs/; subprocesses inherit it through the environment."""
    os.environ["DEEPDENSITY_RUNS"] = str(tmp_path_factory.mktemp("default-runs"))
    yield


def pytest_runtest_setup(item):
    support.CURRENT_TEST_IS_SLOW = item.get_closest_marker("slow") is not None


@pytest.fixture(scope="session")
def smoke_data(tmp_path_factory):
    """The smoke config's data set, written once per test session."""
    path = tmp_path_factory.mktemp("data") / "smoke.h5"
    run(
        [
            sys.executable,
            "-m",
            "deepdensity.data",
            "synth",
            "--out",
            str(path),
            "--n",
            "320",
            "--val",
            "64",
            "--seed",
            "0",
        ]
    )
    return path


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory, smoke_data):
    """One finished run to read from (encode, generate, filter) or to copy and resume: strong
    scaling, one worker, the smoke model, one epoch on smoke_data. Trained once per session;
    a test that writes into a run folder copies this one first."""
    out = tmp_path_factory.mktemp("trained") / "run"
    run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--set",
            f"data_path={smoke_data}",
            "--set",
            "max_epochs=1",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    return out


@pytest.fixture(scope="session")
def one_process(tmp_path_factory, smoke_data):
    """One-process reference runs on smoke_data, each trained once per session for every test
    that compares a distributed run with it (under each controller, on two hosts, through Slurm):
    `one_process(mode, *train.py flags)` -> (its losses, its run folder). A test must not write
    into the folder."""
    done = {}

    def reference(mode, *extra):
        key = (mode, *extra)
        if key not in done:
            out = tmp_path_factory.mktemp("one-process") / "run"
            done[key] = (launch([], mode, out, smoke_data, *extra), out)
        return done[key]

    return reference
