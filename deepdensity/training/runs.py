"""A run folder's files, read and written without TensorFlow (the study driver needs them too)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Optional

from deepdensity.config import FIELDS, Config, parse_set
from deepdensity.data.fingerprint import data_fingerprint as of_the_files_read
from deepdensity.utils.errors import UserError, horovodrun_prefix, shell_word
from deepdensity.utils.files import json_with, remove_pid_mark


class DamagedRun(UserError):
    """A run folder whose files cannot be read back: reported as one line, exit status 2."""


# Settings a resume may change: they extend the run, or change its speed or memory, never
# the optimisation path it continues (slicing and XLA only reorder float additions).
RESUMABLE = {
    "max_epochs": "extends the run (or ends it sooner)",
    "intra_op_threads": "speed only",
    "allreduce_groups": "speed only: the same sums (tests/training/test_horovod.py)",
    "horovod_cycle_ms": "speed only: when allreduces start, not what they sum",
    "max_pass_batch": "memory only: the same average gradient",
    "xla": "speed only: the same arithmetic",
    "rendering": "speed only: the same density to float32 rounding (tests/model/test_kernels.py)",
    "deterministic": "kernel choice only",
    "tensorboard_images_every": "what is logged only",
    "validate_every_pass": "what is logged only: validation reads the weights, never changes them",
    "stall_patience": "where the run stops, never its path "
    "(the study's stall check continues stopped runs with it off)",
    "stall_near": "where the run stops, never its path",
    "stall_near_patience": "where the run stops, never its path",
}

START_AFRESH = "start afresh with another --out (or delete the folder)"


def read_metrics(run_dir) -> list:
    """The per-epoch rows of a run's metrics.jsonl ([] when it has none yet).

    A last line without its newline is an append cut short by a crash and is dropped
    (the epoch it describes is redone on resume); any other unreadable line is damage."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    text = _read_text(path)
    lines = text.split("\n")
    if lines and not text.endswith("\n"):
        lines = lines[:-1]
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict) or "epoch" not in row:
            raise DamagedRun(f"{path} line {i} is not a metrics row; {START_AFRESH}")
        rows.append(row)
    return rows


def read_json(path: Path, what: str) -> dict:
    """A run folder's JSON object, or DamagedRun naming the file and the way out."""
    try:
        value = json.loads(_read_text(path))
    except FileNotFoundError:
        raise DamagedRun(f"{path} is missing, so the {what} is unknown; {START_AFRESH}") from None
    except ValueError as e:
        raise DamagedRun(f"{path} is damaged ({e}); {START_AFRESH}") from None
    if not isinstance(value, dict):
        raise DamagedRun(f"{path} is damaged (not a JSON object); {START_AFRESH}")
    return value


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DamagedRun(f"{path} is damaged (not UTF-8 text); {START_AFRESH}") from None


def resume_changes(saved: dict, wanted: dict, defaults: dict) -> list:
    """[(key, saved value, wanted value)] for every setting outside RESUMABLE that the
    resume would change. A key the saved run lacks was written before that setting
    existed, when the run behaved as its default."""

    def same(a, b):
        a = list(a) if isinstance(a, (list, tuple)) else a
        b = list(b) if isinstance(b, (list, tuple)) else b
        return a == b

    return [
        (key, saved.get(key, defaults.get(key)), value)
        for key, value in wanted.items()
        if key not in RESUMABLE and not same(saved.get(key, defaults.get(key)), value)
    ]


def data_fingerprint(path) -> str:
    """'size:sha256' of a data file's bytes, and of every file its cubes are read from through
    links (fingerprint.data_fingerprint): two files with this fingerprint hold the same cubes. A
    resume, or a study reusing a run, on a file at the same path with other content is then
    seen (reading 30 MB of cubes takes a tenth of a second)."""
    return of_the_files_read(path)


def other_data(saved: dict, fingerprint: str) -> bool:
    """Did the saved run train on other data than `fingerprint`? (Runs made before fingerprints
    were recorded have none, and are not judged.)"""
    return saved.get("data_fingerprint") not in (None, fingerprint)


# What a run writes into its folder (files of its own, or of the ledger's copy of a run), and
# what its config.json has always held beside the settings: its mode and N
RUN_ENTRIES = (
    "config.json",
    "metrics.jsonl",
    "state.json",
    "result.json",
    "weights.h5",
    "workers.jsonl",
    "ckpt",
    "tb",
    "from_ledger.json",
)
RUN_CONFIG_KEYS = ("mode", "workers", "base_lr", "n_components")


def made_before_marks(out) -> bool:
    """Is `out` a run folder this project wrote before folders were marked (utils/files.py
    FOLDER_MARK)? Only names a run writes (their temporaries too: NAME.*.tmp), and a config.json
    that names the run's mode and N beside its settings, as no config.json of the user's does."""
    out = Path(out)

    def written(name: str) -> bool:
        return name in RUN_ENTRIES or any(
            name.startswith(entry + ".") and name.endswith((".tmp", ".h5")) for entry in RUN_ENTRIES
        )

    return all(written(p.name) for p in out.iterdir()) and json_with(out / "config.json", RUN_CONFIG_KEYS)


