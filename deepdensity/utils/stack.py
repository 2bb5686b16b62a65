"""The software the project stands on: which TensorFlow, Keras 2 and Horovod an environment
holds, read from the installed distributions without importing them, and what the project
says of them. `deepdensity --version` prints it; `make install STACK=...` installs one of
STACKS (docs/install.md).

    found()          what this interpreter would import
    judge(found)     ("supported" | "untested" | "unsupported", the reasons)
    require_keras2   raises where tf.keras turned out to be Keras 3 in this process
    git_revision()   the checkout's own revision, which records and ledger entries name

No TensorFlow import here: `--version` answers in a fraction of a second, and the rules are
plain functions of version strings (tests/utils/test_stack.py).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

from deepdensity.utils.errors import UserError


@dataclasses.dataclass(frozen=True)
class Stack:
    """One combination the project installs and tests (the Makefile's STACK)."""

    name: str
    tensorflow: tuple  # the release, (2, 21)
    keras2: str  # the distribution that is Keras 2 beside it
    horovod_patched: bool  # built with scripts/horovod/horovod-0.28.1-tf2.16+.patch
    pythons: tuple  # what pyproject.toml admits for it
    run_here: tuple  # the Pythons CI runs it on (docs/install.md, "Systems run")
    what: str


STACKS = {
    "current": Stack(
        "current",
        (2, 21),
        "tf-keras",
        True,
        ("3.10", "3.11", "3.12", "3.13"),
        ("3.11", "3.13"),
        "TensorFlow 2.21 with tf-keras 2.21 (Keras 2), Horovod 0.28.1 with the project's patch",
    ),
    "paper": Stack(
        "paper",
        (2, 15),
        "keras",
        False,
        ("3.10", "3.11"),
        ("3.11",),
        "TensorFlow 2.15.1 with its Keras 2.15, Horovod 0.28.1's code as released; the committed study's stack",
    ),
}
HOROVOD = "0.28.1"
# the pip names TensorFlow is published under; two of them in one environment share one folder
TENSORFLOW_DISTS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tensorflow-rocm",
    "intel-tensorflow",
)
# what the patch removes from horovod/tensorflow/keras/callbacks.py: `keras` is Keras 3 from 2.16
UNPATCHED_LINE = "from keras import backend as K"


@dataclasses.dataclass(frozen=True)
class Found:
    python: str
    tensorflow: Optional[str] = None  # "2.21.0"
    tensorflow_dists: tuple = ()  # which of TENSORFLOW_DISTS are installed
    keras2: Optional[str] = None  # "tf-keras 2.21.0" or "keras 2.15.0"
    keras3: Optional[str] = None  # "3.15.1": installed, not what tf.keras is here
    horovod: Optional[str] = None
    horovod_built_against: Optional[str] = None  # the TensorFlow Horovod's build recorded
    horovod_patched: Optional[bool] = None  # None: no Horovod, or its sources unreadable


