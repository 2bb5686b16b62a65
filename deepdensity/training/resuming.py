"""What a run checks and says when it resumes: the state rank 0 reads from its folder, the settings
and the data a resume must keep, and the line that says what it restored (the folder's files
themselves: run_folder.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from deepdensity.config import Config
from deepdensity.training import run_folder, runs
from deepdensity.training.launch import Launch
from deepdensity.training.run_folder import RunError
from deepdensity.training.runs import START_AFRESH, read_json
from deepdensity.utils.errors import shown


def open_folder(cfg: Config, run: Launch, resume: bool) -> Optional[dict]:
    """The state to resume from (rank 0, which alone reads the folder), after checking the
    folder and that the resume keeps the run's settings; None for a new run."""

    def check() -> Optional[dict]:
        state = run_folder.check_out_dir(run.out, resume)
        died = run_folder.claim(run.out)
        if died:
            run.say(died)
        if resume and state is None:
            run.say(f"nothing to resume in {run.out}; starting a new run there")
        if state:
            run_folder.check_resume(run.out, run_folder.resume_identity(cfg, run))
        return state

    return run.ranks.chief_check(check, run.writes)


def check_same_data(cfg: Config, out: Path, n_train: int, n_val: int, fingerprint: Optional[str]) -> None:
    """A resume continues on the data the run started on (same split sizes, same content)."""
    run_folder.check_resume(out, {"n_train": n_train, "n_val": n_val})
    if runs.other_data(read_json(out / "config.json", "run's configuration"), fingerprint):
        raise RunError(
            f"{out} was trained on other data than {shown(cfg.data_path)} holds now (its content "
            f"changed); a resume continues the same optimisation path: {START_AFRESH}"
        )


def resumed_line(out: Path, initial_epoch: int, state: dict, rows: int) -> str:
    """What a resumed run says it restored, in one line (rank 0, before its first epoch)."""
    return (
        f"resumed from epoch {initial_epoch} of {out}: weights and optimizer state from "
        f"{state['checkpoint']}, {rows} epoch{'' if rows == 1 else 's'} of metrics.jsonl, "
        f"{state['elapsed_s']:.1f} s on the run's clock"
    )
