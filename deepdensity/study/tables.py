"""The study's tables and the paper's claims, as pure functions of finished cells.

No TensorFlow, no files: `repro` fills the cells, `report` renders what this module
computes, and the tests check it on hand-made tables.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional

from deepdensity.scaling import rules

# The paper's Tables I and II (efficiency %, NaN where the target was not reached).
PAPER_TABLE1 = {1: 100.00, 2: 105.17, 4: 86.81, 8: 90.09, 16: 58.08, 32: 46.25}
PAPER_TABLE2 = {
    "weak": {1: 100.00, 2: 96.96, 4: 63.86, 8: 42.32, 16: 19.65, 32: 9.45},
    "warmup": {1: 100.00, 2: 84.95, 4: 75.49, 8: math.nan, 16: math.nan, 32: math.nan},
    "linear": {1: 100.0, 2: math.nan, 4: math.nan, 8: math.nan, 16: math.nan, 32: math.nan},
}


# ------------------------------------------------------------------------------------
# Cells and claims: pure, tested on hand-made tables
# ------------------------------------------------------------------------------------
@dataclass
class Cell:
    mode: str
    n: int
    seed: int
    status: str                       # reached_target | max_epochs | diverged | stalled
    epochs: Optional[int]             # epochs run
    epochs_to_target: Optional[int]
    epoch_seconds: float              # one epoch at this (mode, N)
    time_source: str                  # measured | modelled
    time_to_target_s: Optional[float]
    run: str                          # folder of the run that gave the convergence
    final_val_loss: Optional[float] = None   # the last validation loss (what a failure ended at)

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


class _Cells:
    """Questions the claims ask of the study's cells."""

    def __init__(self, cells: list, workers):
        self.cells, self.workers = cells, list(workers)

    def reached(self, mode, n) -> bool:
        """Every seed of (mode, N) reached the target."""
        runs = [c for c in self.cells if c.mode == mode and c.n == n]
        return bool(runs) and all(c.reached for c in runs)

    def known(self, mode) -> bool:
        return any(c.mode == mode for c in self.cells)

    def ran(self, mode, least=1) -> list:
        """The N a mode was run at (a preset may run fewer N for the costly modes)."""
        return sorted({c.n for c in self.cells if c.mode == mode and c.n >= least})

    def only(self, mode, least=1) -> str:
        """' (run at N = ... only)' where a mode skipped some of the study's N."""
        return "" if self.ran(mode, least) == [n for n in self.workers if n >= least] else \
            f" (run at N = {', '.join(map(str, self.ran(mode, least)))} only)"

    def listing(self, mode, ns, want) -> str:
        return ", ".join(str(n) for n in ns if self.reached(mode, n) == want) or "none"


def _claim(claim, paper, ours, ok) -> dict:
    verdict = "n/a" if ok is None else ("reproduced" if ok else "not reproduced")
    return {"claim": claim, "paper": paper, "ours": ours, "verdict": verdict}


def _strong_converges(v: _Cells) -> dict:
    return _claim("Strong scaling converges at every N", "reached the target at N = 1..32",
                  f"reached at N = {v.listing('strong', v.ran('strong'), True)}{v.only('strong')}",
                  all(v.reached("strong", n) for n in v.ran("strong")))


def _linear_fails(v: _Cells) -> dict:
    return _claim("The linear scaling rule fails at every N > 1", "diverged at N = 2..32",
                  f"failed at N = {v.listing('linear', v.ran('linear', 2), False)}{v.only('linear', 2)}",
                  not any(v.reached("linear", n) for n in v.ran("linear", 2)))


def _warmup_to_four(v: _Cells) -> dict:
    return _claim("Warmup converges only up to N = 4", "reached at N = 1, 2, 4; failed at 8, 16, 32",
                  f"reached at N = {v.listing('warmup', v.ran('warmup'), True)}{v.only('warmup')}",
                  all(v.reached("warmup", n) == (n <= 4) for n in v.ran("warmup")))