def holds_nothing_to_resume(out) -> bool:
    """Is `out` a run folder left by a run stopped before its first checkpoint (Ctrl-C or SIGTERM
    before epoch 1)? No state.json and no epoch in metrics.jsonl: at most a config.json and an
    empty metrics.jsonl the run wrote as it started. The same command starts there again."""
    out = Path(out)
    if (out / "state.json").exists():
        return False
    try:
        return not read_metrics(out)
    except DamagedRun:
        return False


# Written by rank 0 when a run starts in its folder and removed when its process ends in any
# way Python sees (finished, interrupted, refused, an error): found by the next invocation, it
# says that the last one ended without a word (TensorFlow's std::bad_alloc abort, a SIGKILL).
RUNNING_MARK = ".running"


def drop_own_mark(out) -> None:
    """Remove the RUNNING_MARK in `out` if this process wrote it (never another's, which says
    that a process trains there, or died there without a word)."""
    remove_pid_mark(Path(out) / RUNNING_MARK, os.getpid())


def died_unsaid(out) -> Optional[str]:
    """The line that tells the user the last run in `out` ended without a word, or None (no
    such end, or it finished an epoch: --resume then continues it as usual)."""
    out = Path(out)
    if not (out / RUNNING_MARK).exists() or not holds_nothing_to_resume(out):
        return None
    return (
        f"{out}: the last run here ended without a word before finishing its first epoch (a crash: out of "
        f"memory, where TensorFlow aborts with std::bad_alloc, or a kill); starting it again; if it dies "
        f"again: fewer n_components or a smaller batch (docs/performance.md#memory)"
    )


def continue_command(run_dir, saved: dict) -> str:
    """The command that continues the run in `run_dir` (or starts it again there when no epoch
    was checkpointed) as its config.json (`saved`) describes it: its mode, its N (horovodrun's
    processes, or --emulate-workers), and every setting that differs from the defaults as a
    --set, so that the resume keeps the run's optimisation path whatever config file it started
    from. The data path is the one the run was given (relative to where it was started); an
    --elastic run continues under the elastic horovodrun it was started with, which config.json
    does not record (its -np is the size it started at). A run horovodrun ran under Gloo goes
    on with --gloo: on a build with MPI, horovodrun's default is MPI."""
    defaults = Config().to_dict()
    words = ["--mode", str(saved["mode"]), "--out", os.fspath(run_dir), "--resume"]
    if saved.get("elastic"):
        words.append("--elastic")
    elif saved.get("emulated") and int(saved.get("workers", 1)) > 1:
        words += ["--emulate-workers", str(saved["workers"])]
    for key in FIELDS:
        if key in saved and _listed(saved[key]) != _listed(defaults.get(key)):
            words += ["--set", f"{key}={_set_value(key, saved[key])}"]
    processes = int(saved.get("world_size", 1) or 1)
    gloo = (saved.get("launch") or {}).get("controller") == "gloo"
    prefix = horovodrun_prefix(processes, gloo) if processes > 1 else ""
    return prefix + "python -m deepdensity train " + " ".join(shell_word(w) for w in words)


def _listed(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def _set_value(key: str, value) -> str:
    """`value` written so that `--set key=...` reads it back: text as it is (quoted as JSON
    when --set would read it as something else: 'true', '3'), anything else as JSON, which
    YAML reads (lists, numbers, null)."""
    if isinstance(value, str):
        return value if parse_set([f"{key}={value}"])[key] == value else json.dumps(value)
    return json.dumps(value)


def runs_root() -> Path:
    """Where runs go when no folder is given: $DEEPDENSITY_RUNS, else runs/ under the working directory."""
    return Path(os.environ.get("DEEPDENSITY_RUNS") or "runs")


def new_run_folder(root: Path, stem: str) -> Path:
    """root/stem, or root/stem-2, -3, ... when taken: a folder no earlier run uses (not made here)."""
    folder, k = root / stem, 1
    while folder.exists():
        k += 1
        folder = root / f"{stem}-{k}"
    return folder


class RunInUse(UserError):
    """Another process trains in the run folder."""


@contextlib.contextmanager
def locked(out: Path, holder_is: str = "another training process", instead: str = "pass another --out"):
    """Hold an exclusive lock on the run folder while the block runs, so that a second process
    training into it is refused with the holder's pid instead of mixing two runs' epochs in
    one metrics.jsonl (or, for a study's runs folder, two studies' runs). The lock is the
    kernel's (flock on the folder), so a killed holder releases it. A folder that cannot be
    made is left to the caller's own check."""
    import fcntl

    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _flock_holder(out)
            raise RunInUse(
                f"{out} is in use by {holder_is}"
                f"{f' (pid {holder})' if holder else ''}; wait for it to end, or {instead}"
            ) from None
        yield
    finally:
        os.close(fd)


def _flock_holder(path: Path) -> Optional[int]:
    """The pid holding an flock on `path`, from Linux's /proc/locks (None elsewhere)."""
    inode = str(os.stat(path).st_ino)
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].split(":")[-1] == inode:
            return int(fields[4])
    return None
