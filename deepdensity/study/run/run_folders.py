"""A study run's folder, besides training it: whether it holds a ledger entry's answer, a
stopped run made resumable (in place, or copied as another run's start), a run launched under
another controller set aside, and removal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

from deepdensity.study.core import ledger
from deepdensity.training.runs import read_json
from deepdensity.utils.files import write_atomic

SET_ASIDE = "set-aside"


def holds(out: Path, entry: dict, result: dict) -> bool:
    """Does the folder already hold this outcome, written from this entry?"""
    if not (out / "result.json").is_file() or not (out / ledger.MARKER).is_file():
        return False
    if read_json(out / ledger.MARKER, "ledger marker").get("key") != entry["key"]:
        return False
    r = read_json(out / "result.json", "run's result")
    return r == result  # the same answer, the same stopping rules


def continuation(stopped: Path, out: Path) -> None:
    """`out` as the stopped run's folder at its last checkpoint, without its final status, so
    that train.py resumes it under the stopping rules asked for now (the stall settings decide
    where a run stops, never its path: training/runs.py RESUMABLE). A stopped run with no
    checkpoint (written from the ledger) leaves `out` absent: the run trains from epoch 0."""
    if not (stopped / "state.json").is_file():
        return
    partial = out.with_name(out.name + ".partial")  # a crash mid-copy leaves no half folder as `out`
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(stopped, partial, ignore=shutil.ignore_patterns("result.json", "weights.h5", ledger.MARKER))
    _drop_final_status(partial)
    partial.rename(out)


def reopen(out: Path) -> None:
    """The finished run in `out` made resumable from its last checkpoint: its state loses its
    final status first, then result.json goes (a crash between the two reopens it again)."""
    _drop_final_status(out)
    (out / "result.json").unlink()
    (out / "weights.h5").unlink(missing_ok=True)


def _drop_final_status(folder: Path) -> None:
    """The run's state.json without its final status: train.py resumes it from its checkpoint."""
    state = read_json(folder / "state.json", "stopped run's state")
    state.pop("status", None)
    write_atomic(folder / "state.json", json.dumps(state))


def other_controller(out: Path, controller: str) -> Optional[str]:
    """The controller the folder's run of several processes ran under, where it is not
    `controller` (its config.json's `launch`), or 'unrecorded' for one from before runs recorded
    it (the build had MPI at times then); None where the same, or for one process (no allreduce)."""
    config = out / "config.json"
    if not config.is_file() or (out / ledger.MARKER).exists():  # written from the ledger, by its key
        return None
    saved = read_json(config, "run's configuration")
    if int(saved.get("world_size", 1) or 1) <= 1:
        return None
    had = (saved.get("launch") or {}).get("controller") or "unrecorded"
    return had if had != controller else None


def set_aside(out: Path, tag: str) -> Path:
    """The folder moved to SET_ASIDE/NAME.TAG beside it, kept but no longer the run `out` names
    (nor among the runs folder's runs, which are its direct subfolders)."""
    aside = _aside(out, tag)
    k = 1
    while aside.exists():
        k += 1
        aside = aside.with_name(f"{out.name}.{tag}-{k}")
    aside.parent.mkdir(exist_ok=True)
    out.rename(aside)
    return aside


def take_back(out: Path, tag: str) -> bool:
    """The run set aside as NAME.TAG back in `out`, where `out` is free (or holds only what the
    ledger wrote, no checkpoint): a study under the controller it ran under again reuses it
    instead of training it again."""
    aside = _aside(out, tag)
    if not aside.is_dir():
        return False
    if (out / ledger.MARKER).exists() and not (out / "state.json").exists():
        wipe(out)
    if out.exists():
        return False
    aside.rename(out)
    return True


def _aside(out: Path, tag: str) -> Path:
    return out.parent / SET_ASIDE / f"{out.name}.{tag}"


def wipe(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
