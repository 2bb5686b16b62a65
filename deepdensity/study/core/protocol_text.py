"""The paper, and how the study was run beside it: the paper's published numbers (Tables I and
II of Cunha et al., HPML 2018, efficiency in per cent, NaN where the target was not reached),
the protocol table's rows of REPORT.md (paper against ours, every difference with its reason),
why strong scaling at N > 1 is read off the sequential runs, and what the real strong-scaling
runs showed."""
from __future__ import annotations

import math
from typing import Optional

from deepdensity.scaling import policies, rules


# The default study's decision rules (docs/decision-rules.md), as its record names them
RULES_VERSION = "2026-11-26: missed within the cap, rank tests with Holm, pooled trend tests, three clocks"
# When docs/decision-rules.md was committed (4ba81fe), before the full grid's runs began.
DECISION_RULES_FIXED_UTC = "2026-11-26 09:13 UTC"

SEQUENTIAL_PROOF = ("N > 1 is derived from the sequential runs (strong scaling's global batches are the "
                    "sequential run's, in the same order: tests/scaling/test_rules.py::"
                    "test_per_worker_strong_epoch_is_n_sequential_passes, and under horovodrun "
                    "tests/training/test_horovod.py::test_strong_on_two_workers_follows_the_sequential_path)")


def real_strong_summary(rows: Optional[list]) -> str:
    """What the real strong-scaling runs (sequential.real_strong_runs) showed, beside the derivation."""
    if not rows:
        return "not run for real in this study"
    said = []
    for r in rows:
        got, seq = r["passes_to_target"], r["sequential_passes"]
        if got is None:
            said.append(f"horovodrun -np {r['n']} did not reach the target ({r['status']}, {r['epochs']} epochs)")
        else:
            said.append(f"horovodrun -np {r['n']} reached it after {got:g} passes"
                        + (f" (the sequential run: {seq:g})" if seq is not None else " (the sequential run: not reached)"))
    return f"run for real on seed {rows[0]['seed']}: " + "; ".join(said)


def time_phrase(cfg) -> str:
    """How a cell's time to target is made, as the run's settings have it: passes to target
    (validated at every pass, or read at the epochs' ends) x the seconds of a pass."""
    read = "validated at every pass" if cfg.validate_every_pass else "read at the epochs' ends"
    epoch = "an epoch at N is N passes" if cfg.epoch_definition == rules.PER_WORKER else "an epoch is one pass"
    return f"passes to target ({read}) x the seconds of a pass ({epoch})"


