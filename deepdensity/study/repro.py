"""`make repro`: the paper's scaling study (sections VI-VII), run and set next to the paper.

    python -m deepdensity.repro --preset default            # emulated workers + speedup model
    python -m deepdensity.repro --preset paper --runner 'horovodrun -np {n} -H host1:4,host2:4'
    python -m deepdensity.repro --preset default --lr-sweep  # only the edge of stability

How a cell (mode, N) is obtained without N devices:
  convergence  N Horovod workers average their gradients, so their path is that of one
               process with the same global batch, lr schedule and data order:
               `train.py --emulate-workers N` (tests check it against real horovodrun).
               Strong scaling's global batch and lr do not depend on N, so its path is the
               sequential one (a test checks horovodrun -np 2 against one process): its
               epochs are read off the sequential run's per-pass validation losses at its
               own epoch ends (with per_worker epochs, epoch e ends at pass N*(e+1)).
  base lr      by default the sequential model's edge of stability on this data, the
               largest lr on a sqrt(2) grid that converges on every seed, below the
               collapse level (paper section VI; README, "The learning-rate premise").
  time         seconds per epoch measured for N = 1 (one process here), else the paper's
               speedup model with parts measured here: per-step and per-sample compute,
               evaluation, and Gloo allreduce of this model's gradients at N = 2, 4.
With --runner every cell is a real multi-worker run and its measured time to target is used.
Finished runs are kept under runs/study-PRESET and skipped when the study is run again.
"""
from __future__ import annotations

import functools
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from deepdensity.scaling import rules
from deepdensity.config import load
from deepdensity.study.record import BeyondRecord, StudyRecord
from deepdensity.study.report import write_reports
from deepdensity.training.runs import read_json, read_metrics
from deepdensity.study.preset import Study, StudyError, load_study
from deepdensity.study.tables import Cell, evaluate_claims, protocol_rows
from deepdensity.utils.args import parser
from deepdensity.utils.errors import command
from deepdensity.utils.files import write_atomic

# The stall rule's patience when the preset leaves it off; also the divergence criterion's.
DEFAULT_PATIENCE = 3


# ------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------
def _fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


