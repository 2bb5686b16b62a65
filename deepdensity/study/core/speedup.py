"""The speedup model of Cunha et al. (HPML 2018), section IV, and the efficiency of section VII:
the seconds of an epoch on n workers built from measured per-step parts, the allreduce's latency
and per-doubling cost, and the least-squares fits that give them (pure; SciPy for the fits)."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
from scipy import optimize

from deepdensity.scaling import rules
from deepdensity.scaling.rules import steps_per_epoch


def efficiency(t1: Optional[float], n: int, tn: Optional[float]) -> float:
    """Scaling efficiency in percent, T1 / (n Tn) * 100 (paper section VII).

    NaN when either time is missing (a run that did not reach the target).
    """
    if t1 is None or tn is None or not (math.isfinite(t1) and math.isfinite(tn)) or tn <= 0:
        return float("nan")
    return 100.0 * t1 / (n * tn)


# ------------------------------------------------------------------------------------
# The speedup model of section IV: T(n) = T_S + T_P / n + c log2 n, built from per-step parts
# (the paper writes c log(n) without a base; we use log2, the depth of a tree or the number of
# halving rounds of a recursive-doubling allreduce, so c is per doubling)
# ------------------------------------------------------------------------------------
def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple:
    """Least-squares (intercept, slope), both clipped at 0: a time is never negative."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    (a, b), _ = optimize.nnls(np.stack([np.ones_like(xs), xs], axis=1), ys)
    return float(a), float(b)


def fit_through_origin(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares c of y = c x (no intercept), clipped at 0: the paper's communication term
    c log2 n has no constant, so its c is fitted in that form rather than taken as the slope
    of a line whose intercept is then dropped."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    denominator = float(np.dot(xs, xs))
    return max(0.0, float(np.dot(xs, ys)) / denominator) if denominator > 0 else 0.0


def fit_latency_and_per_doubling(allreduce_s: dict) -> tuple:
    """(latency, per doubling) of allreduce(n) = latency + per_doubling * log2 n, least squares
    over the measured {n: seconds} at n > 1, both clipped at 0 (a time is never negative). Two
    N fix both exactly. A host whose allreduces cost about as much at N = 2 as at 4 (a latency:
    Horovod's negotiation and cycle, the wait for the slowest rank) is not fitted by the
    paper's c log2 n alone, which must then under-price N = 2 to fit N = 4."""
    ns = sorted(n for n in allreduce_s if n > 1)
    if not ns:
        return 0.0, 0.0
    if len(ns) == 1:
        return 0.0, fit_through_origin([math.log2(ns[0])], [allreduce_s[ns[0]]])
    return fit_line([math.log2(n) for n in ns], [allreduce_s[n] for n in ns])


def epoch_seconds_model(
    p,
    n_train: int,
    n_val: int,
    step_fixed_s: float,
    per_sample_s: float,
    allreduce_per_doubling_s: float,
    eval_per_sample_s: float,
    definition: str = rules.PER_WORKER,
    allreduce_latency_s: float = 0.0,
    epoch_overhead_s: float = 0.0,
) -> float:
    """Seconds of one epoch of plan `p` (policy.ScalingPlan) on p.workers workers, each its
    own device, built from per-step parts:

        steps * (step_fixed + per_sample * per_worker_batch + allreduce(n))
        + eval_per_sample * n_val / n + epoch_overhead,
        allreduce(n) = latency + per_doubling * log2 n (n > 1)

    For strong scaling under the `global` definition, no latency and no per-epoch overhead
    (the callbacks' epoch-end work: a checkpoint, the logs) this is exactly the
    paper's T_S + T_P / n + c log2 n with T_S = steps * step_fixed, T_P = steps * base_batch *
    per_sample and c = steps * per_doubling; under `per_worker` an epoch is N such passes.
    """
    steps = steps_per_epoch(n_train, p, definition)
    return epoch_seconds(
        steps,
        p.per_worker_batch,
        steps,
        p.workers,
        n_val,
        step_fixed_s,
        per_sample_s,
        allreduce_per_doubling_s,
        eval_per_sample_s,
        allreduce_latency_s=allreduce_latency_s,
        epoch_overhead_s=epoch_overhead_s,
    )


def allreduce_seconds_at(n: int, per_doubling_s: float, latency_s: float = 0.0, size: float = 1.0) -> float:
    """One allreduce among n workers: latency + size * per_doubling * log2 n, and nothing for
    one worker (there is no allreduce). The paper's form has no latency; `size` is the floats
    sent over the gradients' (local SGD: 3), the per-doubling part taken as proportional to
    it (bandwidth-bound), the latency not."""
    if n < 1:
        raise ValueError("need n >= 1")
    return 0.0 if n == 1 else latency_s + size * per_doubling_s * math.log2(n)


def epoch_seconds(
    steps: int,
    per_worker_batch: int,
    allreduces: int,
    n: int,
    n_val: int,
    step_fixed_s: float,
    per_sample_s: float,
    allreduce_per_doubling_s: float,
    eval_per_sample_s: float,
    allreduce_size: float = 1.0,
    allreduce_latency_s: float = 0.0,
    epoch_overhead_s: float = 0.0,
) -> float:
    """Seconds of one epoch on n devices from what the epoch did (a metrics row):

        steps * (step_fixed + per_sample * per_worker_batch)
        + allreduces * allreduce_seconds_at(n) + eval_per_sample * n_val / n + epoch_overhead

    With one allreduce of the gradients per step (the paper's four, adaptive) this is
    `epoch_seconds_model`; local SGD allreduces `allreduce_size` = 3 times the floats
    every H steps (`allreduce_seconds_at`)."""
    if n < 1 or steps < 0 or allreduces < 0:
        raise ValueError("need n >= 1 and non-negative counts")
    return (
        steps * (step_fixed_s + per_sample_s * per_worker_batch)
        + allreduces * allreduce_seconds_at(n, allreduce_per_doubling_s, allreduce_latency_s, allreduce_size)
        + eval_per_sample_s * n_val / n
        + epoch_overhead_s
    )
