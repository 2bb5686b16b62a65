"""A training run's folder: checked before the run, read back on resume, written after every
epoch and at the end. Rank 0 alone reads and writes it; what the other ranks must know of it
(where the run resumes, whether it is finished) reaches them through `agree.Ranks`.

runs.py reads and writes the folder's files without TensorFlow (the study driver needs them);
this module adds what a training process does with them: the checkpoint, the resume point,
the final weights."""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Optional

import tensorflow as tf

from deepdensity.config import Config
from deepdensity.scaling import rules
from deepdensity.scaling.rules import RunStatus
from deepdensity.training.launch import Launch
from deepdensity.training.runs import (
    RESUMABLE,
    RUNNING_MARK,
    START_AFRESH,
    DamagedRun,
    died_unsaid,
    holds_nothing_to_resume,
    made_before_marks,
    read_json,
    read_metrics,
    resume_changes,
)
from deepdensity.utils.errors import UserError
from deepdensity.utils.files import atomic_path, check_own_folder, mark_folder, write_atomic

FINAL = (RunStatus.REACHED, RunStatus.DIVERGED, RunStatus.STALLED, RunStatus.COLLAPSED)


class RunError(UserError):
    """A run that cannot start as asked (bad output folder, nothing to resume, ...)."""


def check_out_dir(out: Path, resume: bool) -> Optional[dict]:
    """Make sure `out` is the project's to write into (new, empty, or a run's folder: a folder
    of the user's is refused before anything is written, --resume or not) and writable, and
    mark it as a run's; returns the state to resume."""
    check_own_folder(out, "--out", "run", made_before_marks)
    try:
        mark_folder(out, "run")
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise RunError(f"cannot write to output folder {out} ({e.strerror}); pass another --out") from None
    state_path = out / "state.json"
    if resume:
        if not state_path.exists():
            return None
        state = read_json(state_path, "epoch to resume from")
        if not (
            isinstance(state.get("epoch"), int)
            and isinstance(state.get("elapsed_s"), (int, float))
            and isinstance(state.get("checkpoint"), str)
        ):
            raise DamagedRun(f"{state_path} is damaged (no epoch, elapsed_s or checkpoint); {START_AFRESH}")
        return state
    if (state_path.exists() or (out / "metrics.jsonl").exists()) and not holds_nothing_to_resume(out):
        raise RunError(
            f"output folder {out} already holds a run; pass --resume to continue it, or choose another --out"
        )
    return None  # a new run, or one stopped before its first checkpoint started again


def resume_identity(cfg: Config, run: Launch) -> dict:
    """What a resume must keep: the settings, the mode, elastic or not, and N, except in an
    elastic run, which goes on at any N as it does when workers leave."""
    same = {**cfg.to_dict(), "mode": run.p.mode, "elastic": run.elastic}
    return same if run.elastic else {**same, "workers": run.workers, "world_size": run.processes}


def check_resume(out: Path, wanted: dict) -> None:
    """Refuse a resume that would change the optimisation path of the run in `out`."""
    saved = read_json(out / "config.json", "run's configuration")
    changes = resume_changes(saved, wanted, {**Config().to_dict(), "elastic": False})
    if changes:
        what = ", ".join(f"{key} {old!r} -> {new!r}" for key, old, new in changes)
        raise RunError(
            f"{out} holds a run with other settings ({what}); a resume continues the same "
            f"optimisation path, so only {', '.join(RESUMABLE)} may change: start a new run "
            f"with another --out"
        )


def finished(state: Optional[dict], cfg: Config, run: Launch) -> bool:
    """Is the run in the folder final? A run stopped at the epoch cap is extended by a larger
    max_epochs; the others are final. Rank 0 read the folder; every rank learns its answer."""
    done = bool(
        state
        and (
            state.get("status") in FINAL
            or (state.get("status") == RunStatus.CAPPED and state["epoch"] + 1 >= cfg.max_epochs)
        )
    )
    return run.ranks.any(done)


def restore(ckpt, out: Path, state: dict) -> None:
    """Load the checkpoint state.json names, or say plainly that it is damaged."""
    path = out / state["checkpoint"]
    if not Path(f"{path}.index").is_file():
        raise DamagedRun(f"the checkpoint {path} that {out / 'state.json'} names is missing; {START_AFRESH}")
    try:
        # write() saves no save_counter, so ask only that the model and optimizer matched.
        ckpt.restore(str(path)).assert_nontrivial_match()
    except (tf.errors.OpError, ValueError, AssertionError, IndexError) as e:  # IndexError: a cut .data file
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise DamagedRun(f"the checkpoint {path} is damaged ({reason}); {START_AFRESH}") from None


