"""`make repro`: the paper's scaling study (sections VI-VII), run and set next to the paper.

    python -m deepdensity.repro --preset default            # emulated workers + speedup model
    python -m deepdensity.repro --preset paper --runner 'horovodrun -np {n} -H host1:4,host2:4'
    python -m deepdensity.repro --preset default --lr-sweep  # where does the sequential lr diverge?

How a cell (mode, N) is obtained without N devices:
  convergence  N Horovod workers average their gradients, so their path is that of one
               process with the same global batch, lr schedule and data order:
               `train.py --emulate-workers N` (tests check it against real horovodrun).
               Strong scaling's global batch and lr do not depend on N, so its path is the
               sequential one (a test checks horovodrun -np 2 against one process); its
               epochs to target are the N = 1 run's.
  time         seconds per epoch measured for N = 1 (one process here), else the paper's
               speedup model with parts measured here: per-step and per-sample compute,
               evaluation, and Gloo allreduce of this model's gradients at N = 2, 4.
With --runner every cell is a real multi-worker run and its measured time to target is used.
Finished runs are kept under runs/study-PRESET and skipped when the study is run again.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from . import rules
from .runs import read_metrics, write_atomic

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the study log should show the study, not TF banners

ROOT = Path(__file__).resolve().parents[1]
PAPER_TABLE1 = {1: 100.00, 2: 105.17, 4: 86.81, 8: 90.09, 16: 58.08, 32: 46.25}
PAPER_TABLE2 = {
    "weak": {1: 100.00, 2: 96.96, 4: 63.86, 8: 42.32, 16: 19.65, 32: 9.45},
    "warmup": {1: 100.00, 2: 84.95, 4: 75.49, 8: math.nan, 16: math.nan, 32: math.nan},
    "linear": {1: 100.0, 2: math.nan, 4: math.nan, 8: math.nan, 16: math.nan, 32: math.nan},
}


class StudyError(ValueError):
    pass


@dataclass
class Study:
    data: dict = field(default_factory=lambda: {"n": 2100, "val": 256, "seed": 0})
    train: dict = field(default_factory=dict)
    calibration_epochs: int = 100
    target_loss: Optional[float] = None
    workers: list = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    modes: list = field(default_factory=lambda: list(rules.MODES))
    seeds: list = field(default_factory=lambda: [0])
    lr_sweep: list = field(default_factory=lambda: [0.5, 1, 2, 4, 8])


def load_study(preset: str) -> tuple:
    path = Path(preset) if preset.endswith(".yaml") else ROOT / "configs" / "study" / f"{preset}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in (ROOT / "configs" / "study").glob("*.yaml"))
        raise StudyError(f"no study preset {preset!r}; choose one of {', '.join(names)} or a .yaml path")
    raw = yaml.safe_load(path.read_text()) or {}
    known = set(Study.__dataclass_fields__)
    unknown = set(raw) - known
    if unknown:
        raise StudyError(f"{path}: unknown study keys {sorted(unknown)}; known: {sorted(known)}")
    study = Study(**raw)
    if 1 not in study.workers:
        raise StudyError(f"{path}: workers must include 1 (the sequential baseline)")
    bad = set(study.modes) - set(rules.MODES)
    if bad:
        raise StudyError(f"{path}: unknown modes {sorted(bad)}")
    return path.stem, study


# ------------------------------------------------------------------------------------
# Cells and claims: pure, tested on hand-made tables
# ------------------------------------------------------------------------------------
@dataclass
class Cell:
    mode: str
    n: int
    seed: int
    status: str                       # reached_target | max_epochs | diverged
    epochs: Optional[int]             # epochs run
    epochs_to_target: Optional[int]
    epoch_seconds: float              # one epoch at this (mode, N)
    time_source: str                  # measured | modelled
    time_to_target_s: Optional[float]
    run: str                          # folder of the run that gave the convergence

    @property
    def reached(self) -> bool:
        return self.status == "reached_target"


def median_time(cells: list, mode: str, n: int) -> Optional[float]:
    """Median time to target over seeds; None unless every seed reached the target."""
    times = [c.time_to_target_s for c in cells if c.mode == mode and c.n == n]
    if not times or any(t is None for t in times):
        return None
    return statistics.median(times)


def efficiency_table(cells: list, modes, workers) -> dict:
    """{mode: {n: efficiency %}}, T1 / (n Tn) on median times to target; NaN if not reached."""
    out = {}
    for mode in modes:
        t1 = median_time(cells, "strong", 1) or median_time(cells, mode, 1)
        out[mode] = {n: rules.efficiency(t1, n, median_time(cells, mode, n)) for n in workers}
    return out


def evaluate_claims(cells: list, workers, seq_2eta_reached: Optional[bool]) -> list:
    """The paper's claims (section VII) with its result, ours and a verdict."""
    def reached(mode, n):
        runs = [c for c in cells if c.mode == mode and c.n == n]
        return bool(runs) and all(c.reached for c in runs)

    def known(mode):
        return any(c.mode == mode for c in cells)

    big = [n for n in workers if n > 1]
    claims = []

    def add(claim, paper, ours, ok):
        verdict = "n/a" if ok is None else ("reproduced" if ok else "not reproduced")
        claims.append({"claim": claim, "paper": paper, "ours": ours, "verdict": verdict})

    def listing(mode, ns, want):
        return ", ".join(str(n) for n in ns if reached(mode, n) == want) or "none"

    if known("strong"):
        add("Strong scaling converges at every N", "reached the target at N = 1..32",
            f"reached at N = {listing('strong', workers, True)}", all(reached("strong", n) for n in workers))
    if known("linear"):
        add("The linear scaling rule fails at every N > 1", "diverged at N = 2..32",
            f"failed at N = {listing('linear', big, False)}", not any(reached("linear", n) for n in big))
    if known("warmup"):
        ok = all(reached("warmup", n) == (n <= 4) for n in workers)
        add("Warmup converges only up to N = 4", "reached at N = 1, 2, 4; failed at 8, 16, 32",
            f"reached at N = {listing('warmup', workers, True)}", ok)
    if known("weak"):
        eff = efficiency_table(cells, ["weak"], workers)["weak"]
        falling = [eff[n] for n in workers if not math.isnan(eff[n])]
        all_reached = all(reached("weak", n) for n in workers)
        ok = all_reached and all(b < a for a, b in zip(falling, falling[1:]))
        add("Weak scaling converges everywhere but its efficiency falls",
            "reached at every N; efficiency 100 -> 9.45 %",
            f"reached at N = {listing('weak', workers, True)}; efficiency "
            + ", ".join("NaN" if math.isnan(eff[n]) else f"{eff[n]:.1f}" for n in workers), ok)
    if known("strong"):
        faster = []
        for n in big:
            ts = median_time(cells, "strong", n)
            others = [median_time(cells, m, n) for m in ("weak", "linear", "warmup") if known(m)]
            faster.append(ts is not None and all(t is None or ts <= t for t in others))
        add("Strong scaling is the fastest at every N", "fastest at N = 2..32",
            f"fastest at N = {', '.join(str(n) for n, f in zip(big, faster) if f) or 'none'}", all(faster))
    if seq_2eta_reached is not None:
        add("2 x eta diverges for the sequential model", "further increasing the lr diverges",
            "2 x eta " + ("reached the target" if seq_2eta_reached else "did not reach the target"),
            not seq_2eta_reached)
    return claims