def _weak_converges_less_efficiently(v: _Cells) -> dict:
    ns = v.ran("weak")
    eff = efficiency_table(v.cells, ["weak"], ns)["weak"]
    falling = [eff[n] for n in ns if not math.isnan(eff[n])]
    ok = all(v.reached("weak", n) for n in ns) and all(b < a for a, b in zip(falling, falling[1:]))
    return _claim("Weak scaling converges everywhere but its efficiency falls",
                  "reached at every N; efficiency 100 -> 9.45 %",
                  f"reached at N = {v.listing('weak', ns, True)}; efficiency "
                  + ", ".join("NaN" if math.isnan(eff[n]) else f"{eff[n]:.1f}" for n in ns) + v.only("weak"), ok)


def _strong_fastest(v: _Cells) -> dict:
    faster = []
    for n in v.ran("strong", 2):
        ts = median_time(v.cells, "strong", n)
        others = [median_time(v.cells, m, n) for m in ("weak", "linear", "warmup") if n in v.ran(m)]
        faster.append(ts is not None and all(t is None or ts <= t for t in others))
    everywhere = all(v.ran(m) == v.workers for m in ("weak", "linear", "warmup") if v.known(m))
    return _claim("Strong scaling is the fastest at every N", "fastest at N = 2..32",
                  f"fastest at N = {', '.join(str(n) for n, f in zip(v.ran('strong', 2), faster) if f) or 'none'}"
                  + ("" if everywhere else " (against the other modes where they were run)"), all(faster))


def _double_eta_diverges(seq_2eta_reached: bool, eta_at_edge: bool) -> dict:
    return _claim("2 x eta diverges for the sequential model", "further increasing the lr diverges",
                  "2 x eta " + ("reached the target" if seq_2eta_reached else "did not reach the target")
                  + ("; eta is the edge found by the lr search, so this holds by the choice of eta"
                     if eta_at_edge and not seq_2eta_reached else ""),
                  not seq_2eta_reached)


def evaluate_claims(cells: list, workers, seq_2eta_reached: Optional[bool], eta_at_edge: bool = False) -> list:
    """The paper's claims (section VII) with its result, ours and a verdict, for the modes
    the study ran.

    `eta_at_edge`: eta was chosen as the edge of stability, so the 2 x eta claim checks
    the premise the study was set up with rather than a finding."""
    v = _Cells(cells, workers)
    claims = [check(v) for mode, check in (("strong", _strong_converges), ("linear", _linear_fails),
                                           ("warmup", _warmup_to_four), ("weak", _weak_converges_less_efficiently),
                                           ("strong", _strong_fastest)) if v.known(mode)]
    if seq_2eta_reached is not None:
        claims.append(_double_eta_diverges(seq_2eta_reached, eta_at_edge))
    return claims


def failures(cells: list) -> list:
    """Every run that did not reach the target, as the paper's NaN cells: (mode, N, seed,
    status, epochs run, last validation loss)."""
    return [(c.mode, c.n, c.seed, c.status, c.epochs, c.final_val_loss)
            for c in sorted(cells, key=lambda c: (c.mode, c.n, c.seed)) if not c.reached]


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
        ("epoch", "not stated; we read it as one pass per worker (README)", cfg.epoch_definition,
         same if cfg.epoch_definition == "per_worker" else "the shared-pass definition"),
        ("warmup", "5 epochs, Horovod's LearningRateWarmupCallback",
         f"{cfg.warmup_epochs} epochs ({cfg.epoch_definition}), the same per-batch formula", same),
        ("target", "val MSLE 0.0016384, the sequential run's after ~100 epochs",
         f"val MSLE {target:.6g}, the sequential run's after {E} epochs",
         same if E >= 100 else f"{E} calibration epochs to fit the time budget"),
        ("cap", "400 epochs", f"{cap} epochs", same if cap == 4 * E else "preset"),
        ("stopping rules", "non-finite loss, target, cap", f"non-finite loss, target, cap; {stall}",
         "the stall rule only ends runs that have plainly failed, to afford the study" if cfg.stall_patience else same),
        ("N", "1, 2, 4, 8, 16, 32", "; ".join(
            f"{m}: {', '.join(map(str, study.mode_workers.get(m, study.workers)))}" for m in study.modes),
         "costly cells left out to fit the time budget; PRESET=paper runs them" if study.mode_workers else same),
        ("seeds", "not stated", ", ".join(map(str, study.seeds)), ""),
        ("hardware", "up to 32 K80 GPUs", "real workers: " + runner if runner else
         "one 2-core CPU: N workers emulated in one process",
         same if runner else "no 32 devices here; the convergence is exact (tests), the time is modelled"),
        ("timing", "wall-clock time to target", "measured (real runs)" if runner else
         "epochs to target x seconds per epoch: measured at N = 1, the paper's speedup model beyond",
         same if runner else "see 'How each cell was obtained'"),
    ]
    return [list(r) for r in rows]