def resume_point(ckpt, run: Launch, state: Optional[dict]) -> tuple:
    """(first epoch to run, seconds already spent): restores the checkpoint of a resumed run
    (rank 0, which alone read the folder; every rank learns where it resumes)."""
    initial_epoch, elapsed_before = 0, 0.0
    if state:
        restore(ckpt, run.out, state)
        initial_epoch, elapsed_before = state["epoch"] + 1, state["elapsed_s"]
    return run.ranks.from_chief((initial_epoch, elapsed_before))


def start_files(out: Path, initial_epoch: int, run_config: dict) -> list:
    """A new run writes config.json and an empty metrics.jsonl; a resumed one drops the
    metrics lines of epochs its checkpoint does not cover, and config.json takes the resumable
    settings it goes on under (a raised max_epochs, the stall rule turned off), so that it says
    what the run continues with. Returns the kept val_losses."""
    if initial_epoch == 0:
        write_atomic(out / "config.json", json.dumps(run_config, indent=2))
        (out / "metrics.jsonl").write_text("")
        return []
    saved = read_json(out / "config.json", "run's configuration")
    now = {**saved, **{k: v for k, v in run_config.items() if k in RESUMABLE}}
    if now != saved:
        write_atomic(out / "config.json", json.dumps(now, indent=2))
    kept = keep_rows_up_to(out, initial_epoch)
    return [math.inf if m["val_loss"] is None else m["val_loss"] for m in kept]


def claim(out: Path) -> Optional[str]:
    """Mark `out` as trained in by this process, which `ended` undoes when it ends in a way
    Python sees; returns the line that says the last process here ended without a word, if it
    did (runs.died_unsaid)."""
    died = died_unsaid(out)
    write_atomic(out / RUNNING_MARK, json.dumps({"pid": os.getpid()}))
    return died


def ended(out: Path) -> None:
    """The run's process ends in a way Python sees: the next invocation has nothing to warn of
    (a folder that never was, or went, has no mark to remove, and the error that ended the run
    is the one to show)."""
    with contextlib.suppress(OSError):
        (out / RUNNING_MARK).unlink()


def keep_rows_up_to(out: Path, epoch: int) -> list:
    """Drop the rows of metrics.jsonl after `epoch` (counted from 1); returns the kept ones."""
    kept = [m for m in read_metrics(out) if m["epoch"] <= epoch]
    write_atomic(out / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in kept))
    return kept


def last_epoch_again(record, rows: list) -> None:
    """The outcome of a run's last checkpointed epoch, from its metrics row (what Stopping
    decided then, decided again)."""
    if not rows:
        return
    last, cfg = rows[-1], record.cfg
    loss, val_loss = (math.nan if last[k] is None else last[k] for k in ("loss", "val_loss"))
    record.row, record.losses = last, (loss, val_loss)
    record.status = rules.StoppingRules.of(cfg).reason(last["epoch"] - 1, loss, val_loss, record.val_history)
    if record.status == RunStatus.REACHED:
        record.time_to_target_s = last["seconds"]


def save_run(model, record, run: Launch, state: Optional[dict]) -> dict:
    """weights.h5, result.json and the final state.json (rank 0); returns the result."""
    result = record.result()
    if run.writes:
        with atomic_path(run.out / "weights.h5", suffix=".h5") as tmp:  # Keras picks the format by suffix
            model.save_weights(str(tmp))
        write_atomic(run.out / "result.json", json.dumps(result, indent=2))
        write_atomic(run.out / "state.json", json.dumps({**(state or {}), "status": result["status"]}))
    return result


def last_workers(out: Path) -> int:
    """The N an elastic run in `out` last trained with: its last change, else its start
    (a last line cut by a crash does not count)."""
    last = read_json(out / "config.json", "run's configuration")["workers"]
    path = out / "workers.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            last = int(json.loads(line)["new_workers"])
    return last


def append_workers_change(out: Path, change: dict) -> None:
    """One line of workers.jsonl, on disk before training goes on."""
    with open(out / "workers.jsonl", "a") as f:
        f.write(json.dumps(change) + "\n")
        f.flush()
        os.fsync(f.fileno())