# ------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------
def _fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


class StudyRunner:
    """Runs (or skips, when finished) the study's training runs, one subprocess each."""

    def __init__(self, root: Path, train_yaml: Path, runner: Optional[str], total: int, say=print):
        self.root, self.train_yaml, self.runner = root, train_yaml, runner
        self.total, self.done, self.say = total, 0, say
        self.t0 = time.perf_counter()

    def run(self, name: str, mode: str, n: int, settings: dict) -> dict:
        out = self.root / name
        self.done += 1
        result_path = out / "result.json"
        if result_path.exists():
            self.say(f"[{self.done}/{self.total}] {name}: finished earlier, skipped")
            return json.loads(result_path.read_text())
        elapsed = time.perf_counter() - self.t0
        self.say(f"[{self.done}/{self.total}] {name}: {mode} N={n} "
                 f"({'real' if self.runner else 'emulated' if n > 1 else 'one process'}); "
                 f"{_fmt_s(elapsed)} so far")
        cmd = [sys.executable, str(ROOT / "train.py"), "--mode", mode, "--config", str(self.train_yaml),
               "--out", str(out), "--quiet"]
        if (out / "state.json").exists():
            cmd.append("--resume")      # a run killed mid-way continues from its checkpoint
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
        return json.loads(result_path.read_text())


def epoch_durations(run_dir: Path) -> list:
    secs = [r["seconds"] for r in read_metrics(run_dir)]
    return [b - a for a, b in zip(secs, secs[1:])]


