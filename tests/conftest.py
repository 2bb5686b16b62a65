import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# as deepdensity/__init__.py does, for the tests that import TensorFlow before the package
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def run(args, cwd=ROOT, timeout=600, check=True):
    """Run a command with this interpreter's environment; returns CompletedProcess."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
                             f"stderr:\n{proc.stderr[-3000:]}")
    return proc


def horovodrun():
    exe = Path(sys.executable).with_name("horovodrun")
    return str(exe) if exe.exists() else shutil.which("horovodrun")


@pytest.fixture(scope="session")
def smoke_data(tmp_path_factory):
    """The smoke config's data set, written once per test session."""
    path = tmp_path_factory.mktemp("data") / "smoke.h5"
    run([sys.executable, "-m", "deepdensity.data", "synth", "--out", str(path), "--n", "320",
         "--val", "64", "--seed", "0"])
    return path
