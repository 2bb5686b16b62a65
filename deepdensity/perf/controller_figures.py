"""`make bench`'s figures by Horovod controller: samples/s of `horovodrun -np 2` under MPI and
under Gloo against one process on the same cores, and each controller's allreduce split by the
ranks' own clocks: the wait for the last rank to call it, then the allreduce once both have
(rank_waits.py). The controllers are those `horovodrun --check-build` lists (MPI beside Gloo
where `make install` found OpenMPI).

    python -m deepdensity.bench --controllers [--pairs 5]

Each round runs one process (global batch 64, both cores) and `horovodrun --mpi|--gloo -np 2`
(32 per worker, a core each), in an order that turns round every round, so that a machine whose
speed drifts moves all three alike; the ratio to one process is taken round by round. MPI's
ranks are started as `deepdensity launch` starts them (controllers.MPI_ENV: a waiting rank
yields its core). The processes run the probes' entry point (rank_probes.py)."""

from __future__ import annotations

import json
import statistics

from deepdensity.launch import controllers
from deepdensity.launch.horovodrun import horovodrun_path
from deepdensity.perf import rank_waits
from deepdensity.perf.probes import printed_value, rank_probe, run_child
from deepdensity.utils.machine import cpu_model


def np2(name: str) -> list:
    """`horovodrun --CONTROLLER -np 2`."""
    return [horovodrun_path(), controllers.FLAGS[name], "-np", "2"]


def controller_figures(cfg_path: str, batch: int = 32, steps: int = 100, pairs: int = 5, wait_steps: int = 60) -> dict:
    """The rounds' samples/s and ratios, and the allreduce split, for every controller built."""
    names = [c for c in controllers.CONTROLLERS if c in controllers.built(horovodrun_path())]
    rates = {"one": [], **{name: [] for name in names}}
    for k in range(pairs):
        order = ["one", *names] if k % 2 == 0 else [*reversed(names), "one"]
        got = {who: samples_per_s(cfg_path, who, batch, steps) for who in order}
        if None in got.values():
            print(f"  (round {k + 1} left out: {', '.join(w for w, r in got.items() if r is None)} failed)")
            continue
        for who, rate in got.items():
            rates[who].append(rate)
    out = {
        "cpu": cpu_model(),
        "config": cfg_path,
        "per_worker_batch": batch,
        "steps": steps,
        "rounds": len(rates["one"]),
        "controllers_built": names,
        "mpi_env": dict(controllers.MPI_ENV),
        "one_process_samples_s": statistics.median(rates["one"]) if rates["one"] else None,
    }
    for name in names:
        ratios = [two / one for one, two in zip(rates["one"], rates[name])]
        out[name] = {
            "np2_samples_s": statistics.median(rates[name]) if rates[name] else None,
            "ratio_median": statistics.median(ratios) if ratios else None,
            "ratio_min": min(ratios, default=None),
            "ratio_max": max(ratios, default=None),
            "ratios": ratios,
            "rank_waits": rank_waits_under(name, cfg_path, batch, wait_steps),
        }
    return out


def samples_per_s(cfg_path: str, who: str, batch: int, steps: int):
    """Samples/s of one process at 2 x batch (`who` "one"), or of -np 2 at batch under the
    controller `who`; None if the run failed."""
    cmd = rank_probe("throughput", "--config", cfg_path, "--steps", steps)
    if who == "one":
        proc = run_child(cmd + ["--batch", str(2 * batch)])
    else:
        # Horovod: two ranks under the controller `who`
        proc = run_child(np2(who) + cmd + ["--batch", str(batch)], controllers.MPI_ENV)
    return printed_value(proc, "SAMPLES_PER_S")


def rank_waits_under(name: str, cfg_path: str, batch: int, steps: int) -> dict:
    """The allreduce of a -np 2 step under controller `name`, split by the ranks' own clocks
    (ms, medians and means), or {"error": ...}."""
    # Horovod: each rank times its calls of the fused allreduce
    proc = run_child(
        np2(name) + rank_probe("rank-waits", "--config", cfg_path, "--batch", batch, "--steps", steps),
        controllers.MPI_ENV,
        timeout=900,
    )
    found = [
        controllers.joined_line(line).split("RANK_WAITS", 1)[1]
        for line in proc.stdout.splitlines()
        if "RANK_WAITS" in line
    ]
    if proc.returncode or not found:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return rank_waits.summary_ms(json.loads(found[0]))


def print_controllers(fig: dict) -> None:
    one = fig.get("one_process_samples_s")
    print(
        f"\nby controller, {fig['cpu']}: samples/s at a global batch of {2 * fig['per_worker_batch']}, median "
        f"of {fig['rounds']} rounds of {fig['steps']} steps: one process (both cores) {_num(one, '.0f')}"
    )
    for name in fig["controllers_built"]:
        c, w = fig[name], fig[name].get("rank_waits", {})
        print(
            f"  horovodrun --{name} -np 2: {_num(c['np2_samples_s'], '.0f')}, ratio round by round "
            f"{_num(c['ratio_median'])} (min {_num(c['ratio_min'])}, max {_num(c['ratio_max'])})"
        )
        if "steps" in w:
            print(
                f"    its allreduce by the ranks' clocks, {w['steps']} steps (median, mean ms): the wait for the "
                f"last rank {w['wait_for_last_rank_ms_median']:.2f}, {w['wait_for_last_rank_ms_mean']:.2f}; "
                f"the allreduce once both called {w['after_all_called_ms_median']:.2f}, "
                f"{w['after_all_called_ms_mean']:.2f}"
            )
        else:
            print(f"    its allreduce by the ranks' clocks: failed ({w.get('error')})")


def _num(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)
