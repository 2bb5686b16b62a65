"""One study's state and its set-up and publishing: the options it was asked (StudyOptions), the
invocation (StudyRun: preset, folders, runner, the data's facts), what every cell shares
(Protocol: eta, target, cap, settings); the runs folder with its data, settings, ledgers and
runner (start_study); and the reports, staged in the runs folder and published into the
reports folder only when complete (publish).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from deepdensity.config import load
from deepdensity.data.cubes import input_independent_loss, load_cubes, to_density
from deepdensity.data.synth import write_synthetic
from deepdensity.launch.slurm_jobs import SlurmOptions
from deepdensity.scaling import rules
from deepdensity.study.core.ledger import LEDGER_FILE, Ledger
from deepdensity.study.core.preset import RUN_DEFAULTS, Study
from deepdensity.study.core.request import cells_stopping
from deepdensity.study.run.runner import StudyRunner, fmt_s
from deepdensity.study.run.slurm_runner import SlurmRunner
from deepdensity.utils import machine
from deepdensity.utils.errors import StudyError
from deepdensity.utils.files import mark_folder

# The committed reports: updated only when asked (--out reports), a preset other than
# default in its own subfolder so that it never overwrites the default study's files.
COMMITTED_REPORTS = Path("reports")


def reports_folder(name: str, asked: Optional[str], runs: Path) -> Path:
    """Where a study's reports go: RUNS/reports unless asked; reports/PRESET for `--out reports`
    with a preset other than default."""
    if asked is None:
        return runs / "reports"
    out = Path(asked)
    if name != "default" and out.resolve() == COMMITTED_REPORTS.resolve():
        return out / name
    return out


@dataclass(frozen=True)
class StudyOptions:
    """What a study was asked on its command line, as the library reads it (built once, in
    repro.main, from the parsed flags)."""

    runner: str  # --runner: a launcher template with {n}; "": one process emulates N workers
    lr_sweep: bool  # --lr-sweep: only the edge of stability
    no_train: bool  # --no-train: the reports from the runs held, training nothing
    compare_with: str  # the default study's reports folder a beyond study compares with
    ledgers: tuple  # --ledger: other ledgers of finished runs to reuse
    out: Optional[str]  # --out as given (None: RUNS/reports)
    dry_run: bool  # --dry-run: the plan only
    executor: str  # --executor: where the runs train, here or as Slurm jobs
    slurm: tuple  # --slurm KEY=VALUE options over the preset's `slurm:`
    stack_check: str = ""  # --stack-check VENV: seed 0 of every trained cell again on VENV's stack


@dataclass
class StudyRun:
    """One invocation of a study: its preset, where it writes, and the facts of its data."""

    name: str
    study: Study
    root: Path  # the runs folder
    out: Path  # the reports folder
    train_yaml: Path  # the settings every run of the study starts from
    runner: StudyRunner
    n_train: int
    n_val: int
    collapse_loss: float
    t_start: float

    def elapsed(self) -> str:
        return fmt_s(time.perf_counter() - self.t_start)

    def deadline(self) -> float:
        """When the sequential design stops starting runs (perf_counter seconds)."""
        budget = self.study.budget_minutes
        return self.t_start + (budget * 60 if budget is not None else 0.0)

    def environment(self) -> dict:
        """Versions as the first sequential run recorded them, and the machine named (CPU, cores,
        oneDNN's ISA, the rendering the runs' `rendering` setting picks here): the record's."""
        # TensorFlow only when a study records its machine: the dry run and the plan need none
        from deepdensity.model import kernels
        from deepdensity.model.layers import uses_kernel

        saved = json.loads((self.root / f"seq-s{self.study.sequential_seeds()[0]}" / "config.json").read_text())
        versions = saved.get("versions", {})
        rendering = saved.get("config", saved).get("rendering", "auto")
        return {
            **{k: versions.get(k) for k in ("python", "tensorflow", "keras", "horovod", "numpy", "gpus")},
            "cpu": machine.cpu_model(),
            "cores": os.cpu_count(),
            "onednn_isa": machine.onednn_isa(),
            "rendering": f"kernel ({kernels.isa()})" if uses_kernel(rendering) else "TensorFlow ops",
            "platform": platform.platform(),
        }


@dataclass
class Protocol:
    """What every cell of one study shares: eta, the target, the cap, the settings."""

    eta: float
    target: float
    max_epochs: int
    seq_max_epochs: int  # the sequential runs' length: E + max(N) passes
    cfg: object  # the runs' Config, eta included
    collapse_loss: float = 0.0  # the data's collapse level, where collapse_patience stops a run
    calibration: Optional[dict] = None  # what set the target (sequential.calibrated_target)

    def common(self) -> dict:
        collapse = {"collapse_loss": self.collapse_loss} if self.cfg.collapse_patience else {}
        return {"base_lr": self.eta, "target_loss": self.target, "max_epochs": self.max_epochs, **collapse}

    def stopping(self) -> rules.StoppingRules:
        """The stopping rules every cell's runs apply: the settings' stall and collapse rules, at
        this study's target, cap and collapse level (the collapse rule off where its patience is)."""
        return cells_stopping(self.cfg, self.target, self.max_epochs, self.collapse_loss)


