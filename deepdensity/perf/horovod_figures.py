"""`make bench`'s figures of more than one process: samples/s of `horovodrun -np 2` against one
process on the same cores, its step split into compute and allreduce, the allreduce split by
Horovod's timeline (horovod_timeline.py) and by the ranks' own clocks (rank_waits.py), Gloo's
allreduce alone at N = 2 and 4 and under shorter Horovod cycles, an idle rank's share of a
core; and the peak memory of weak N = 32 emulated. The processes are launched as the probes
launch theirs (probes.py, rank_probes.py)."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from deepdensity.config import load
from deepdensity.launch.horovodrun import horovodrun_path
from deepdensity.perf import horovod_timeline, rank_waits
from deepdensity.perf.probes import (
    allreduce_seconds,
    idle_cpu_share,
    printed_value,
    probe_step_seconds,
    rank_probe,
    run_child,
)
from deepdensity.training import dist

SHORT_CYCLES_MS = (0.2, 1.0)  # Horovod cycles for the allreduce alone, beside the run's own


def horovod_figures(
    cfg_path: str, n_weights: int, cycle_ms: float, batch: int = 32, steps: int = 100, pairs: int = 5
) -> dict:
    """horovodrun -np 2 (per-worker batch `batch`, one core each) against one process on both
    cores at the same global batch, run in turn `pairs` times (A B A B ...) so that the ratio
    is taken pair by pair and survives a machine whose speed drifts; and the Gloo allreduce
    of the gradients at N = 2, 4. All of them with Horovod's cycle at `cycle_ms`."""
    cmd = rank_probe("throughput", "--config", cfg_path, "--steps", steps)
    one_rates, two_rates = [], []
    for _ in range(pairs):
        one = run_child(cmd + ["--batch", str(2 * batch)])
        two = run_child([horovodrun_path(), "-np", "2"] + cmd + ["--batch", str(batch)])
        a, b = printed_value(one, "SAMPLES_PER_S"), printed_value(two, "SAMPLES_PER_S")
        if a is None or b is None:
            failed = one if a is None else two
            print(f"  (throughput run failed: {failed.stderr.strip().splitlines()[-1:] or failed.returncode})")
            continue
        one_rates.append(a)
        two_rates.append(b)
    ratios = [b / a for a, b in zip(one_rates, two_rates)]
    parts = np2_step_parts(cfg_path, batch)
    out = {
        "steps": steps,
        "pairs": len(ratios),
        "horovod_cycle_ms": dist.cycle_ms_in_effect(cycle_ms),
        "one_process_samples_s": statistics.median(one_rates) if one_rates else None,
        "horovodrun_np2_samples_s": statistics.median(two_rates) if two_rates else None,
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_min": min(ratios, default=None),
        "ratio_max": max(ratios, default=None),
        "step_parts": parts,
    }
    for n in (2, 4):
        try:
            out[f"allreduce_np{n}_ms"] = allreduce_seconds(n, n_weights, cycle_ms) * 1e3
        except RuntimeError:
            out[f"allreduce_np{n}_ms"] = None
    # the same allreduce under shorter cycles: what is left of it when the cycle is no wait
    by_cycle = {f"{out['horovod_cycle_ms']:g}": out["allreduce_np2_ms"]}
    for cycle in SHORT_CYCLES_MS:
        key = f"{dist.cycle_ms_in_effect(cycle):g}"  # a user's HOROVOD_CYCLE_TIME wins over every one
        if key not in by_cycle:
            try:
                by_cycle[key] = allreduce_seconds(2, n_weights, cycle) * 1e3
            except RuntimeError:
                by_cycle[key] = None
    out["allreduce_np2_ms_by_cycle"] = dict(sorted(by_cycle.items(), key=lambda item: float(item[0])))
    out["idle_core_share_np2"] = {}
    for cycle in sorted({dist.HOROVOD_DEFAULT_CYCLE_MS, out["horovod_cycle_ms"]}):  # Horovod's and ours
        try:
            out["idle_core_share_np2"][f"{cycle:g}"] = idle_cpu_share(2, cycle)
        except RuntimeError:
            out["idle_core_share_np2"][f"{cycle:g}"] = None
    return out


