"""The package as `pip install .` leaves it: a wheel, unpacked away from the checkout, holds the
study presets and report templates and runs its commands from another working directory."""

import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.support import ROOT


@pytest.mark.slow
def test_the_wheel_carries_what_a_study_needs_and_runs_outside_the_checkout(tmp_path):
    # built from a copy: setuptools writes build/ and *.egg-info beside the sources
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "runs", "data", "build", "*.egg-info", "__pycache__", "reports"),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    wheel = next(wheels.glob("deepdensity-*.whl"))
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(site)
    assert {
        "deepdensity/study/presets/default.yaml",
        "deepdensity/study/templates/report.md",
        "deepdensity/study/templates/plan.txt",
    } <= set(names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "deepdensity = deepdensity.cli:main" in (site / entry).read_text()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the unpacked wheel first on sys.path, so the checkout (an editable install) is not what runs
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import deepdensity; assert deepdensity.__file__.startswith(sys.argv[1]), deepdensity.__file__;"
        "from deepdensity.study.core.preset import load_study; from deepdensity.utils.templates import TEMPLATES;"
        "assert (TEMPLATES / 'report.md').is_file() and str(TEMPLATES).startswith(sys.argv[1]);"
        "name, study = load_study('default'); print(name, study.workers);"
        "from deepdensity.cli import main; sys.exit(main(['--help']))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(site)], cwd=elsewhere, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "default [1, 2, 4, 8, 16, 32]" in proc.stdout and "repro" in proc.stdout
    assert list(elsewhere.iterdir()) == [], "nothing written to the working directory"
