"""What `deepdensity --version` says of a stack: the rules of utils/stack.py as plain functions of
version strings, each case written out by hand; then, in a real process, that what it reads from
the installed distributions is what Python imports."""

import ast
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from deepdensity.utils import stack
from deepdensity.utils.errors import UserError
from deepdensity.utils.stack import Found, judge, release

ROOT = Path(__file__).resolve().parents[2]
CURRENT = Found(
    python="3.11.7",
    tensorflow="2.21.0",
    tensorflow_dists=("tensorflow-cpu",),
    keras2="tf-keras 2.21.0",
    keras3="3.15.1",
    horovod="0.28.1",
    horovod_built_against="2.21.0",
    horovod_patched=True,
)
PAPER = Found(
    python="3.11.7",
    tensorflow="2.15.1",
    tensorflow_dists=("tensorflow-cpu",),
    keras2="keras 2.15.0",
    horovod="0.28.1",
    horovod_built_against="2.15.1",
    horovod_patched=False,
)


def with_(found: Found, **changes) -> Found:
    return Found(**{**found.__dict__, **changes})


@pytest.mark.parametrize(
    "text, want",
    [("2.21.0", (2, 21)), ("2.17.0+nv24.08", (2, 17)), ("3.13", (3, 13)), ("", ()), (None, ()), ("nightly", ())],
)
def test_release_reads_major_and_minor(text, want):
    assert release(text) == want


def test_the_two_tested_stacks_are_supported():
    assert judge(CURRENT)[0] == "supported" and "current stack" in judge(CURRENT)[1][0]
    assert judge(PAPER)[0] == "supported" and "paper stack" in judge(PAPER)[1][0]


@pytest.mark.parametrize(
    "found, verdict, says",
    [
        (with_(CURRENT, keras2=None), "unsupported", "pip install --no-deps 'tf-keras==2.21.*'"),
        (with_(CURRENT, keras2="tf-keras 2.20.0"), "unsupported", "their releases must match"),
        (with_(CURRENT, horovod_patched=False), "unsupported", "horovod/horovod#4290"),
        (with_(CURRENT, horovod_built_against="2.15.1"), "unsupported", "built against TensorFlow 2.15.1"),
        (with_(CURRENT, horovod=None, horovod_built_against=None, horovod_patched=None), "unsupported", "no Horovod"),
        (with_(CURRENT, tensorflow=None, tensorflow_dists=()), "unsupported", "no TensorFlow"),
        (
            with_(PAPER, tensorflow="2.14.1", keras2="keras 2.14.0", horovod_built_against="2.14.1"),
            "unsupported",
            "older than the paper-era stack",
        ),
        # NVIDIA's containers: TF 2.17 on Python 3.12, tf-keras beside it, Horovod patched
        (
            with_(
                CURRENT,
                python="3.12.3",
                tensorflow="2.17.0+nv24.08",
                keras2="tf-keras 2.17.0",
                horovod_built_against="2.17.0+nv24.08",
            ),
            "untested",
            "between the stacks tested",
        ),
        (
            with_(CURRENT, tensorflow="2.22.0", keras2="tf-keras 2.22.0", horovod_built_against="2.22.0"),
            "untested",
            "newer than the current stack",
        ),
        (with_(CURRENT, tensorflow_dists=("tensorflow", "tensorflow-cpu")), "untested", "share one folder"),
        (with_(CURRENT, python="3.12.4"), "untested", "was not run here"),
        (with_(CURRENT, python="3.13.1"), "supported", "the current stack"),
        (with_(PAPER, python="3.12.3"), "untested", "outside the paper stack's 3.10 to 3.11"),
        (with_(CURRENT, horovod="0.29.0"), "untested", "Horovod 0.29.0, not 0.28.1"),
    ],
)
def test_a_stack_off_the_tested_ones_is_judged_and_told_what_to_do(found, verdict, says):
    got, reasons = judge(found)
    assert got == verdict and any(says in r for r in reasons), (got, reasons)