def np2_step_parts(cfg_path: str, batch: int, steps: int = 60) -> dict:
    """What bounds horovodrun -np 2 against one process, step by step (ms): one process's step
    at 2 x batch; two ranks stepping at `batch` at once without allreduce (the compute on
    shared cores), and with Horovod's allreduce in the step. Their ratios are the throughput
    ratio the compute alone allows, and the one compute and allreduce allow."""
    try:
        one = probe_step_seconds(cfg_path, 1, [2 * batch], steps)[0][2 * batch]
        compute = probe_step_seconds(cfg_path, 2, [batch], steps)[0][batch]
        stepped = probe_step_seconds(cfg_path, 2, [batch], steps, allreduce=True)[0][batch]
        phases = allreduce_phases(cfg_path, batch, steps)
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0]}
    return {
        "one_process_ms": one * 1e3,
        "np2_compute_ms": compute * 1e3,
        "np2_step_ms": stepped * 1e3,
        "allreduce_in_step_ms": (stepped - compute) * 1e3,
        "ratio_compute_allows": one / compute,
        "ratio_compute_and_allreduce_allow": one / stepped,
        "allreduce_phases": phases,
        "rank_waits": rank_waits_probe(cfg_path, batch, steps),
    }


def rank_waits_probe(cfg_path: str, batch: int, steps: int = 60) -> dict:
    """The allreduce of a `horovodrun -np 2` step split by the ranks' own clocks (ms, medians
    and means over `steps` steps): the wait for the last rank to call it, and the allreduce
    once every rank has (rank_waits.py); {"error": ...} if the run fails."""
    proc = run_child(
        [horovodrun_path(), "-np", "2"]
        + rank_probe("rank-waits", "--config", cfg_path, "--batch", batch, "--steps", steps),
        timeout=900,
    )
    found = [
        line[line.index("RANK_WAITS") + len("RANK_WAITS") :]
        for line in proc.stdout.splitlines()
        if "RANK_WAITS" in line
    ]
    if proc.returncode or not found:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return rank_waits.summary_ms(json.loads(found[0]))


def allreduce_phases(cfg_path: str, batch: int, steps: int) -> dict:
    """The allreduce in a `horovodrun -np 2` step split by Horovod's timeline (median ms per
    allreduce: the negotiation, from rank 0 asking until every rank has, Horovod's cycle
    included; the fusion buffer's copies; the transfer), {} when no timeline was written. A run
    of its own: the timeline's writer is not in the timed steps."""
    with tempfile.TemporaryDirectory() as tmp:
        timeline = Path(tmp) / "timeline.json"
        probe_step_seconds(cfg_path, 2, [batch], steps, allreduce=True, timeline=timeline)
        if not timeline.is_file():
            return {}
        return horovod_timeline.allreduce_phases_ms(horovod_timeline.read_timeline(timeline))