# ------------------------------------------------------------------------------------
# Beyond the paper: does a remedy beat strong scaling?
# ------------------------------------------------------------------------------------
def compare_with_strong(cells: list, mode: str, workers) -> list:
    """[(N, verdict, mode's median time, strong's median time)] for N > 1 where `mode` ran:
    verdict "faster" / "slower" / "as fast" (every seed of both reached the target; medians compared),
    "failed" (a seed of `mode` did not reach it), "strong failed" (strong did not, `mode` did)."""
    out = []
    for n in workers:
        mine = [c for c in cells if c.mode == mode and c.n == n]
        if n == 1 or not mine:
            continue
        t, ts = median_time(cells, mode, n), median_time(cells, "strong", n)
        if t is None:
            verdict = "failed"
        elif ts is None:
            verdict = "strong failed"
        elif math.isclose(t, ts, rel_tol=1e-9):
            verdict = "as fast"
        else:
            verdict = "faster" if t < ts else "slower"
        out.append((n, verdict, t, ts))
    return out


def beyond_answer(cells: list, modes, workers) -> str:
    """The report's answer, from the cells: does either remedy reach the target faster than
    strong scaling at some N?"""
    sentences, winners = [], []
    for mode in modes:
        rows = compare_with_strong(cells, mode, workers)
        if not rows:
            continue
        parts = []
        for n, verdict, t, ts in rows:
            if verdict in ("faster", "slower", "as fast"):
                parts.append(f"N = {n}: {t:.3g} s against strong's {ts:.3g} s ({verdict}, {100 * (t / ts - 1):+.0f} %)")
            elif verdict == "failed":
                failed = [c for c in cells if c.mode == mode and c.n == n and not c.reached]
                parts.append(f"N = {n}: did not reach the target ({', '.join(f'seed {c.seed} {c.status}' for c in failed)})")
            else:
                parts.append(f"N = {n}: {t:.3g} s while strong did not reach the target")
        winners += [(mode, n) for n, verdict, _, _ in rows if verdict in ("faster", "strong failed")]
        sentences.append(f"{mode}: " + "; ".join(parts) + ".")
    if not sentences:
        return "Neither remedy was run."
    verdict = ("Yes: " + ", ".join(f"{m} at N = {n}" for m, n in winners) + " reached the target sooner than "
               "strong scaling (median over seeds, every seed reaching it)." if winners else
               "No: neither remedy reached the target sooner than strong scaling at any N run here "
               "(median over seeds).")
    return verdict + " " + " ".join(sentences)


def filter_n(cells: list, mode: str) -> Optional[int]:
    """The N > 1 at which to test data filtering for `mode` (Gahlot et al.'s remedy for large
    batches): the smallest N where a seed failed to reach the target; if none failed, the N
    with the longest median time to target; None if the mode was not run at N > 1."""
    ns = sorted({c.n for c in cells if c.mode == mode and c.n > 1})
    failed = [n for n in ns if any(not c.reached for c in cells if c.mode == mode and c.n == n)]
    if failed:
        return failed[0]
    if not ns:
        return None
    return max(ns, key=lambda n: (median_time(cells, mode, n) or 0.0, n))