def test_an_unpatched_horovod_is_no_problem_on_the_paper_era_tensorflow():
    """The patch replaces `from keras import backend`, which is Keras 2 on TensorFlow 2.15."""
    assert judge(with_(PAPER, horovod_patched=False))[0] == "supported"


def horovod_folder(tmp_path, built: str, patched: bool) -> str:
    folder = tmp_path / "horovod"
    (folder / "tensorflow" / "keras").mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps({"tensorflow": built, "dummy": "none"}))
    (folder / "tensorflow" / "keras" / "callbacks.py").write_text(
        "import tensorflow as tf\nif True:\n    " + ("K = keras.backend" if patched else stack.UNPATCHED_LINE) + "\n"
    )
    return str(folder)


def test_found_reads_the_distributions_and_horovods_own_build_record(tmp_path):
    versions = {"tensorflow-cpu": "2.21.0", "tf-keras": "2.21.0", "keras": "3.15.1", "horovod": "0.28.1"}
    got = stack.found(versions, horovod_folder(tmp_path, "2.21.0", patched=True))
    assert (got.tensorflow, got.tensorflow_dists, got.keras2, got.keras3) == (
        "2.21.0",
        ("tensorflow-cpu",),
        "tf-keras 2.21.0",
        "3.15.1",
    )
    assert (got.horovod, got.horovod_built_against, got.horovod_patched) == ("0.28.1", "2.21.0", True)
    paper = stack.found(
        {"tensorflow-cpu": "2.15.1", "keras": "2.15.0", "horovod": "0.28.1"},
        horovod_folder(tmp_path / "p", "2.15.1", patched=False),
    )
    assert (paper.keras2, paper.keras3, paper.horovod_patched) == ("keras 2.15.0", None, False)
    assert stack.found({"tensorflow": "2.21.0", "keras": "3.15.1"}, None).keras2 is None


def test_describe_names_what_was_found_and_the_verdict():
    lines = stack.describe(CURRENT)
    assert lines[1] == "TensorFlow 2.21.0 (tensorflow-cpu)"
    assert lines[2].startswith("Keras 2: tf-keras 2.21.0; Keras 3.15.1 is installed too and not used")
    assert lines[3] == "Horovod 0.28.1, built against TensorFlow 2.21.0, with the project's patch"
    assert lines[4].startswith("supported: the current stack")


def fake_tf(top: str, version: str):
    return types.SimpleNamespace(
        keras=types.SimpleNamespace(__name__=f"{top}.api._v2.keras"), __version__="2.21.0"
    ), types.SimpleNamespace(__version__=version)


@pytest.mark.parametrize(
    "top, version, ok", [("tf_keras", "2.21.0", True), ("keras", "2.15.0", True), ("keras", "3.15.1", False)]
)
def test_require_keras2_refuses_keras_3(monkeypatch, top, version, ok):
    tf, package = fake_tf(top, version)
    monkeypatch.setitem(sys.modules, top, package)
    assert stack.keras_of(tf) == f"{top} {version}"
    if ok:
        stack.require_keras2(tf)
    else:
        with pytest.raises(UserError, match="tf.keras is keras 3.15.1 in this process"):
            stack.require_keras2(tf)


def test_require_patched_horovod_refuses_an_unpatched_build_on_keras_3s_tensorflow(tmp_path, monkeypatch):
    monkeypatch.setattr(stack, "_horovod_dir", lambda: horovod_folder(tmp_path, "2.21.0", patched=False))
    with pytest.raises(UserError, match="without the project's patch"):
        stack.require_patched_horovod("2.21.0")
    stack.require_patched_horovod("2.15.1")


def keras_imports(path: Path, root: Path = ROOT) -> list:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "keras" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "keras")
    ]


def test_the_keras_import_finder_finds_both_spellings(tmp_path):
    probe = tmp_path / "keras_probe.py"
    probe.write_text("import keras.layers\nfrom keras import backend\nimport tf_keras\nfrom tensorflow import keras\n")
    assert keras_imports(probe, tmp_path) == ["keras_probe.py:1", "keras_probe.py:2"]


