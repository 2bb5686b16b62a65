"""The sequential model's runs, the reference path of the study: a seed's sequential run (one
worker, no stopping rule), the target calibrated on such runs, strong scaling read off them at
every N (its global batch and lr do not depend on N, so its path is the sequential one), and
strong scaling run for real with horovodrun beside that derivation; and the edge of stability,
the study's base lr by default, searched with sequential runs (`find_edge`).
"""

from __future__ import annotations

import functools
import json
import math
import shlex
from pathlib import Path
from typing import Optional

from deepdensity.data.cubes import load_cubes, to_density
from deepdensity.launch.horovodrun import horovodrun_path
from deepdensity.scaling import policies, rules
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import curves
from deepdensity.study.core.preset import Study
from deepdensity.study.run.runner import StudyRunner
from deepdensity.study.run.session import Protocol, StudyRun
from deepdensity.training.runs import read_json, read_metrics
from deepdensity.utils.files import write_atomic


def val_losses(run_dir: Path) -> list:
    """Validation losses per epoch, a non-finite one as inf (JSON keeps it as null)."""
    return [math.inf if m["val_loss"] is None else m["val_loss"] for m in read_metrics(run_dir)]


def sequential_path(
    runner: "StudyRunner", seed: int, lr: float, max_epochs: int, prefix: str = "", need_weights: bool = False
) -> list:
    """The sequential run of one seed, `max_epochs` passes long (target 0, no stopping rule):
    the reference path every strong-scaling N follows. A shorter finished run is extended.
    `prefix`: of the run's name, for the same run under other conditions (the ISA check).
    `need_weights`: trained here even when the ledger holds it (Fig. 1 reads its weights)."""
    name = f"{prefix}seq-s{seed}"
    runner.run(
        name,
        policies.STRONG,
        1,
        {
            "base_lr": lr,
            "max_epochs": max_epochs,
            "target_loss": 0.0,
            "seed": seed,
            "stall_patience": 0,
            "collapse_patience": 0,
        },
        need_weights=need_weights,
    )
    return val_losses(runner.root / name)


def real_strong_runs(s: StudyRun, proto: Protocol) -> list:
    """Strong scaling run for real at each N of the preset's real_strong: horovodrun -np N on
    this host, the first seed, one run at a time after the others, to the target. Its passes to
    target stand beside the sequential run's, which the derivation says they equal."""
    study = s.study
    if not study.real_strong:
        return []
    launcher = shlex.quote(horovodrun_path()) + " -np {n}"
    runner = s.runner.sibling(launcher, parallel=1)
    seed, definition = study.sequential_seeds()[0], study.runs.epoch_definition
    sequential = curves.passes_to_target(read_metrics(s.root / f"seq-s{seed}"), proto.target, 1)
    rows = []
    for n in study.real_strong:
        name = f"real-strong-n{n}-s{seed}"
        r = runner.run(name, policies.SEQUENTIAL, n, {**proto.common(), "seed": seed})
        rows.append(
            {
                "n": n,
                "seed": seed,
                "run": name,
                "status": r["status"],
                "epochs": r["epochs"],
                "passes_to_target": curves.passes_to_target(
                    read_metrics(s.root / name), proto.target, curves.passes_per_epoch(n, definition)
                ),
                "sequential_passes": sequential,
                "time_to_target_s": r["time_to_target_s"],
                "final_val_loss": r.get("final_val_loss"),
                **_launched(s.root / name, runner),
            }
        )
        print(
            f"strong scaling for real, horovodrun -np {n}: {r['status']} after {r['epochs']} epochs "
            f"({rows[-1]['passes_to_target']} passes to target; the sequential run {sequential})"
        )
    return rows


def _launched(run_dir, runner: StudyRunner) -> dict:
    """The controller and transport a real run's ranks ran under, as its config.json names them.
    A run the ledger gave back has no launch in its folder; its controller is the one its ledger
    key names (the runner's), and its transport is not recorded."""
    launch = read_json(run_dir / "config.json", "run's configuration").get("launch")
    if not launch:
        return {"controller": runner.controller(), "transport": None}
    return {"controller": launch.get("controller"), "transport": launch.get("transport")}


def calibrated_target(s: StudyRun, study: Study, eta: float, first_seed_losses: list) -> tuple:
    """(target, cap, what set it): the median of the calibration seeds' sequential runs after E
    epochs (preset calibration_seeds), else the first seed's own run (the paper's one run), or
    the preset's absolute target_loss."""
    E = study.calibration_epochs
    if study.target_loss is not None:
        return study.target_loss, 4 * E, {"source": "preset"}
    if not study.calibration_seeds:
        target, max_epochs = curves.calibrate_target(first_seed_losses, E)
        print(
            f"target: val_loss {target:.6g}, the first seed's sequential run's after {E} epochs; "
            f"cap {max_epochs} epochs"
        )
        return target, max_epochs, {"source": "first seed", "seeds": [study.sequential_seeds()[0]], "losses": [target]}
    runs = s.runner.run_all(
        [functools.partial(sequential_path, s.runner, sd, eta, E) for sd in study.calibration_seeds],
        label="calibration runs",
    )
    target, max_epochs = curves.calibrate_target_median(runs, E)
    ends = [vals[E - 1] for vals in runs]
    print(
        f"target: val_loss {target:.6g}, the median of calibration seeds {study.calibration_seeds} after {E} "
        f"epochs ({', '.join(f'{v:.6g}' for v in ends)}); cap {max_epochs} epochs"
    )
    return target, max_epochs, {"source": "calibration seeds", "seeds": list(study.calibration_seeds), "losses": ends}