class StudyRunner:
    """Runs (or skips, when finished) the study's training runs, one subprocess each."""

    def __init__(self, root: Path, train_yaml: Path, runner: Optional[str], say=print):
        self.root, self.train_yaml, self.runner = root, train_yaml, runner
        self.done, self.say = 0, say
        self.t0 = time.perf_counter()
        self.trained, self.reused = set(), set()     # run names, this invocation

    def summary(self, wall_s: float) -> str:
        """What this invocation did, for the reports: its time and the runs it trained or reused."""
        return (f"this invocation took {wall_s / 60:.1f} min, trained {len(self.trained)} run(s) and reused "
                f"{len(self.reused - self.trained)} finished earlier")

    def run(self, name: str, mode: str, n: int, settings: dict) -> dict:
        """Run `name` with `settings`; a finished run is reused, and one that stopped at its
        epoch cap is resumed when asked for more epochs (the sequential runs grow this way)."""
        out = self.root / name
        self.done += 1
        result_path = out / "result.json"
        if result_path.exists():
            r = read_json(result_path, "finished run's result")
            if r["status"] != "max_epochs" or r["epochs"] >= int(settings.get("max_epochs", 0)):
                self.say(f"[{self.done}] {name}: finished earlier, skipped")
                self.reused.add(name)
                return r
        self.trained.add(name)
        elapsed = time.perf_counter() - self.t0
        self.say(f"[{self.done}] {name}: {mode} N={n} "
                 f"({'real' if self.runner else 'emulated' if n > 1 else 'one process'}, "
                 f"up to {settings.get('max_epochs', '?')} epochs); {_fmt_s(elapsed)} so far")
        cmd = [sys.executable, "-m", "deepdensity", "train", "--mode", mode, "--config", str(self.train_yaml),
               "--out", str(out), "--quiet"]
        if (out / "state.json").exists():
            cmd.append("--resume")      # a run killed mid-way, or extended, continues from its checkpoint
        for k, v in settings.items():
            cmd += ["--set", f"{k}={v}"]
        if self.runner:
            cmd = shlex.split(self.runner.format(n=n)) + cmd
        elif n > 1:
            cmd += ["--emulate-workers", str(n)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise StudyError(f"run {name} failed (exit {proc.returncode}):\n{tail}")
        return read_json(result_path, "run's result")


def epoch_durations(run_dir: Path) -> list:
    secs = [r["seconds"] for r in read_metrics(run_dir)]
    return [b - a for a, b in zip(secs, secs[1:])]


def measure_timing(cfg, n_weights: int, say=print) -> dict:
    """The speedup model's parts, measured on this machine (see module docstring)."""
    import numpy as np

    from deepdensity.perf.bench import allreduce_seconds, median_seconds, step_seconds
    from deepdensity.model.autoencoder import build_model
    batches = [1, 2, 4, 8, 16, 32]
    say("timing: training steps at per-worker batch " + ", ".join(map(str, batches)))
    steps = {b: step_seconds(cfg, b, repeats=7) for b in batches}
    step_fixed, per_sample = rules.fit_line(batches, [steps[b] for b in batches])
    model = build_model(cfg, 16, 3)
    x = np.random.default_rng(0).uniform(size=(64, 16, 16, 16, 1)).astype("f4") / 64
    eval_per_sample = median_seconds(lambda: model(x, training=False).numpy(), 7) / 64
    allreduce = {1: 0.0}
    for n in (2, 4):
        say(f"timing: Gloo allreduce of {n_weights:,} gradients on {n} processes")
        try:
            allreduce[n] = allreduce_seconds(n, n_weights, cfg.horovod_cycle_ms)
        except RuntimeError as e:
            raise StudyError(str(e)) from None
    ns = sorted(allreduce)
    _, per_doubling = rules.fit_line([math.log2(n) for n in ns], [allreduce[n] for n in ns])
    return {"step_seconds": {str(b): s for b, s in steps.items()}, "step_fixed_s": step_fixed,
            "per_sample_s": per_sample, "eval_per_sample_s": eval_per_sample,
            "allreduce_seconds": {str(n): s for n, s in allreduce.items()},
            "allreduce_per_doubling_s": per_doubling, "n_weights": n_weights}


@command(os_hint="pass other --runs / --reports folders")
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.repro")
    ap.add_argument("--preset", default="default", help="deepdensity/study/presets/NAME.yaml, or a path")
    ap.add_argument("--runner", default="", help="launcher with {n}, e.g. 'horovodrun -np {n} -H ...'; none: one process emulates N workers")
    ap.add_argument("--lr-sweep", action="store_true",
                    help="only find the sequential model's edge of stability (reports/lr_sweep.json)")
    ap.add_argument("--runs", help="runs folder (default: runs/study-PRESET under the working directory)")
    ap.add_argument("--compare-with", default="reports",
                    help="for adaptive/local: the default study's reports, whose weak, linear and warmup "
                         "rows the report shows beside them (default reports/)")
    ap.add_argument("--reports", help="where the reports go (default reports/ for the default preset, "
                                      "reports/PRESET/ for the others)")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress lines must show up while runs go on
    name, study = load_study(args.preset)
    args.reports = args.reports or str(Path("reports") / ("" if name == "default" else name))
    _check_runner(args.runner)
    return run_study(name, study, args)


def _check_runner(runner: Optional[str]) -> None:
    """A --runner template must name the worker count as {n} and nothing else in braces."""
    if not runner:
        return
    try:
        filled = runner.format(n=2)
        shlex.split(filled)
    except (KeyError, IndexError, ValueError) as e:
        raise StudyError(f"--runner {runner!r} is not a template with {{n}} for the worker count ({e!r}), "
                         f"e.g. 'horovodrun -np {{n}}'") from None
    if filled == runner:
        raise StudyError(f"--runner {runner!r} does not use {{n}}: every cell would run on the same workers; "
                         f"e.g. 'horovodrun -np {{n}}'")


def _val_losses(run_dir: Path) -> list:
    """Validation losses per epoch, a non-finite one as inf (JSON keeps it as null)."""
    return [math.inf if m["val_loss"] is None else m["val_loss"] for m in read_metrics(run_dir)]


def find_edge(runner: "StudyRunner", base_lr: float, epochs: int, patience: int, seeds,
              collapse_loss: Optional[float], say=print) -> tuple:
    """The sequential model's edge of stability: the largest lr on the grid
    base_lr * sqrt(2)^k that converges over `epochs` epochs (rules.diverges, with the
    collapse level) for every seed (rules.edge_probe). Returns (edge lr, one row per probe)."""
    outcomes, rows = {}, []
    while (probe := rules.edge_probe(outcomes, len(seeds))) is not None:
        k, i = probe
        lr, name = base_lr * rules.EDGE_STEP ** k, f"edge-k{k:+d}-s{seeds[i]}"
        runner.run(name, "strong", 1, {"base_lr": repr(lr), "max_epochs": epochs, "target_loss": 0.0,
                                       "seed": seeds[i], "stall_patience": patience})
        vals = _val_losses(runner.root / name)
        outcomes[probe] = rules.diverges(vals, patience, collapse_loss)
        rows.append({"k": k, "seed": seeds[i], "lr": lr, "run": name, "diverges": outcomes[probe],
                     "epochs": len(vals), "val_losses": [v if math.isfinite(v) else None for v in vals]})
        say(f"edge search: lr {lr:.6g} (k = {k:+d}), seed {seeds[i]}: "
            f"{'diverges' if outcomes[probe] else 'converges'}")
    k = rules.edge_index(outcomes, len(seeds))
    return base_lr * rules.EDGE_STEP ** k, sorted(rows, key=lambda r: (r["k"], r["seed"]))


def sequential_path(runner: "StudyRunner", seed: int, lr: float, passes: int) -> list:
    """The sequential run of one seed, `passes` passes long (target 0, no stopping rule):
    the reference path every strong-scaling N follows. A shorter finished run is extended."""
    name = f"seq-s{seed}"
    runner.run(name, "strong", 1, {"base_lr": repr(lr), "max_epochs": passes, "target_loss": 0.0,
                                   "seed": seed, "stall_patience": 0})
    return _val_losses(runner.root / name)


def strong_from_sequential(runner: "StudyRunner", seed: int, lr: float, first_passes: int, workers,
                           target: float, cap: int, patience: int) -> tuple:
    """({N: (status, epochs)}, the sequential run's per-pass validation losses): strong scaling
    read off the sequential run (rules.derive_strong), extended until every N is decided."""
    passes = first_passes
    while True:
        vals = sequential_path(runner, seed, lr, passes)
        decided = {n: rules.derive_strong(vals, n, target, cap, patience) for n in workers}
        undecided = [n for n, d in decided.items() if d is None]
        if not undecided:
            return decided, vals
        if len(vals) < passes:     # the sequential run itself stopped (non-finite loss)
            return {n: d or ("diverged", -(-len(vals) // n)) for n, d in decided.items()}, vals
        passes += max(undecided)


@dataclass
class _StudyRun:
    """One invocation of a study: its preset, where it writes, and the facts of its data."""
    name: str
    study: Study
    root: Path                       # the runs folder
    out: Path                        # the reports folder
    train_yaml: Path                 # the settings every run of the study starts from
    runner: "StudyRunner"
    n_train: int
    n_val: int
    collapse_loss: float
    t_start: float

    def invocation(self) -> str:
        return self.runner.summary(time.perf_counter() - self.t_start)

    def elapsed(self) -> str:
        return _fmt_s(time.perf_counter() - self.t_start)


def run_study(name: str, study: Study, args) -> int:
    """The study of a preset, from the edge of stability to the reports."""
    s = _start_study(name, study, args)
    cfg = load(str(s.train_yaml))
    # 0. The base lr: the sequential model's edge of stability (paper section VI), or fixed.
    if study.base_lr == "edge" or args.lr_sweep:
        eta, sweep = _edge_of_stability(s.runner, study, cfg, s.collapse_loss, s.out)
        if args.lr_sweep:
            return 0
    else:
        eta, sweep = float(study.base_lr), None
    cfg = load(str(s.train_yaml), [f"base_lr={eta!r}"])

    # 1. The sequential run of the first seed calibrates the target (paper: ~100 epochs).
    #    It runs E + max(N) passes, so that every strong-scaling N has an epoch end past E.
    E, seed0 = study.calibration_epochs, study.seeds[0]
    seq_passes = E + max(study.workers)
    if study.target_loss is None:
        target, cap = rules.calibrate_target(sequential_path(s.runner, seed0, eta, seq_passes), E)
        print(f"target: val_loss {target:.6g}, the sequential run's after {E} epochs; cap {cap} epochs")
    else:
        target, cap = study.target_loss, 4 * E
    common = {"base_lr": repr(eta), "target_loss": repr(target), "max_epochs": cap}

    # 2. Every cell's convergence.
    results = _convergence(s.runner, study, cfg, eta, seq_passes, target, cap, common, real_strong=bool(args.runner))

    # 3. Time per epoch: measured for N = 1 (or every N with --runner), modelled beyond.
    timing = _timing(s.root, cfg)
    # the sequential run's epochs (passes) after its first, which holds tracing and warm-up
    seq_epoch = statistics.median(epoch_durations(s.root / f"seq-s{seed0}") or [float("nan")])
    modelled = functools.partial(_modelled_epoch, cfg, s.n_train, s.n_val, timing)
    cells = _study_cells(study, results, s.root, args.runner, timing, seq_epoch, s.n_val, modelled)

    # the facts another study needs to know whether its rows compare with these
    write_atomic(s.out / "study.json", json.dumps({"preset": name, "eta": eta, "target": target, "cap": cap,
                                                   "collapse_loss": s.collapse_loss}, indent=2))
    if any(m in rules.BEYOND_MODES for m in study.modes):
        _beyond_reports(s, cfg, cells, eta, target, cap, common, timing, modelled, seq_epoch, args.compare_with)
    else:
        _paper_reports(s, cfg, cells, eta, target, cap, common, timing, modelled, seq_epoch, sweep, args.runner)
    return 0


def _start_study(name: str, study: Study, args) -> _StudyRun:
    """The runs folder with the study's data and settings, the reports folder, the runner."""
    root = Path(args.runs or Path("runs") / f"study-{name}")
    root.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    data_path = _study_data(root, name, study.data)
    train_yaml = root / "train.yaml"
    # deterministic kernels: a rerun of the study gives the same epochs to target
    train_yaml.write_text(yaml.safe_dump({**study.train, "data_path": str(data_path),
                                          "deterministic": True}))
    out = Path(args.reports)
    out.mkdir(parents=True, exist_ok=True)
    n_train, n_val, collapse_loss = _data_facts(load(str(train_yaml)))
    print(f"collapse level: val_loss {collapse_loss:.6g} (the training set's mean cube for every input)")
    return _StudyRun(name, study, root, out, train_yaml, StudyRunner(root, train_yaml, args.runner or None),
                     n_train, n_val, collapse_loss, t_start)


def _modelled_epoch(cfg, n_train: int, n_val: int, timing: dict, mode: str, n: int) -> float:
    """Seconds per epoch of (mode, N) by the timing model built from this host's parts."""
    return rules.epoch_seconds_model(mode, n, n_train, n_val, cfg.batch_size, timing["step_fixed_s"],
                                     timing["per_sample_s"], timing["allreduce_per_doubling_s"],
                                     timing["eval_per_sample_s"], cfg.epoch_definition)


def _paper_reports(s: _StudyRun, cfg, cells: list, eta: float, target: float, cap: int, common: dict,
                   timing: dict, modelled, seq_epoch: float, sweep: Optional[dict], runner: str) -> None:
    """The paper's claims from the cells (after the sequential run at 2 x eta), and the reports."""
    seed0 = s.study.seeds[0]
    r2 = s.runner.run(f"seq-2eta-s{seed0}", "strong", 1, {**common, "seed": seed0, "base_lr": repr(2 * eta)})
    claims = evaluate_claims(cells, s.study.workers, r2["status"] == "reached_target", eta_at_edge=sweep is not None)
    steps1 = rules.steps_per_epoch(s.n_train, rules.plan("strong", 1, cfg.batch_size), cfg.epoch_definition)
    strong_model = rules.SpeedupModel(
        steps1 * timing["step_fixed_s"], steps1 * cfg.batch_size * timing["per_sample_s"]
        + s.n_val * timing["eval_per_sample_s"], steps1 * timing["allreduce_per_doubling_s"])
    write_reports(s.out, StudyRecord(
        name=s.name, study=s.study, cfg=cfg, cells=cells, claims=claims,
        protocol=protocol_rows(s.study, cfg, s.n_train, s.n_val, target, cap, eta, sweep, runner),
        target=target, cap=cap, collapse_loss=s.collapse_loss, timing=timing, seq_epoch_s=seq_epoch,
        modelled_seq_epoch_s=modelled("strong", 1), strong_model=strong_model, seq_2eta=r2, sweep=sweep,
        n_train=s.n_train, n_val=s.n_val, runner=runner, invocation=s.invocation(), runs_root=s.root,
        seq_run=s.root / f"seq-s{seed0}"))
    print(f"reports written to {s.out} ({s.elapsed()} this invocation)")
    for c in claims:
        print(f"  {c['verdict']:>15}: {c['claim']} (ours: {c['ours']})")


def _beyond_reports(s: _StudyRun, cfg, cells: list, eta: float, target: float, cap: int, common: dict,
                    timing: dict, modelled, seq_epoch: float, compare_with: str) -> None:
    """The default study's cells beside ours, the filter and the batch sweep, and the reports."""
    from deepdensity.study.report_beyond import write_beyond_reports
    earlier = _default_study_cells(Path(compare_with), eta, target, modelled, seq_epoch, s.study.workers)
    filtering = filter_experiment(s.runner, s.study, common, earlier[0], cells, s.n_val, timing, modelled)
    sweep_rows = batch_sweep(s.runner, s.study, cfg, eta, target, cap, s.n_val, timing, patience=cfg.stall_patience)
    write_beyond_reports(s.out, BeyondRecord(
        name=s.name, study=s.study, cfg=cfg, cells=cells, earlier=earlier, target=target, cap=cap, eta=eta,
        timing=timing, runs_root=s.root, n_train=s.n_train, n_val=s.n_val, invocation=s.invocation(),
        filtering=filtering, sweep=sweep_rows))
    print(f"reports written to {s.out} ({s.elapsed()} this invocation)")


def _edge_of_stability(runner: "StudyRunner", study: Study, cfg, collapse_loss: float, out: Path) -> tuple:
    """(eta, the search's record): find_edge over the study's seeds, written to lr_sweep.json."""
    E, patience = study.calibration_epochs, cfg.stall_patience or DEFAULT_PATIENCE
    eta, probes = find_edge(runner, cfg.base_lr, E, patience, study.seeds, collapse_loss)
    sweep = {"epochs": E, "patience": patience, "grid_base_lr": cfg.base_lr, "edge_lr": eta,
             "seeds": study.seeds, "collapse_loss": collapse_loss, "probes": probes}
    write_atomic(out / "lr_sweep.json", json.dumps(sweep, indent=2))
    print(f"edge of stability: lr {eta:.6g} ({eta / cfg.base_lr:.3g} x {cfg.base_lr:g}); "
          f"{eta * rules.EDGE_STEP:.6g} diverges")
    return eta, sweep


def _convergence(runner: "StudyRunner", study: Study, cfg, eta: float, seq_passes: int, target: float, cap: int,
                 common: dict, real_strong: bool) -> dict:
    """{(mode, n, seed): (result, run name)} for every cell of the study. Strong scaling follows
    the sequential path (the tests show it under horovodrun), so unless its runs are real
    (`real_strong`) it is read off each seed's sequential run."""
    results = {}
    for seed in study.seeds:
        derived, seq_vals = strong_from_sequential(runner, seed, eta, seq_passes,
                                                   [n for n in study.workers if n == 1 or not real_strong],
                                                   target, cap, cfg.stall_patience)
        for n, (status, epochs) in derived.items():
            last = rules.sample_epoch_losses(seq_vals, n)[epochs - 1]
            results[("strong", n, seed)] = ({"status": status, "epochs": epochs, "time_to_target_s": None,
                                             "final_val_loss": last if math.isfinite(last) else None},
                                            f"seq-s{seed}")
        for mode in study.modes:
            for n in study.mode_workers.get(mode, study.workers):
                if n > 1 and (mode != "strong" or real_strong):
                    nm = f"{mode}-n{n}-s{seed}"
                    results[(mode, n, seed)] = (runner.run(nm, mode, n, {**common, "seed": seed}), nm)
    return results


def _study_cells(study: Study, results: dict, root: Path, real_runner: Optional[str], timing: dict,
                 seq_epoch: float, n_val: int, modelled) -> list:
    """One Cell per mode, N and seed, with its time to target: measured for N = 1 (and every
    N run for real with a runner), modelled from the timing probe otherwise."""
    cells = []
    for mode in study.modes:
        for n in study.mode_workers.get(mode, study.workers):
            for seed in study.seeds:
                r, run_name = results[("strong", 1, seed) if n == 1 else
                                      ("strong", n, seed) if mode == "strong" else (mode, n, seed)]
                epochs_to_target = r["epochs"] if r["status"] == "reached_target" else None
                if real_runner and n > 1:      # a real run on n workers: its own clock
                    epoch_s = statistics.median(epoch_durations(root / run_name) or [math.nan])
                    source, t = "measured", r["time_to_target_s"]
                elif mode in rules.BEYOND_MODES and n > 1:   # batch or allreduces vary: epoch by epoch
                    epoch_s, t = _modelled_from_rows(root / run_name, mode, n, n_val, timing, epochs_to_target)
                    source = "modelled"
                else:                          # one process here: N = 1 measured, N > 1 modelled
                    epoch_s, source = (seq_epoch, "measured") if n == 1 else (modelled(mode, n), "modelled")
                    t = epochs_to_target * epoch_s if epochs_to_target else None
                cells.append(Cell(mode, n, seed, r["status"], r["epochs"], epochs_to_target, epoch_s,
                                  source, t, run_name, r.get("final_val_loss")))
    return cells


def _modelled_from_rows(run_dir: Path, mode: str, n: int, n_val: int, timing: dict,
                        epochs_to_target: Optional[int]) -> tuple:
    """(median seconds per epoch, time to target or None) of an adaptive or local run on n
    devices, from each epoch's own steps, batch and allreduces (rules.epoch_seconds)."""
    size = rules.LOCAL_ALLREDUCE_SIZE if mode == "local" else 1.0
    per_epoch = [rules.epoch_seconds(r["steps"], r["global_batch"] // n, r["allreduces"], n, n_val,
                                     timing["step_fixed_s"], timing["per_sample_s"],
                                     timing["allreduce_per_doubling_s"], timing["eval_per_sample_s"], size)
                 for r in read_metrics(run_dir)]
    t = sum(per_epoch[:epochs_to_target]) if epochs_to_target else None
    return statistics.median(per_epoch or [math.nan]), t


def _timed(run_dir: Path, mode: str, n: int, n_val: int, timing: dict, result: dict) -> dict:
    """A run's outcome with its modelled time to target (epoch by epoch, from its rows)."""
    reached = result["status"] == "reached_target"
    epoch_s, t = _modelled_from_rows(run_dir, mode, n, n_val, timing, result["epochs"] if reached else None)
    return {"status": result["status"], "epochs": result["epochs"], "epochs_to_target": result["epochs"] if reached
            else None, "epoch_seconds": epoch_s, "time_to_target_s": t, "run": run_dir.name,
            "final_val_loss": result.get("final_val_loss")}


def filter_experiment(runner: "StudyRunner", study: Study, common: dict, earlier_cells: list, own_cells: list,
                      n_val: int, timing: dict, modelled, say=print) -> Optional[dict]:
    """Gahlot et al.'s experiment: each of `filter_modes` at the N where it is slowest or
    fails (tables.filter_n, on the default study's cells) trained on the full data, on the
    data filtered by the first seed's sequential run (python -m deepdensity.filter) and on
    the random control; same validation set, target and seeds. The full-data runs are the
    default study's when it has them (their times modelled again here), else run here."""
    from deepdensity.study.tables import filter_n
    if not study.filter_modes:
        return None
    root, seeds = runner.root, study.seeds
    data, filtered = root / "data.h5", root / "data.filtered.h5"
    random_ctl = filtered.with_suffix(".random.h5")
    if not (filtered.exists() and random_ctl.exists()):
        say(f"filter: features of {root / f'seq-s{seeds[0]}'} -> {filtered}")
        proc = subprocess.run([sys.executable, "-m", "deepdensity.tools.filter", "--run", str(root / f"seq-s{seeds[0]}"),
                               "--data", str(data), "--out", str(filtered), "--seed", str(seeds[0])],
                              capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        if proc.returncode != 0:
            raise StudyError(f"the data filter failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        say(proc.stdout.strip())
    rows = []
    for mode in study.filter_modes:
        source = earlier_cells if any(c.mode == mode for c in earlier_cells) else own_cells
        n = filter_n(source, mode)
        if n is None:
            raise StudyError(f"filter_modes: {mode} ran at no N > 1, neither here nor in --compare-with's cells")
        for seed in seeds:
            full = [c for c in source if (c.mode, c.n, c.seed) == (mode, n, seed)]
            if full:
                c = full[0]
                rows.append({"mode": mode, "n": n, "seed": seed, "data": "full", "status": c.status,
                             "epochs": c.epochs, "epochs_to_target": c.epochs_to_target,
                             "epoch_seconds": modelled(mode, n), "run": f"(default study) {c.run}",
                             "time_to_target_s": c.epochs_to_target * modelled(mode, n) if c.epochs_to_target else None,
                             "final_val_loss": c.final_val_loss})
            else:
                nm = f"{mode}-n{n}-s{seed}"
                r = runner.run(nm, mode, n, {**common, "seed": seed})
                rows.append({"mode": mode, "n": n, "seed": seed, "data": "full",
                             **_timed(root / nm, mode, n, n_val, timing, r)})
            for variant, path in (("network", filtered), ("random", random_ctl)):
                nm = f"{mode}-n{n}-{variant}-s{seed}"
                r = runner.run(nm, mode, n, {**common, "seed": seed, "data_path": str(path)})
                rows.append({"mode": mode, "n": n, "seed": seed, "data": variant,
                             **_timed(root / nm, mode, n, n_val, timing, r)})
    import h5py
    with h5py.File(filtered, "r") as f:
        facts = {k[len("filter_"):]: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()
                 if k.startswith("filter_")}
    return {"rows": rows, "filter": facts, "figures": [filtered.with_suffix(".embedding.png"),
                                                       filtered.with_suffix(".dropped.png")]}


def batch_sweep(runner: "StudyRunner", study: Study, cfg, eta: float, target: float, cap: int, n_val: int,
                timing: dict, patience: int) -> list:
    """The sequential model (one worker) at each global batch b of `batch_sweep`, at eta (weak
    scaling's lr) and at the linear rule's eta * b / B; epochs (passes) and modelled time to
    the target. b = B at eta is the first seed's sequential run itself."""
    rows, seed = [], study.seeds[0]
    for b in study.batch_sweep:
        for rule, lr in (("eta", eta), ("linear", eta * b / cfg.batch_size)):
            if b == cfg.batch_size:                        # both rules give eta: the sequential run
                nm = f"seq-s{seed}"
                vals = _val_losses(runner.root / nm)
                status, epochs = rules.derive_strong(vals, 1, target, cap, patience) or ("max_epochs", len(vals))
                r = {"status": status, "epochs": epochs, "final_val_loss": vals[epochs - 1]}
            else:
                nm = f"batch-b{b}-{rule}-s{seed}"
                r = runner.run(nm, "strong", 1, {"base_lr": repr(lr), "target_loss": repr(target), "max_epochs": cap,
                                                 "seed": seed, "batch_size": b})
            timed = _timed(runner.root / nm, "strong", 1, n_val, timing, r)
            rows.append({"batch": b, "lr_rule": rule, "lr": lr, **timed})
    return rows


def _default_study_cells(reports: Path, eta: float, target: float, modelled, seq_epoch: float, workers) -> tuple:
    """(cells, note): the default study's weak, linear and warmup cells (reports/cells.json),
    their times modelled again with this study's timing so that every row uses the same
    clock; none, and why, when that study ran another eta or target."""
    cells_path, sweep_path, study_path = reports / "cells.json", reports / "lr_sweep.json", reports / "study.json"
    shown = _relative_to_cwd(cells_path)
    if not cells_path.is_file():
        return [], f"no {shown}: run `make repro` (the default preset) for the paper's four modes"
    if study_path.is_file():
        facts = read_json(study_path, "default study's eta and target")
        their_eta, their_target = facts["eta"], facts["target"]
    else:   # reports written before study.json existed: the edge and the protocol table's target
        their_eta = read_json(sweep_path, "default study's lr search")["edge_lr"] if sweep_path.is_file() else None
        row = next((r for r in json.loads(protocol.read_text()) if r[0] == "target")
                   if (protocol := reports / "protocol.json").is_file() else None, None)
        their_target = float(row[2].split()[2].rstrip(",")) if row else None
    if their_eta is None or their_target is None or not math.isclose(their_eta, eta, rel_tol=1e-9) \
            or not math.isclose(their_target, target, rel_tol=1e-5):
        return [], (f"{_relative_to_cwd(reports)} holds a study with eta {their_eta}, target {their_target}; this one has "
                    f"eta {eta:.6g}, target {target:.6g}: the paper's other modes are left out")
    cells = []
    for c in json.loads(cells_path.read_text()):
        if c["mode"] not in ("weak", "linear", "warmup") or c["n"] not in workers:
            continue
        epoch_s = seq_epoch if c["n"] == 1 else modelled(c["mode"], c["n"])
        t = c["epochs_to_target"] * epoch_s if c["epochs_to_target"] else None
        cells.append(Cell(c["mode"], c["n"], c["seed"], c["status"], c["epochs"], c["epochs_to_target"], epoch_s,
                          "measured" if c["n"] == 1 else "modelled", t, c["run"], c.get("final_val_loss")))
    return cells, (f"weak, linear and warmup: the default study's runs ({shown}, same eta and target), "
                   f"their times modelled again with this study's timing")


def _relative_to_cwd(path: Path) -> Path:
    """`path` relative to the working directory when inside it (`make repro` runs in the
    checkout), so a report reads the same on any clone."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _study_data(root: Path, name: str, d: dict) -> Path:
    """The study's synthetic data set, written once per runs folder."""
    from deepdensity.data.synth import write_synthetic
    data_path = root / "data.h5"
    if not data_path.exists():
        print(f"data: {d['n']} synthetic cubes ({d['val']} validation, seed {d['seed']}) -> {data_path}")
        write_synthetic(data_path, d["n"], d["val"], d["seed"], progress=sys.stderr.isatty(),
                        created_by=f"deepdensity.repro --preset {name}")
    return data_path


def _data_facts(cfg) -> tuple:
    """(n_train, n_val, collapse loss): the split sizes the runs train on, and the
    validation loss of rendering the training set's mean cube for every input."""
    from deepdensity.data.cubes import input_independent_loss, load_cubes, to_density
    cubes = load_cubes(cfg.data_path)
    train, val = cubes.train[: cfg.max_train_cubes or None], cubes.val
    if cfg.intensity_scaling == "density":
        train, val = to_density(train)[0], to_density(val)[0]
    return len(train), len(val), input_independent_loss(train, val)


def _timing(root: Path, cfg) -> dict:
    """The speedup model's parts, measured once per runs folder and cached."""
    timing_path = root / "timing.json"
    if timing_path.exists():
        return json.loads(timing_path.read_text())
    from deepdensity.model.autoencoder import build_model
    timing = measure_timing(cfg, build_model(cfg, 16, 3).count_params())
    write_atomic(timing_path, json.dumps(timing, indent=2))  # a cache reread by every rerun
    return timing


if __name__ == "__main__":
    sys.exit(main())