def test_nothing_in_the_project_imports_keras_3():
    """`keras` is Keras 3 from TensorFlow 2.16: the project reaches Keras 2 as tf.keras only."""
    files = [
        *ROOT.glob("deepdensity/**/*.py"),
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("scripts/**/*.py"),
        ROOT / "train.py",
    ]
    assert len(files) > 100
    assert [hit for f in files for hit in keras_imports(f)] == []


def test_the_patch_holds_the_three_changes():
    text = (ROOT / "scripts" / "horovod" / "horovod-0.28.1-tf2.16+.patch").read_text()
    for target in (
        "horovod/tensorflow/xla_mpi_ops.cc",
        "horovod/tensorflow/CMakeLists.txt",
        "horovod/tensorflow/keras/__init__.py",
        "horovod/tensorflow/keras/callbacks.py",
    ):
        assert f"+++ b/{target}" in text, target
    assert f"-    {stack.UNPATCHED_LINE}" in text and "external/farmhash_archive/src" in text


@pytest.mark.medium
@pytest.mark.smoke
def test_what_found_reads_is_what_python_imports_and_tf_keras_is_keras_2():
    """In a fresh process that imports deepdensity first, as every command does: the versions
    read from the distributions are the imported modules' own, tf.keras is Keras 2, and the
    install built Horovod as its stack asks (the smoke tier runs this on the paper-era stack)."""
    code = (
        "import json, os, deepdensity, tensorflow as tf\n"
        "from deepdensity.utils import stack\n"
        "f = stack.found()\n"
        "print(json.dumps([f.tensorflow, tf.__version__, f.keras2, stack.keras_of(tf),"
        " os.environ.get('TF_USE_LEGACY_KERAS'), f.horovod_patched, f.horovod_built_against]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
    )
    found_tf, imported_tf, found_keras, imported_keras, legacy, patched, built = json.loads(
        out.stdout.strip().splitlines()[-1]
    )
    assert found_tf == imported_tf
    assert found_keras.replace("-", "_") == imported_keras and release(imported_keras.split()[1])[:1] == (2,)
    # TF_USE_LEGACY_KERAS is set wherever tf_keras is there to be used, and only there
    assert legacy == ("1" if imported_keras.startswith("tf_keras") else None)
    # make install built Horovod against this TensorFlow, with the patch from 2.16 on only
    assert built == imported_tf and patched == (release(imported_tf) >= (2, 16))


@pytest.mark.medium
def test_pytests_own_process_has_keras_2():
    """The tests' own process: conftest imports deepdensity before any test imports TensorFlow."""
    import tensorflow as tf

    keras = stack.keras_of(tf)
    assert release(keras.split()[1])[:1] == (2,), keras
    assert keras.startswith("tf_keras") == (release(tf.__version__) >= (2, 16))


def test_the_metadata_the_readme_and_the_stacks_name_the_same_pythons():
    """pyproject.toml's classifiers and requires-python admit what the stacks admit, and the
    Pythons the README says CI runs are the stacks' run_here (what --version calls supported)."""
    import re

    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's; 3.10 cannot read pyproject.toml here")
    from deepdensity.utils.stack import STACKS
    from tests.support import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    kw = {"classifiers": project["classifiers"], "python_requires": project["requires-python"]}
    admitted = sorted({p for s in STACKS.values() for p in s.pythons}, key=lambda v: tuple(map(int, v.split("."))))
    classified = [
        c.rsplit(" :: ", 1)[1] for c in kw["classifiers"] if c.startswith("Programming Language :: Python :: 3.")
    ]
    assert classified == admitted
    assert kw["python_requires"] == f">={admitted[0]},<3.{int(admitted[-1].split('.')[1]) + 1}"
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"Python 3\.10 to\s+3\.13 \(run in CI: 3\.11 on\s+Debian 12, 3\.13 on Debian 13", readme)
    assert said and admitted == ["3.10", "3.11", "3.12", "3.13"]
    assert sorted({p for s in STACKS.values() for p in s.run_here}) == ["3.11", "3.13"]
