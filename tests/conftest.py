import os
import sys

import pytest

from tests.support import run

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# as deepdensity/__init__.py does, for the tests that import TensorFlow before the package
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


@pytest.fixture(scope="session")
def smoke_data(tmp_path_factory):
    """The smoke config's data set, written once per test session."""
    path = tmp_path_factory.mktemp("data") / "smoke.h5"
    run([sys.executable, "-m", "deepdensity.data", "synth", "--out", str(path), "--n", "320",
         "--val", "64", "--seed", "0"])
    return path