def strong_from_sequential(
    runner: "StudyRunner",
    seed: int,
    lr: float,
    first_max_epochs: int,
    workers,
    stopping: rules.StoppingRules,
    prefix: str = "",
) -> tuple:
    """({N: (status, epochs)}, the sequential run's per-pass validation losses): strong scaling
    read off the sequential run (curves.derive_strong, `stopping` applied at its own epochs),
    extended until every N is decided."""
    max_epochs = first_max_epochs
    while True:
        vals = sequential_path(runner, seed, lr, max_epochs, prefix)
        decided = {n: curves.derive_strong(vals, n, stopping) for n in workers}
        undecided = [n for n, d in decided.items() if d is None]
        if not undecided:
            return decided, vals
        if len(vals) < max_epochs:  # the sequential run itself stopped (non-finite loss)
            return {n: d or (RunStatus.DIVERGED, -(-len(vals) // n)) for n, d in decided.items()}, vals
        max_epochs += max(undecided)


FIG1_CUBES = 4


def figure1_slices(cfg, seq_run: Path) -> Optional[dict]:
    """Central slices of the first validation cubes and of what the sequential model renders
    for them (Fig. 1), as nested lists; None when the run's weights are not here (a run taken
    from the ledger, in a study that trains nothing)."""
    if not (seq_run / "weights.h5").is_file():
        return None
    # TensorFlow for Figure 1's slices alone: the plan, the dry run and --no-train's reports need none
    from deepdensity.model.autoencoder import build_model

    cubes = load_cubes(cfg.data_path)
    x, _ = to_density(cubes.val[:FIG1_CUBES])
    model = build_model(cfg, cubes.grid_size, cubes.ndim)
    model.load_weights(str(seq_run / "weights.h5"))
    pred = model.predict(x[..., None], verbose=0)[..., 0]
    g = cubes.grid_size // 2
    return {
        "inputs": [[[round(float(v), 6) for v in row] for row in c[g]] for c in x],
        "rendered": [[[round(float(v), 6) for v in row] for row in c[g]] for c in pred],
    }


# The stall rule's patience when the preset leaves it off; also the divergence criterion's.
DEFAULT_PATIENCE = 3


def find_edge(
    runner: StudyRunner,
    base_lr: float,
    max_epochs: int,
    patience: int,
    seeds,
    collapse_loss: Optional[float],
    say=print,
) -> tuple:
    """The sequential model's edge of stability: the largest lr on the grid
    base_lr * sqrt(2)^k that converges over `max_epochs` epochs (rules.diverges, with the
    collapse level) for every seed (curves.edge_probe). Returns (edge lr, one row per probe).
    With room for two runs, the probe the search would ask next if this one converges runs
    beside it; an outcome the search did not need cannot move the edge (curves.edge_index
    depends on the lowest k that diverges and on every seed just below it)."""
    outcomes, rows = {}, []

    def probe_run(probe: tuple) -> bool:
        k, i = probe
        lr, name = base_lr * curves.EDGE_STEP**k, f"edge-k{k:+d}-s{seeds[i]}"
        runner.run(
            name,
            policies.STRONG,
            1,
            {
                "base_lr": lr,
                "max_epochs": max_epochs,
                "target_loss": 0.0,
                "seed": seeds[i],
                "stall_patience": patience,
                "collapse_patience": 0,
            },
        )
        vals = val_losses(runner.root / name)
        diverges = rules.diverges(vals, patience, collapse_loss)
        rows.append(
            {
                "k": k,
                "seed": seeds[i],
                "lr": lr,
                "run": name,
                "diverges": diverges,
                "epochs": len(vals),
                "val_losses": [v if math.isfinite(v) else None for v in vals],
            }
        )
        say(f"edge search: lr {lr:.6g} (k = {k:+d}), seed {seeds[i]}: {'diverges' if diverges else 'converges'}")
        return diverges

    while (probe := curves.edge_probe(outcomes, len(seeds))) is not None:
        batch = [probe] + _speculative_probe(outcomes, probe, len(seeds), runner.parallel)
        for p, diverged in zip(
            batch, runner.run_all([functools.partial(probe_run, p) for p in batch], label="edge search")
        ):
            outcomes[p] = diverged
    k = curves.edge_index(outcomes, len(seeds))
    return base_lr * curves.EDGE_STEP**k, sorted(rows, key=lambda r: (r["k"], r["seed"]))


def _speculative_probe(outcomes: dict, probe: tuple, n_seeds: int, parallel: int) -> list:
    """[the probe after `probe` if `probe` converges], when a second run fits beside it."""
    if parallel < 2:
        return []
    try:
        guess = curves.edge_probe({**outcomes, probe: False}, n_seeds)
    except rules.PlanError:
        return []
    return [guess] if guess is not None and guess != probe and guess not in outcomes else []


def edge_of_stability(runner: "StudyRunner", study: Study, cfg, collapse_loss: float, out: Path) -> tuple:
    """(eta, the search's record): find_edge over the study's seeds, written to lr_sweep.json."""
    E, patience = study.calibration_epochs, cfg.stall_patience or DEFAULT_PATIENCE
    eta, probes = find_edge(runner, cfg.base_lr, E, patience, study.edge_seeds, collapse_loss)
    sweep = {
        "epochs": E,
        "patience": patience,
        "grid_base_lr": cfg.base_lr,
        "edge_lr": eta,
        "seeds": study.edge_seeds,
        "collapse_loss": collapse_loss,
        "probes": probes,
    }
    write_atomic(out / "lr_sweep.json", json.dumps(sweep, indent=2))
    print(
        f"edge of stability: lr {eta:.6g} ({eta / cfg.base_lr:.3g} x {cfg.base_lr:g}); "
        f"{eta * curves.EDGE_STEP:.6g} diverges"
    )
    return eta, sweep