def protocol_rows(study, cfg, n_train: int, n_val: int, target: float, cap: int, eta: float,
                  sweep: Optional[dict], runner: str) -> list:
    """The table "protocol: paper vs ours": one row per point the paper states (section VI),
    as (point, paper, ours, difference and why; empty where there is none)."""
    E = study.calibration_epochs
    stall = (f"stall: no new best validation loss in {cfg.stall_patience} epochs"
             if cfg.stall_patience else "no stall rule")
    same = ""
    edge = (f"{eta:.6g}: the largest lr on the grid {sweep['grid_base_lr']:g} x sqrt(2)^k that converges "
            f"over {sweep['epochs']} sequential epochs for every seed"
            + (f", below the collapse level {sweep['collapse_loss']:.4g}" if sweep.get("collapse_loss") else "")
            if sweep else f"{eta:g}, fixed by the preset")
    rows = [
        ("data", "LUNA16 lung-nodule cubes, 2100", f"synthetic LUNA-like cubes, {n_train + n_val}",
         "no LUNA16 here (no network); `prepare` turns real scans into cubes for the same study"),
        ("split", "1844 training, 256 validation", f"{n_train} training, {n_val} validation",
         same if (n_train, n_val) == (1844, 256) else "smaller data set to fit the time budget"),
        ("cube", "16^3", "16^3", same),
        ("model", "3 Conv3D of 32 filters, 7/5/3; dense to the mixture; DeepDensity",
         f"3 Conv3D of {list(cfg.conv_filters)} filters, {list(cfg.conv_kernels)}, stride "
         f"{list(cfg.conv_strides)}; latent {cfg.latent_dim}; DeepDensity",
         "strides and latent size are not stated in the paper; ours are stated in config.py"),
        ("K (Gaussians)", "50", str(cfg.n_components),
         same if cfg.n_components == 50 else "fewer Gaussians to fit the time budget"),
        ("loss", "MSLE", "MSLE", same),
        ("batch B", "32", str(cfg.batch_size), same if cfg.batch_size == 32 else "preset"),
        ("optimizer", "Adam, beta 0.9/0.999, eps 1e-8",
         f"Adam, beta {cfg.beta_1:g}/{cfg.beta_2:g}, eps {cfg.epsilon:g}", same),
        ("eta and how chosen", "0.00105, the largest lr that still converges", edge,
         "the paper's principle on our data; the literal 0.00105 is the `literal-eta` preset"
         if sweep else "the paper's literal value, not re-derived on our data"),
        ("epoch", "not stated; we read it as one pass per worker (docs/protocol.md)", cfg.epoch_definition,
         same if cfg.epoch_definition == rules.PER_WORKER else "the shared-pass definition"),
        (policies.WARMUP, "5 epochs, Horovod's LearningRateWarmupCallback",
         f"{cfg.warmup_epochs} epochs ({cfg.epoch_definition}), the same per-batch formula", same),
        ("target", "val MSLE 0.0016384, the sequential run's after ~100 epochs",
         f"val MSLE {target:.6g}, " + (f"the median of {len(study.calibration_seeds)} calibration runs' after {E} "
                                      f"epochs (seeds no cell uses)" if study.calibration_seeds else
                                      f"the first seed's sequential run's after {E} epochs"),
         same if E >= 100 else f"{E} calibration epochs to fit the time budget"),
        ("cap", "400 epochs", f"{cap} epochs", same if cap == 4 * E else "preset"),
        ("stopping rules", "non-finite loss, target, cap", f"non-finite loss, target, cap; {stall}",
         "the stall rule only ends runs that have plainly failed, to afford the study" if cfg.stall_patience else same),
        ("N", "1, 2, 4, 8, 16, 32", "; ".join(
            f"{m}: {', '.join(map(str, study.mode_workers.get(m, study.workers)))}" for m in study.modes),
         "costly cells left out to fit the time budget; PRESET=paper runs them" if study.mode_workers else same),
        ("seeds", "not stated (one run per cell, as far as the paper shows)",
         ", ".join(map(str, study.seeds)) + (f" in every cell, up to {study.max_seeds} where a verdict is unsettled"
                                             if study.max_seeds > len(study.seeds) and study.budget_minutes else ""),
         "several seeds, so that a verdict is not one run's chance (decision rules)"),
        ("hardware", "up to 32 K80 GPUs", "real workers: " + runner if runner else
         "one 2-core CPU: N workers emulated in one process",
         same if runner else "no 32 devices here; the convergence is exact (tests), the time is modelled"),
        ("timing", "wall-clock time to target", "measured (real runs)" if runner else
         time_phrase(cfg) + " of the paper's speedup model, calibrated on a real one-process epoch and "
         "shown beside real horovodrun -np 2 and -np 4 epochs",
         same if runner else "no 32 devices here; see 'The clock'"),
    ]
    return [list(r) for r in rows]


PAPER_TABLE1 = {1: 100.00, 2: 105.17, 4: 86.81, 8: 90.09, 16: 58.08, 32: 46.25}


PAPER_TABLE2 = {
    policies.WEAK: {1: 100.00, 2: 96.96, 4: 63.86, 8: 42.32, 16: 19.65, 32: 9.45},
    policies.WARMUP: {1: 100.00, 2: 84.95, 4: 75.49, 8: math.nan, 16: math.nan, 32: math.nan},
    policies.LINEAR: {1: 100.0, 2: math.nan, 4: math.nan, 8: math.nan, 16: math.nan, 32: math.nan},
}