def release(version: Optional[str]) -> tuple:
    """(major, minor) of a version string: "2.17.0+nv24.08" -> (2, 17); () where there is none."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else ()


def found(versions: Optional[dict] = None, horovod_dir: Optional[str] = None) -> Found:
    """What this interpreter would import. `versions` (pip name -> version) and `horovod_dir`
    stand in for the installed distributions in tests."""
    if versions is None:
        versions = _installed_versions()
    if horovod_dir is None:
        horovod_dir = _horovod_dir()
    tf_dists = tuple(d for d in TENSORFLOW_DISTS if d in versions)
    tf = versions[tf_dists[0]] if tf_dists else None
    keras = versions.get("keras")
    keras2 = (
        f"tf-keras {versions['tf-keras']}"
        if "tf-keras" in versions
        else f"keras {keras}"
        if release(keras)[:1] == (2,)
        else None
    )
    if release(tf) and release(tf) < (2, 16) and release(keras)[:1] == (2,):
        keras2 = f"keras {keras}"  # TensorFlow 2.15's tf.keras is its keras package
    built, patched = _horovod_build(horovod_dir) if "horovod" in versions else (None, None)
    return Found(
        python="%d.%d.%d" % sys.version_info[:3],
        tensorflow=tf,
        tensorflow_dists=tf_dists,
        keras2=keras2,
        keras3=keras if release(keras)[:1] == (3,) else None,
        horovod=versions.get("horovod"),
        horovod_built_against=built,
        horovod_patched=patched,
    )


def _installed_versions() -> dict:
    from importlib.metadata import distributions

    out = {}
    for d in distributions():
        name = (d.metadata["Name"] or "").lower().replace("_", "-")
        out.setdefault(name, d.version)  # the first on sys.path is the one imported
    return out


def _horovod_dir() -> Optional[str]:
    from importlib.util import find_spec

    try:
        spec = find_spec("horovod")  # a top-level package: found, not imported
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec and spec.origin else None


def _horovod_build(horovod_dir: Optional[str]) -> tuple:
    """(the TensorFlow its build recorded, whether the patch's Keras change is in it)."""
    import json

    if not horovod_dir:
        return None, None
    try:
        with open(os.path.join(horovod_dir, "metadata.json")) as f:
            built = json.load(f).get("tensorflow")
    except (OSError, ValueError):
        built = None
    try:
        with open(os.path.join(horovod_dir, "tensorflow", "keras", "callbacks.py")) as f:
            patched = UNPATCHED_LINE not in f.read()
    except OSError:
        patched = None
    return built, patched


def stack_of(f: Found) -> Optional[Stack]:
    """The tested stack these versions are, if any."""
    for s in STACKS.values():
        if (
            release(f.tensorflow) == s.tensorflow
            and f.keras2
            and f.keras2.split()[0] == s.keras2
            and release(f.keras2.split()[1]) == s.tensorflow
            and f.horovod == HOROVOD
            and (f.horovod_patched or not s.horovod_patched)
        ):
            return s
    return None


def judge(f: Found) -> tuple:
    """("supported" | "untested" | "unsupported", [reasons]): supported is one of STACKS as it
    was tested here; untested runs as far as the project knows but was not run here;
    unsupported does not run, and each reason says what to do."""
    tf, problems, untested = release(f.tensorflow), [], []
    if not tf:
        problems.append("no TensorFlow: `make install` (docs/install.md)")
    elif tf < (2, 15):
        problems.append(f"TensorFlow {f.tensorflow} is older than the paper-era stack's 2.15.1")
    else:
        if len(f.tensorflow_dists) > 1:
            untested.append(
                f"{' and '.join(f.tensorflow_dists)} are both installed and share one folder; "
                f"keep one (tf-keras pulls `tensorflow` unless installed with --no-deps)"
            )
        if f.keras2 is None:
            problems.append(
                f"no Keras 2 beside TensorFlow {f.tensorflow}, whose own Keras is Keras 3: "
                f"pip install --no-deps 'tf-keras=={tf[0]}.{tf[1]}.*'"
            )
        elif release(f.keras2.split()[1]) != tf:
            problems.append(f"{f.keras2} beside TensorFlow {f.tensorflow}: their releases must match")
        if tf > STACKS["current"].tensorflow:
            untested.append(f"TensorFlow {f.tensorflow} is newer than the current stack's 2.21")
        elif STACKS["paper"].tensorflow < tf < STACKS["current"].tensorflow:
            untested.append(f"TensorFlow {f.tensorflow} lies between the stacks tested (2.15 and 2.21)")
    if f.horovod is None:
        problems.append("no Horovod: one process trains, horovodrun and the study do not; `make install` builds it")
    else:
        if f.horovod != HOROVOD:
            untested.append(f"Horovod {f.horovod}, not {HOROVOD}")
        if f.horovod_built_against and f.tensorflow and f.horovod_built_against != f.tensorflow:
            problems.append(
                f"Horovod was built against TensorFlow {f.horovod_built_against}, this is "
                f"{f.tensorflow}: rebuild it, scripts/horovod.sh VENV"
            )
        if tf >= (2, 16) and f.horovod_patched is False:
            problems.append(
                "Horovod's Keras callbacks import Keras 3 (its MetricAverageCallback fails at epoch "
                "end, horovod/horovod#4290): rebuild it with the patch, scripts/horovod.sh VENV"
            )
    stack = stack_of(f)
    python = release(f.python)
    if stack and python not in map(release, stack.pythons):
        untested.append(
            f"Python {f.python} is outside the {stack.name} stack's {stack.pythons[0]} to {stack.pythons[-1]}"
        )
    elif stack and python not in map(release, stack.run_here):
        untested.append(
            f"Python {f.python} is admitted for the {stack.name} stack but was not run here "
            f"(CI runs it on Python {' and '.join(stack.run_here)} only: docs/install.md, "
            f"'Systems run')"
        )
    if problems:
        return "unsupported", problems + untested
    if stack is None or untested:
        return "untested", untested or ["not one of the tested stacks"]
    return "supported", [f"the {stack.name} stack ({stack.what})"]


def describe(f: Found) -> list:
    """The lines `deepdensity --version` prints after the project's own."""
    verdict, reasons = judge(f)
    tf = f"TensorFlow {f.tensorflow} ({', '.join(f.tensorflow_dists)})" if f.tensorflow else "TensorFlow: none"
    keras = (f"Keras 2: {f.keras2}" if f.keras2 else "Keras 2: none") + (
        f"; Keras {f.keras3} is installed too and not used (tf.keras is Keras 2 under TF_USE_LEGACY_KERAS=1)"
        if f.keras3
        else ""
    )
    horovod_line = (
        "Horovod: none"
        if f.horovod is None
        else f"Horovod {f.horovod}"
        + (f", built against TensorFlow {f.horovod_built_against}" if f.horovod_built_against else "")
        + (
            ""
            if f.horovod_patched is None or release(f.tensorflow) < (2, 16)
            else ", with the project's patch"
            if f.horovod_patched
            else ", without the project's patch"
        )
    )
    return [f"Python {f.python}", tf, keras, horovod_line, f"{verdict}: " + "; ".join(reasons)]


def keras_of(tf) -> str:
    """The version of the package that tf.keras is in this process: tf_keras 2.21.0 under
    TF_USE_LEGACY_KERAS=1, keras 2.15.0 on TensorFlow 2.15, keras 3.x otherwise (the module
    tf.keras names has no __version__ of its own; its top package has)."""
    top = tf.keras.__name__.split(".")[0]
    return f"{top} {getattr(sys.modules.get(top), '__version__', '?')}"


def require_keras2(tf) -> None:
    """Raises where tf.keras is Keras 3 in this process: TensorFlow was imported before
    deepdensity (whose import sets TF_USE_LEGACY_KERAS=1), or tf_keras is missing."""
    keras = keras_of(tf)
    if release(keras.split()[1])[:1] != (2,):
        raise UserError(
            f"tf.keras is {keras} in this process; the project runs on Keras 2. Import deepdensity before "
            f"TensorFlow, or set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, and install tf-keras beside "
            f"TensorFlow {tf.__version__} (deepdensity --version says what is installed)"
        )


def require_patched_horovod(tf_version: str) -> None:
    """Raises where Horovod's Keras callbacks would import Keras 3 (TensorFlow 2.16 or later
    with Horovod built without the project's patch): the run would fail at its first epoch's
    end, in MetricAverageCallback; this says so before it trains."""
    if release(tf_version) >= (2, 16) and _horovod_build(_horovod_dir())[1] is False:
        raise UserError(
            f"Horovod here was built without the project's patch, and on TensorFlow {tf_version} its "
            f"Keras callbacks import Keras 3 (horovod/horovod#4290): rebuild it with "
            f"scripts/horovod.sh VENV (docs/install.md)"
        )


def git_revision() -> str:
    """The checkout's short revision, or 'unknown' outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).resolve().parent
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"