def print_horovod(hv: dict) -> None:
    one, two = hv.get("one_process_samples_s"), hv.get("horovodrun_np2_samples_s")
    print(
        f"\nsamples/s, global batch 64, median of {hv['pairs']} pairs of {hv['steps']} steps, Horovod "
        f"cycle {hv['horovod_cycle_ms']:g} ms: one process "
        f"(2 threads) {one or float('nan'):.0f}; horovodrun -np 2 (1 thread each, 32 per worker) "
        f"{two or float('nan'):.0f}; ratio pair by pair {hv['ratio_median'] or float('nan'):.2f} "
        f"(min {hv['ratio_min'] or float('nan'):.2f}, max {hv['ratio_max'] or float('nan'):.2f})"
    )
    parts = hv.get("step_parts", {})
    if "np2_step_ms" in parts:
        print(
            f"a step (ms): one process at batch 64 {parts['one_process_ms']:.1f}; two ranks at 32 stepping at once "
            f"{parts['np2_compute_ms']:.1f} without allreduce, {parts['np2_step_ms']:.1f} with it "
            f"({parts['allreduce_in_step_ms']:.1f} ms of allreduce in the step): the ratio the compute allows "
            f"{parts['ratio_compute_allows']:.2f}, "
            f"compute and allreduce {parts['ratio_compute_and_allreduce_allow']:.2f}"
        )
    phases = parts.get("allreduce_phases") or {}
    if phases:
        print(
            f"an allreduce in that step, Horovod's timeline (median ms): negotiation (until both ranks asked) "
            f"{phases['negotiation_ms']:.2f}, fusion buffer copies {phases['fusion_copies_ms']:.2f}, "
            f"transfer ({phases['transfer_activity']}) {phases['transfer_ms']:.2f}"
        )
    waits = parts.get("rank_waits") or {}
    if "steps" in waits:
        print(
            f"that allreduce by the ranks' own clocks, {waits['steps']} steps (median, mean ms): the wait for the "
            f"last rank to call it {waits['wait_for_last_rank_ms_median']:.2f}, "
            f"{waits['wait_for_last_rank_ms_mean']:.2f}; the allreduce once both have "
            f"{waits['after_all_called_ms_median']:.2f}, {waits['after_all_called_ms_mean']:.2f}"
        )
    by_cycle = hv.get("allreduce_np2_ms_by_cycle") or {}
    if by_cycle:
        print(
            "the allreduce alone on 2 processes by Horovod's cycle: "
            + ", ".join(f"{c} ms cycle {v if v is not None else float('nan'):.2f} ms" for c, v in by_cycle.items())
        )
    idle = hv.get("idle_core_share_np2", {})
    print(
        "idle ranks of horovodrun -np 2, share of a core each (the slower rank): "
        + ", ".join(f"cycle {c} ms {100 * (v if v is not None else float('nan')):.1f} %" for c, v in idle.items())
    )


def distributed_report(config: str, n_weights: int) -> dict:
    """horovodrun -np 2 against one process, Gloo's allreduce, and weak N = 32's memory."""
    cfg = load(config, [])
    hv = horovod_figures(config, n_weights, cfg.horovod_cycle_ms)
    print_horovod(hv)
    print(
        f"Gloo allreduce of the {n_weights:,} gradients: "
        + ", ".join(f"N={n} {hv.get(f'allreduce_np{n}_ms') or float('nan'):.2f} ms" for n in (2, 4))
    )
    memory = [peak_memory_weak32(config, cfg.max_pass_batch), peak_memory_weak32(config, 0)]
    for m in memory:
        what = (
            f"{m['peak_rss_gb']:.2f} GB peak resident ({m['seconds']:.0f} s with start-up)"
            if "peak_rss_gb" in m
            else f"failed: {m['error']}"
        )
        print(f"weak N=32 emulated, one epoch, max_pass_batch {m['max_pass_batch']}: {what}")
    return {"horovod": hv, "weak32_memory": memory}


# `train.py`'s training in a child that then prints its peak resident memory (ru_maxrss, kB)
TRAIN_WITH_MAXRSS = (
    "import resource, sys; from deepdensity.training.cli import main; rc = main(sys.argv[1:]); "
    "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
)


def peak_memory_weak32(cfg_path: str, max_pass_batch: int) -> dict:
    """Peak resident memory of one epoch of `--mode weak --emulate-workers 32` (a global
    batch of 1024) on 1280 synthetic cubes: the child's ru_maxrss."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "bench.h5"
        run_child(
            [
                sys.executable,
                "-m",
                "deepdensity.data",
                "synth",
                "--out",
                str(data),
                "--n",
                "1280",
                "--val",
                "256",
                "--seed",
                "0",
            ]
        )
        t = time.perf_counter()
        proc = run_child(
            [
                sys.executable,
                "-c",
                TRAIN_WITH_MAXRSS,
                "--mode",
                "weak",
                "--emulate-workers",
                "32",
                "--config",
                cfg_path,
                "--quiet",
                "--set",
                f"data_path={data}",
                "--set",
                "max_epochs=1",
                "--set",
                f"max_pass_batch={max_pass_batch}",
            ]
        )
        seconds = time.perf_counter() - t
    kb = printed_value(proc, "MAXRSS_KB")
    if proc.returncode or kb is None:
        return {"max_pass_batch": max_pass_batch, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return {"max_pass_batch": max_pass_batch, "peak_rss_gb": kb / 2**20, "seconds": seconds}
