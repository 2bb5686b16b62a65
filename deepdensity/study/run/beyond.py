"""The beyond study's experiments past the paper (docs/beyond.md): the default study's cells beside
its own (their times modelled again on this study's clock), Gahlot et al.'s data filter, the
sweep of the sequential model's batch size: what the beyond study runs past the paper's cells
(its record and reports: rerender.BEYOND).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from deepdensity.scaling import policies, rules
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import curves
from deepdensity.study.core.cells import Cell, filter_n, time_to_target
from deepdensity.study.core.preset import SWEEP_STOPPING, Study, figure1_run
from deepdensity.study.record import beyond_keys
from deepdensity.study.run.outcomes import timed
from deepdensity.study.run.runner import StudyRunner
from deepdensity.study.run.sequential import sequential_path, val_losses
from deepdensity.training.runs import read_json
from deepdensity.utils.errors import StudyError


def filter_experiment(
    runner: "StudyRunner",
    study: Study,
    common: dict,
    earlier_cells: list,
    own_cells: list,
    n_val: int,
    timing: dict,
    modelled,
    say=print,
) -> Optional[dict]:
    """Gahlot et al.'s experiment: each of `filter_modes` at the N where it is slowest or
    fails (cells.filter_n, on the default study's cells) trained on the full data, on the
    data filtered by the first sequential run (python -m deepdensity.filter) and on
    the random control; same validation set, target and seeds. The full-data runs are the
    default study's when it has them (their times modelled again here), else run here."""
    if not study.filter_modes:
        return None
    root = runner.root
    filtered, random_ctl = _filtered_data(root, study, say)
    rows, jobs = _filter_jobs(
        study, common, earlier_cells, own_cells, modelled, (("network", filtered), ("random", random_ctl))
    )
    results = runner.run_all(
        [functools.partial(runner.run, nm, mode, n, st) for _, nm, mode, n, st in jobs], label="filter runs"
    )
    for (facts, nm, mode, n, _), r in zip(jobs, results):
        rows.append(
            {
                **facts,
                **timed(
                    root / nm,
                    mode,
                    n,
                    n_val,
                    timing,
                    r,
                    float(common["target_loss"]),
                    curves.passes_per_epoch(n, study.runs.epoch_definition),
                ),
            }
        )
    rows.sort(
        key=lambda r: (study.filter_modes.index(r["mode"]), r["seed"], ("full", "network", "random").index(r["data"]))
    )
    return {
        "rows": rows,
        "filter": _filter_facts(filtered),
        "figures": [filtered.with_suffix(".embedding.png"), filtered.with_suffix(".dropped.png")],
    }


def _filtered_data(root: Path, study: Study, say=print) -> tuple:
    """(filtered data, random control) of the runs folder's data.h5: the data filtered by the
    features of the first sequential run (python -m deepdensity.tools.filter), made once."""
    data, filtered = root / "data.h5", root / "data.filtered.h5"
    random_ctl = filtered.with_suffix(".random.h5")
    # the first sequential run the study trained (its seeds may be apart from the cells'), as
    # Fig. 1 draws it: the run with its weights (sequential.figure1_run)
    features = figure1_run(root, study.sequential_seeds()[0])
    if not (filtered.exists() and random_ctl.exists()):
        say(f"filter: features of {features} -> {filtered}")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "deepdensity.tools.filter",
                "--run",
                str(features),
                "--data",
                str(data),
                "--out",
                str(filtered),
                "--seed",
                str(study.seeds[0]),
                "--force",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        if proc.returncode != 0:
            raise StudyError(f"the data filter failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        say(proc.stdout.strip())
    return filtered, random_ctl


def _filter_jobs(study: Study, common: dict, earlier_cells: list, own_cells: list, modelled, variants: tuple) -> tuple:
    """(rows, jobs) of the filter experiment: the rows of the full-data runs the default study
    holds (earlier_cells), and the runs to train, as (row facts, run name, mode, n, settings) run
    side by side: the full-data runs it does not hold and every run on each of `variants`
    ((variant, data path))."""
    rows, jobs = [], []
    for mode in study.filter_modes:
        source = earlier_cells if any(c.mode == mode for c in earlier_cells) else own_cells
        n = filter_n(source, mode)
        if n is None:
            raise StudyError(f"filter_modes: {mode} ran at no N > 1, neither here nor in --compare-with's cells")
        for seed in study.seeds:
            full = [c for c in source if (c.mode, c.n, c.seed) == (mode, n, seed)]
            if full:
                rows.append(
                    _earlier_full_row(full[0], modelled, curves.passes_per_epoch(n, study.runs.epoch_definition))
                )
            else:
                jobs.append(
                    (
                        {"mode": mode, "n": n, "seed": seed, "data": "full"},
                        f"{mode}-n{n}-s{seed}",
                        mode,
                        n,
                        {**common, "seed": seed},
                    )
                )
            for variant, path in variants:
                jobs.append(
                    (
                        {"mode": mode, "n": n, "seed": seed, "data": variant},
                        f"{mode}-n{n}-{variant}-s{seed}",
                        mode,
                        n,
                        {**common, "seed": seed, "data_path": str(path)},
                    )
                )
    return rows, jobs


def _filter_facts(filtered: Path) -> dict:
    """What the filter tool wrote of its choice into the filtered data (its filter_* attributes)."""
    import h5py

    with h5py.File(filtered, "r") as f:
        return {
            k[len("filter_") :]: (v.item() if hasattr(v, "item") else v)
            for k, v in f.attrs.items()
            if k.startswith("filter_")
        }


def _earlier_full_row(c: Cell, modelled, per_epoch: int) -> dict:
    """A filter row for full data taken from the default study's cell (its time on this clock,
    by cells.time_to_target as every cell's; `per_epoch` passes an epoch at its N)."""
    epoch_s = modelled(c.mode, c.n)
    return {
        "mode": c.mode,
        "n": c.n,
        "seed": c.seed,
        "data": "full",
        "status": c.status,
        "epochs": c.epochs,
        "epochs_to_target": c.epochs_to_target,
        "epoch_seconds": epoch_s,
        "run": f"(default study) {c.run}",
        "time_to_target_s": time_to_target(c, epoch_s, per_epoch),
        "final_val_loss": c.final_val_loss,
        "passes_to_target": c.passes_to_target,
    }


def batch_sweep(
    runner: "StudyRunner", study: Study, cfg, eta: float, target: float, max_epochs: int, n_val: int, timing: dict
) -> list:
    """The sequential model (one worker) at each global batch b of `batch_sweep`, at eta (weak
    scaling's lr) and at the linear rule's eta * b / B; epochs (passes) and modelled time to
    the target, at every sequential seed (a batch is compared with another only on 3 seeds a
    side or more). b = B at eta is the seed's sequential run itself. Every run ends only at the
    target, a non-finite loss or the cap (preset.SWEEP_STOPPING)."""
    points = []
    for seed in study.sequential_seeds():
        for b in study.batch_sweep:
            for rule, lr in (("eta", eta), (policies.LINEAR, eta * b / cfg.batch_size)):
                points.append(
                    (b, rule, lr, seed, f"seq-s{seed}" if b == cfg.batch_size else f"batch-b{b}-{rule}-s{seed}")
                )

    def outcome(b: int, lr: float, seed: int, nm: str) -> dict:
        if b == cfg.batch_size:  # both rules give eta: the sequential run

            def judge(losses):
                return curves.derive_strong(losses, 1, rules.StoppingRules(target, max_epochs, **SWEEP_STOPPING))

            vals = val_losses(runner.root / nm)
            if judge(vals) is None:  # ended where the cells' rules decided every N: grown to the cap
                vals = sequential_path(runner, seed, eta, max_epochs)
            status, epochs = judge(vals) or (RunStatus.CAPPED, len(vals))
            return {"status": status, "epochs": epochs, "final_val_loss": vals[epochs - 1]}
        return runner.run(
            nm,
            policies.SEQUENTIAL,
            1,
            {
                "base_lr": lr,
                "target_loss": target,
                "max_epochs": max_epochs,
                "seed": seed,
                "batch_size": b,
                **SWEEP_STOPPING,
            },
        )

    results = runner.run_all(
        [functools.partial(outcome, b, lr, seed, nm) for b, _, lr, seed, nm in points], label="batch sweep"
    )
    return [
        {
            "batch": b,
            "lr_rule": rule,
            "lr": lr,
            "seed": seed,
            **timed(runner.root / nm, policies.SEQUENTIAL, 1, n_val, timing, r, target, 1),
        }
        for (b, rule, lr, seed, nm), r in zip(points, results)
    ]


def beyond_parts(end) -> tuple:
    """(the record's own keys, the runs besides the cells'): the default study's cells beside ours,
    the filter and the batch sweep, what a beyond study asks besides its cells (rerender.BEYOND;
    `end`: rerender.StudyEnd)."""
    s, proto, cells, timing, modelled = end.s, end.proto, end.cells, end.timing, end.modelled
    eta, target, max_epochs, cfg = proto.eta, proto.target, proto.max_epochs, proto.cfg
    earlier = _default_study_cells(
        Path(end.options.compare_with), eta, target, modelled, modelled(policies.SEQUENTIAL, 1), s.study.workers
    )
    filtering = filter_experiment(s.runner, s.study, proto.common(), earlier[0], cells, s.n_val, timing, modelled)
    if filtering:  # the filter tool's own figures, copied once: they are not rendered from the record
        for fig in filtering["figures"]:
            if Path(fig).exists():
                shutil.copy(fig, s.out / f"filter.{Path(fig).name.split('.', 2)[-1]}")
    sweep_rows = batch_sweep(s.runner, s.study, cfg, eta, target, max_epochs, s.n_val, timing)
    # the filter's and the sweep's own runs (not the default study's, whose rows name it)
    others = {
        row["run"]
        for row in (sweep_rows or []) + (filtering["rows"] if filtering else [])
        if (s.root / row["run"]).is_dir()
    }
    return beyond_keys(s.root, cells, earlier, filtering, sweep_rows), others


def _default_study_cells(reports: Path, eta: float, target: float, modelled, seq_epoch: float, workers) -> tuple:
    """(cells, note): the default study's weak, linear and warmup cells (its study.json), their
    times modelled again with this study's timing so that every row uses the same clock; none,
    and why, when that study ran another eta or target."""
    study_path = reports / "study.json"
    shown = _relative_to_cwd(study_path)
    if not study_path.is_file():
        return [], f"no {shown}: run `make repro` (the default preset) for the paper's four modes"
    record = read_json(study_path, "default study's record")
    their_eta, their_target = record.get("eta"), record.get("target")
    if (
        "cells" not in record
        or not math.isclose(their_eta, eta, rel_tol=1e-9)
        or not math.isclose(their_target, target, rel_tol=1e-5)
    ):
        env = record.get("environment", {})
        return [], (
            f"{_relative_to_cwd(reports)} holds a study with eta {their_eta}, target {their_target}; this one has "
            f"eta {eta:.6g}, target {target:.6g}: the paper's other modes are left out"
            + (
                f" (that study ran on {env.get('cpu')}, oneDNN {env.get('onednn_isa')}, rendering "
                f"{env.get('rendering', 'TensorFlow ops')}: another instruction set or rendering rounds "
                f"differently, so run both studies on one machine)"
                if env
                else ""
            )
        )
    cells, definition = [], curves.epoch_definition(record["settings"])
    for c in record["cells"]:
        if c["mode"] not in policies.large_batch() or c["n"] not in workers:
            continue
        epoch_s = seq_epoch if c["n"] == 1 else modelled(c["mode"], c["n"])
        cell = Cell.of(c, epoch_seconds=epoch_s, time_source="modelled")
        t = time_to_target(cell, epoch_s, curves.passes_per_epoch(c["n"], definition))  # passes, as every cell
        cells.append(dataclasses.replace(cell, time_to_target_s=t))
    return cells, (
        f"weak, linear and warmup: the default study's runs ({shown}, same eta and target), "
        f"their times modelled again with this study's timing"
    )


def default_study_eta(reports: Path) -> float:
    """The eta the default study found (its study.json), for a study that compares with it."""
    path = reports / "study.json"
    if not path.is_file():
        raise StudyError(
            f"base_lr: default_study needs the default study's {_relative_to_cwd(path)}: run `make repro` "
            f"first, or pass --compare-with FOLDER"
        )
    eta = read_json(path, "default study's record").get("eta")
    if not isinstance(eta, (int, float)) or not 0 < eta < math.inf:
        raise StudyError(f"{_relative_to_cwd(path)} holds no eta; run `make repro` again")
    print(f"eta: {eta:.6g}, the default study's ({_relative_to_cwd(path)})")
    return float(eta)


def _relative_to_cwd(path: Path) -> Path:
    """`path` relative to the working directory when inside it (`make repro` runs in the
    checkout), so a report reads the same on any clone."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path