def _median_or_none(times: list) -> Optional[float]:
    return None if not times or any(t is None for t in times) else statistics.median(times)


def filter_table(rows: list) -> list:
    """[(mode, N, data, epochs per seed, median time or None)] of the filtering experiment,
    data in the order full, network, random."""
    out = []
    for mode, n in dict.fromkeys((r["mode"], r["n"]) for r in rows):
        for data in ("full", "network", "random"):
            rs = sorted((r for r in rows if (r["mode"], r["n"], r["data"]) == (mode, n, data)), key=lambda r: r["seed"])
            if rs:
                out.append((mode, n, data, [r["epochs_to_target"] for r in rs],
                            _median_or_none([r["time_to_target_s"] for r in rs])))
    return out


def filter_answer(rows: list) -> str:
    """Does network filtering make the large-batch mode reach the target sooner than the full
    data and than the random control? From the rows, median over seeds."""
    def fmt(t):
        return "not reached by every seed" if t is None else f"{t:.3g} s"
    sentences, helped = [], []
    table = filter_table(rows)
    for mode, n in dict.fromkeys((m, n) for m, n, *_ in table):
        t = {d: tm for m, nn, d, _, tm in table if (m, nn) == (mode, n)}
        sentences.append(f"{mode} at N = {n}: full {fmt(t.get('full'))}, network-filtered {fmt(t.get('network'))}, "
                         f"random control {fmt(t.get('random'))}.")
        net = t.get("network")
        if net is not None and all(t.get(d) is None or net < t[d] for d in ("full", "random")):
            helped.append(f"{mode} at N = {n}")
    verdict = ("Yes for " + ", ".join(helped) + ": the network-filtered data reached the target sooner than both the "
               "full data and the random control." if helped else
               "No: the network-filtered data did not reach the target sooner than both the full data and the "
               "random control for any mode tested.")
    return verdict + " " + " ".join(sentences)


def preferred_batch(rows: list, lr_rule: str) -> Optional[int]:
    """The global batch with the shortest time to target under `lr_rule` (None if none reached)."""
    reached = [r for r in rows if r["lr_rule"] == lr_rule and r["time_to_target_s"] is not None]
    return min(reached, key=lambda r: (r["time_to_target_s"], r["batch"]))["batch"] if reached else None


def sweep_answer(rows: list) -> str:
    """Which global batch reaches the target soonest under each lr rule, the times of the larger
    batches that reached it, and which did not. From the batch sweep's rows."""
    sentences = []
    for rule, label in (("eta", "At eta"), ("linear", "With the linear rule")):
        best = preferred_batch(rows, rule)
        if best is None:
            sentences.append(f"{label} no batch reached the target.")
            continue
        rs = sorted((r for r in rows if r["lr_rule"] == rule and r["batch"] >= best), key=lambda r: r["batch"])
        best_row, above = rs[0], rs[1:]
        reached = [r for r in above if r["time_to_target_s"] is not None]
        failed = [r["batch"] for r in above if r["time_to_target_s"] is None]
        text = (f"{label} the preferred batch is {best} ({best_row['time_to_target_s']:.3g} s, "
                f"{best_row['epochs_to_target']} passes)")
        if reached:
            text += ("; above it time to target is longer ("
                     + ", ".join(f"{r['batch']}: {r['time_to_target_s']:.3g} s" for r in reached) + ")")
        if failed and all(r["batch"] < failed[0] for r in reached):
            text += f"; no batch from {failed[0]} up reached the target"
        elif failed:
            text += "; " + ", ".join(map(str, failed)) + " did not reach the target"
        sentences.append(text + ".")
    return " ".join(sentences)