def measure_timing(cfg, n_weights: int, say=print) -> dict:
    """The speedup model's parts, measured on this machine (see module docstring)."""
    import numpy as np

    from .bench import allreduce_seconds, median_seconds, step_seconds
    from .model import build_model
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
            allreduce[n] = allreduce_seconds(n, n_weights)
        except RuntimeError as e:
            raise StudyError(str(e)) from None
    ns = sorted(allreduce)
    _, per_doubling = rules.fit_line([math.log2(n) for n in ns], [allreduce[n] for n in ns])
    return {"step_seconds": {str(b): s for b, s in steps.items()}, "step_fixed_s": step_fixed,
            "per_sample_s": per_sample, "eval_per_sample_s": eval_per_sample,
            "allreduce_seconds": {str(n): s for n, s in allreduce.items()},
            "allreduce_per_doubling_s": per_doubling, "n_weights": n_weights}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m deepdensity.repro", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--preset", default="default", help="configs/study/NAME.yaml, or a path")
    ap.add_argument("--runner", default="", help="launcher with {n}, e.g. 'horovodrun -np {n} -H ...'")
    ap.add_argument("--lr-sweep", action="store_true", help="only the sequential lr sweep")
    ap.add_argument("--runs", help="runs folder (default runs/study-PRESET)")
    ap.add_argument("--reports", default=str(ROOT / "reports"), help="where the reports go")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress lines must show up while runs go on
    try:
        name, study = load_study(args.preset)
        return run_study(name, study, args)
    except (StudyError, rules.PlanError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run_study(name: str, study: Study, args) -> int:
    from .config import load
    from .data import synthesize, write_cubes, HU_WINDOW

    root = Path(args.runs or ROOT / "runs" / f"study-{name}")
    root.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    data_path = root / "data.h5"
    if not data_path.exists():
        d = study.data
        print(f"data: {d['n']} synthetic cubes ({d['val']} validation, seed {d['seed']}) -> {data_path}")
        train, val = synthesize(d["n"], d["val"], d["seed"], progress=sys.stderr.isatty())
        write_cubes(data_path, train, val, {"cube_size": 16, "ndim": 3, "spacing_mm": 1.0,
                                            "hu_window": list(HU_WINDOW), "source": "synthetic",
                                            "created_by": f"deepdensity.repro --preset {name}"})
    train_yaml = root / "train.yaml"
    # deterministic kernels: a rerun of the study gives the same epochs to target
    train_yaml.write_text(yaml.safe_dump({**study.train, "data_path": str(data_path),
                                          "deterministic": True}))
    cfg = load(str(train_yaml))
    E = study.calibration_epochs
    eta = cfg.base_lr

    if args.lr_sweep:
        runner = StudyRunner(root, train_yaml, None, len(study.lr_sweep))
        rows = []
        for f in study.lr_sweep:
            r = runner.run(f"lr-sweep-x{f:g}", "strong", 1,
                           {"base_lr": eta * f, "max_epochs": 4 * E, "target_loss": 0.0, "seed": 0})
            vals = [m["val_loss"] for m in read_metrics(root / f"lr-sweep-x{f:g}")]
            rows.append({"factor": f, "lr": eta * f, "status": r["status"],
                         "val_loss_at_E": vals[E - 1] if len(vals) >= E else None,
                         "final_val_loss": r["final_val_loss"]})
        out = Path(args.reports)
        out.mkdir(parents=True, exist_ok=True)
        (out / "lr_sweep.json").write_text(json.dumps(rows, indent=2))
        print(f"lr sweep ({4 * E} epochs each): " + "; ".join(
            f"x{r['factor']:g}: val_loss@{E}={r['val_loss_at_E']}, {r['status']}" for r in rows))
        return 0

    seeds = study.seeds
    big = [n for n in study.workers if n > 1]
    real_strong = bool(args.runner)
    n_runs = len(seeds) * (1 + len(big) * sum(1 for m in study.modes if m != "strong" or real_strong)) + 1
    runner = StudyRunner(root, train_yaml, args.runner or None, n_runs)

    # 1. The sequential run of the first seed calibrates the target (paper: ~100 epochs).
    seed0 = seeds[0]
    seq_name = f"strong-n1-s{seed0}"
    if study.target_loss is None:
        runner.run(seq_name, "strong", 1, {"max_epochs": E, "target_loss": 0.0, "seed": seed0})
        seq_vals = [m["val_loss"] for m in read_metrics(root / seq_name)]
        target, cap = rules.calibrate_target(seq_vals, E)
        print(f"target: val_loss {target:.6g}, the sequential run's after {E} epochs; cap {cap} epochs")
    else:
        target, cap = study.target_loss, 4 * E
    common = {"target_loss": repr(target), "max_epochs": cap}

    # 2. Every cell's convergence.
    results = {}
    for seed in seeds:
        s = {**common, "seed": seed}
        if study.target_loss is None and seed == seed0:
            r = json.loads((root / seq_name / "result.json").read_text())
            # the calibration run reached the target at epoch E by construction
            r = {**r, "status": "reached_target", "epochs": E, "time_to_target_s": r["seconds"]}
        else:
            r = runner.run(f"strong-n1-s{seed}", "strong", 1, s)
        results[("strong", 1, seed)] = (r, f"strong-n1-s{seed}")
        for mode in study.modes:
            for n in big:
                if mode == "strong" and not real_strong:
                    continue
                nm = f"{mode}-n{n}-s{seed}"
                results[(mode, n, seed)] = (runner.run(nm, mode, n, s), nm)
    r2 = runner.run(f"strong-n1-2eta-s{seed0}", "strong", 1, {**common, "seed": seed0, "base_lr": 2 * eta})
    seq_2eta_reached = r2["status"] == "reached_target"

    # 3. Time per epoch: measured for N = 1 (or every N with --runner), modelled beyond.
    timing_path = root / "timing.json"
    from .model import build_model
    n_weights = build_model(cfg, 16, 3).count_params()
    if timing_path.exists():
        timing = json.loads(timing_path.read_text())
    else:
        timing = measure_timing(cfg, n_weights)
        write_atomic(timing_path, json.dumps(timing, indent=2))  # a cache reread by every rerun
    from .data import load_cubes
    cubes = load_cubes(data_path)
    n_train = len(cubes.train) if not cfg.max_train_cubes else min(cfg.max_train_cubes, len(cubes.train))
    n_val = len(cubes.val)

    def modelled(mode, n):
        return rules.epoch_seconds_model(mode, n, n_train, n_val, cfg.batch_size, timing["step_fixed_s"],
                                         timing["per_sample_s"], timing["allreduce_per_doubling_s"],
                                         timing["eval_per_sample_s"])

    seq_epoch = statistics.median(epoch_durations(root / seq_name) or [float("nan")])
    cells = []
    for mode in study.modes:
        for n in study.workers:
            for seed in seeds:
                # N = 1 is one run for every mode; emulated strong scaling is the sequential path
                shared = n == 1 or (mode == "strong" and not real_strong)
                r, run_name = results[("strong", 1, seed) if shared else (mode, n, seed)]
                epochs_to_target = r["epochs"] if r["status"] == "reached_target" else None
                if args.runner:      # a real run on n workers: its own clock
                    epoch_s = statistics.median(epoch_durations(root / run_name) or [math.nan])
                    source, t = "measured", r["time_to_target_s"]
                else:                # one process here: N = 1 measured, N > 1 modelled
                    epoch_s, source = (seq_epoch, "measured") if n == 1 else (modelled(mode, n), "modelled")
                    t = epochs_to_target * epoch_s if epochs_to_target else None
                cells.append(Cell(mode, n, seed, r["status"], r["epochs"], epochs_to_target, epoch_s,
                                  source, t, run_name))

    claims = evaluate_claims(cells, study.workers, seq_2eta_reached)
    steps1 = rules.steps_per_epoch(n_train, cfg.batch_size)
    strong_model = rules.SpeedupModel(
        steps1 * timing["step_fixed_s"], steps1 * cfg.batch_size * timing["per_sample_s"]
        + n_val * timing["eval_per_sample_s"], steps1 * timing["allreduce_per_doubling_s"])
    from .report import write_reports
    write_reports(Path(args.reports), name=name, study=study, cfg=cfg, cells=cells, claims=claims,
                  target=target, cap=cap, timing=timing, strong_model=strong_model, seq_epoch_s=seq_epoch,
                  modelled_seq_epoch_s=modelled("strong", 1), runs_root=root, seq_run=root / seq_name,
                  seq_2eta=r2, n_train=n_train, n_val=n_val, runner=args.runner,
                  wall_s=time.perf_counter() - t_start)
    print(f"reports written to {args.reports} ({_fmt_s(time.perf_counter() - t_start)} this invocation)")
    for c in claims:
        print(f"  {c['verdict']:>15}: {c['claim']} (ours: {c['ours']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