def write_ledger_and_publish(s: StudyRun, out: Path) -> None:
    """The ledger of every finished run this study knows, beside its reports; then publish."""
    count = s.runner.ledger.write_merged(s.out / LEDGER_FILE)
    print(f"ledger: {count} finished run(s) -> {LEDGER_FILE} beside the reports")
    publish(s.out, out)


def publish(stage: Path, out: Path) -> None:
    """Move every file of a complete rendering from `stage` into `out`, replacing files of
    the same name and leaving others (bench.json, a preset's subfolder) alone; `stage` goes."""
    mark_folder(out, "reports")
    for f in sorted(stage.iterdir()):
        if f.is_file():
            shutil.move(str(f), str(out / f.name))  # a rename on one file system
    shutil.rmtree(stage, ignore_errors=True)


def run_settings(study: Study, data_path) -> dict:
    """The settings every run of the study starts from (its train.yaml): the preset's, on the
    study's data, with deterministic kernels and a fixed thread count, so that a rerun of the
    study on this machine gives the same epochs to target (the thread count changes the
    rounding too)."""
    return {**RUN_DEFAULTS, **study.train, "data_path": str(data_path), "deterministic": True}


def start_study(name: str, study: Study, options: StudyOptions, root: Path) -> StudyRun:
    """The runs folder with the study's data and settings, the staging folder for the
    reports, the runner."""
    root.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    data_path = _study_data(root, name, study.data)
    train_yaml = root / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(run_settings(study, data_path)))
    out = root / "reports.partial"  # published into the reports folder when complete (publish)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    runs_cfg = load(str(train_yaml))
    n_train, n_val, collapse_loss = _data_facts(runs_cfg)
    print(f"collapse level: val_loss {collapse_loss:.6g} (the training set's mean cube for every input)")
    parallel = parallel_runs(study)
    if options.executor == "slurm":
        slurm = SlurmOptions.parse(study.slurm, options.slurm)
        runner = SlurmRunner(root, train_yaml, options.runner or None, slurm, runs_cfg.intra_op_threads, name)
        print(
            f"executor: Slurm, up to {slurm.max_jobs} jobs at once"
            + (f" in partition {slurm.partition}" if slurm.partition else "")
            + f", {slurm.time} each"
        )
    else:
        runner = StudyRunner(root, train_yaml, options.runner or None, parallel=1 if options.runner else parallel)
    runner.ledger = Ledger(root / LEDGER_FILE, ledgers_to_read(name, options, root))
    runner.may_train = not options.no_train
    if runner.ledger.entries:
        print(f"ledger: {len(runner.ledger.entries)} finished run(s) on record, reused where their settings match")
    s = StudyRun(name, study, root, out, train_yaml, runner, n_train, n_val, collapse_loss, t_start)
    if study.budget_minutes is not None:
        runner.budget_end = s.deadline()
    return s


def parallel_runs(study: Study) -> int:
    """Runs side by side: the preset's, or the cores over each run's threads (one by default)."""
    threads = study.runs.intra_op_threads or 1
    return study.parallel_runs if study.parallel_runs != "auto" else max(1, (os.cpu_count() or 1) // threads)


def ledgers_to_read(name: str, options: StudyOptions, root: Path) -> list:
    """The ledgers a study reuses runs from besides its runs folder's own: the committed one of
    its preset, the output folder's, and those given with --ledger."""
    committed = reports_folder(name, str(COMMITTED_REPORTS), root) / LEDGER_FILE
    asked = reports_folder(name, options.out, root) / LEDGER_FILE
    extra = [Path(p) for p in options.ledgers]
    for p in extra:
        if not p.is_file():
            raise StudyError(f"--ledger {p}: no such file")
    return list(dict.fromkeys([committed, asked, *extra]))


def _study_data(root: Path, name: str, d: dict) -> Path:
    """The study's synthetic data set, written once per runs folder."""
    data_path = root / "data.h5"
    if not data_path.exists():
        print(f"data: {d['n']} synthetic cubes ({d['val']} validation, seed {d['seed']}) -> {data_path}")
        write_synthetic(
            data_path,
            d["n"],
            d["val"],
            d["seed"],
            progress=sys.stderr.isatty(),
            created_by=f"deepdensity.repro --preset {name}",
        )
    return data_path


def _data_facts(cfg) -> tuple:
    """(n_train, n_val, collapse loss): the split sizes the runs train on, and the
    validation loss of rendering the training set's mean cube for every input."""
    cubes = load_cubes(cfg.data_path)
    train, val = cubes.train[: cfg.max_train_cubes or None], cubes.val
    if cfg.intensity_scaling == "density":
        train, val = to_density(train)[0], to_density(val)[0]
    return len(train), len(val), input_independent_loss(train, val)
