"""REPORT.md's section on the clock: how the model of an epoch was built from the parts measured
on this host (a step, the allreduce as a step pays it and alone, under the clock's controller, evaluation, the
per-epoch work, the rounds they were taken in) and its table beside real strong-scaling epochs
(`clock_fields`); and the host clock's latency as the rules' clocks line states it
(`host_latency`)."""
from __future__ import annotations

from deepdensity.scaling import policies
from deepdensity.study.core import clocks
from deepdensity.study.core.clocks import (allreduce_alone_of, clock_controller, describe_allreduce, model_epoch,
                                           scales_steps_only, shared_host_epoch)
from deepdensity.study.core.protocol_text import time_phrase


def clock_fields(record: dict, cfg) -> dict:
    t, n_train, n_val = record["timing"], record["n_train"], record["n_val"]
    emulated = ("one process following N workers (`train.py --emulate-workers N`: same global batch, lr "
                "schedule and data order as N Horovod workers; checked against real `horovodrun -np 2` by the "
                "tests). Strong scaling at every N takes the sequential run's path, which a test shows "
                "`horovodrun -np 2` follows")
    k, host = t["compute_scale"], clocks.host_clock(t, cfg.batch_size)    # the calibrated model's parts
    latency = ("" if "allreduce_latency_s" not in t else
               ", its communication a latency a beside c log2 n (a + c log2 n through the allreduces measured at "
               "N = 2 and 4; the paper's c log2 n alone cannot pass through both on this host)")
    model = (f"every cell is {time_phrase(cfg)} of one model, the paper's T_S + T_P / n + "
             f"c log2 n{latency} built from parts measured here: a step costs {host.step_fixed_s * 1e3:.2f} ms + "
             f"{host.per_sample_s * 1e3:.3f} ms per sample of the per-worker batch + "
             + (f"an allreduce of {describe_allreduce(t)}" if latency else
                f"{t['allreduce_per_doubling_s'] * 1e3:.2f} ms of allreduce per doubling of N") + "; evaluation "
             f"{host.eval_per_sample_s * 1e3:.3f} ms per validation cube, shared by the workers" + _scaled(t, k)
             + " T(1) and T(N) come from the same model. Each worker is taken to be "
             "a device like this host, as each K80 was one device in the paper. The table sets the model beside "
             f"real strong-scaling epochs (`horovodrun -np N` under {clock_controller(t)}, "
             "workers sharing this host's cores, epochs after the "
             "first, median)" + _shared_model(t) + "." + _rounds(t))
    rows = ""
    for n, real in sorted(t["real_epoch_seconds"].items(), key=lambda kv: int(kv[0])):
        n = int(n)
        shared = shared_host_epoch(t, n, n_train, n_val, cfg.batch_size, cfg.epoch_definition)
        device = model_epoch(t, policies.STRONG, n, n_train, n_val, cfg.batch_size, cfg.epoch_definition)
        rows += f"| {n} | {real:.2f} | {shared:.2f} | {shared / real - 1:+.1%} | {device:.2f} |\n"
    return {"convergence_source": "real multi-worker runs" if record["runner"] else emulated, "time_model": model,
            "clock_rows": rows, "step_times": ", ".join(f"{b}: {s * 1e3:.1f}" for b, s in t["step_seconds"].items()),
            "n_weights": f"{t['n_weights']:,}",
            "allreduce_times": _allreduce_times(t)}


def _scaled(t: dict, k: float) -> str:
    """How the model's compute parts were scaled to the real one-process epoch: the whole epoch
    (clock version 3 and before), or its steps, with the rest of it a per-epoch cost (4 on)."""
    if not scales_steps_only(t):
        return (f". The compute parts are the probe's times x {k:.3f}, so that the model's one-process epoch is "
                f"the real one measured in the same invocation:")
    return (f"; and {t['epoch_overhead_s']:.3f} s an epoch of the callbacks' epoch-end work (a checkpoint, the "
            f"logs), at every N. The compute parts are the probe's times x {k:.3f}, so that the model's steps of "
            f"a one-process epoch take the real one's steps' time (measured in the same invocation), and the "
            f"per-epoch work is the rest of that real epoch less its evaluation:")


def _rounds(t: dict) -> str:
    """How the clock's figures were taken in rounds, and how far the real epochs moved between
    them (clock version 4 on; '' before)."""
    rounds = t.get("rounds")
    if not rounds:
        return ""
    spread = ", ".join(f"N={n}: {min(r['real'][n] for r in rounds):.2f}-{max(r['real'][n] for r in rounds):.2f}"
                       for n in sorted(rounds[0]["real"], key=int))
    steps = t.get("real_steps_seconds")
    outside = "" if not steps else (
        " Of each real epoch (median), its steps took (s): " + ", ".join(
            f"N={n}: {steps[n]:.2f} of {t['real_epoch_seconds'][n]:.2f}" for n in sorted(steps, key=int))
        + "; the rest is its validation and the callbacks' epoch-end work.")
    return (f" The probes and the real epochs were taken in turn, {len(rounds)} rounds, and every figure is the "
            f"median over the rounds; the real epochs over the rounds (s): {spread}." + outside)


def host_latency(host: clocks.Clock) -> str:
    """', plus a latency of L ms an allreduce' for a host clock that has one (version 4 on)."""
    return f", plus a latency of {host.allreduce_latency_s * 1e3:.2f} ms an allreduce" if host.allreduce_latency_s else ""


def _allreduce_times(t: dict) -> str:
    """The allreduce parts of the clock: as a step pays it and the controller's alone (a study
    timed before the first was measured has Gloo's alone, under `allreduce_seconds`)."""
    times = lambda seconds: ", ".join(f"N={n}: {s * 1e3:.2f}" for n, s in seconds.items() if n != "1")  # noqa: E731
    controller = clock_controller(t)
    alone = allreduce_alone_of(t)
    if alone is None:
        return f"{controller}'s allreduce alone: {times(t['allreduce_seconds'])}"
    return (f"as a training step pays it (the step with Horovod's allreduce less the step without, ranks stepping "
            f"together under {controller}; the clock's {'a + c log2 n' if 'allreduce_latency_s' in t else 'c'}): "
            f"{times(t['allreduce_seconds'])}; {controller}'s allreduce alone: {times(alone)}")


def _shared_model(t: dict) -> str:
    """How the clock's model for N workers sharing this host was built (clocks.shared_host_epoch)."""
    if "shared_step_seconds" not in t:
        return ("; for workers sharing this host the model adds up the N workers' compute, measured in the "
                "probe's own process, as if the host's throughput were simply shared")
    steps = ", ".join(f"N={n}: {s * 1e3:.1f}" for n, s in sorted(t["shared_step_seconds"].items(),
                                                                key=lambda kv: int(kv[0])))
    unscaled = ("" if not scales_steps_only(t) else
                ", taken as measured at N > 1 (the factor above is fitted on the one-process run and is not carried "
                "into the ranks' configuration),")
    return ("; every part was measured in the real runs' thread configuration, each in a process of its own, and "
            "for workers sharing this host a step is a rank's step measured while all N ranks step at once on "
            f"their share of the cores (ms, at strong scaling's per-worker batch: {steps}){unscaled} plus the "
            "allreduce")
