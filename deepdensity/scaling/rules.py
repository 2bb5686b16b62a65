"""The scaling rules of Cunha et al. (HPML 2018), section IV and VI, as pure functions:
epochs, the sample stream, stopping, the edge of stability and the speedup model. What each
policy decides (batch and lr as functions of N) is in policies.py, which builds on these.

No TensorFlow and no Horovod here, so that every rule can be tested exhaustively and
reused by the study driver without starting a framework.

Vocabulary:
  workers    N, the number of data-parallel workers the policy is computed for
             (Horovod's world size, or the emulated N of `--emulate-workers`).
  processes  how many processes actually share one global batch (1 when emulating).
  base batch B = 32 and base lr eta = 0.00105 are the sequential model's settings.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from deepdensity.utils.errors import UserError


class PlanError(UserError):
    """A policy cannot be applied to this number of workers (e.g. N does not divide B)."""


def divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


EPOCH_DEFINITIONS = ("per_worker", "global")


def pass_length(n_train: int, base_batch: int) -> int:
    """Samples of one pass over the training set: floor(n_train / B) * B, so that a pass
    is whole base batches (the sequential model drops the remainder, as Keras 2.1 did
    with steps_per_epoch = samples // batch_size)."""
    length = n_train // base_batch * base_batch
    if length < 1:
        raise PlanError(f"the training set has {n_train} cubes, fewer than one batch of {base_batch}; "
                        f"use more data or a smaller batch_size")
    return length


def steps_per_epoch(n_train: int, p, definition: str = "per_worker",
                    global_batch: Optional[int] = None) -> int:
    """Global steps of one epoch under an epoch definition.

    per_worker (the paper's, we believe): every worker processes one whole pass of
      floor(n_train / B) * B samples, so an epoch is N passes of the shared stream and
      pass_length / per_worker_batch steps: 57 for weak, linear and warmup at any N on
      1844 cubes, 57 * N for strong.
    global: the workers share one pass, floor(n_train / global_batch) steps, remainder dropped
      so that every worker's share of every step is the same size.
    `global_batch` overrides the plan's (adaptive's batch of this epoch); a remainder of the
    N passes that is not a whole global batch is then dropped, as a pass drops its own.
    """
    gb = global_batch or p.global_batch
    if definition not in EPOCH_DEFINITIONS:
        raise PlanError(f"unknown epoch definition {definition!r}; choose one of {', '.join(EPOCH_DEFINITIONS)}")
    if definition == "per_worker":
        samples = p.workers * pass_length(n_train, p.base_batch)
        if samples % gb and global_batch is None:  # cannot happen for the fixed policies; guards new ones
            raise PlanError(f"{p.workers} passes of the data are not whole global batches of {gb}")
        if samples < gb:
            raise PlanError(f"{p.workers} passes of {samples // p.workers} cubes are less than one global "
                            f"batch of {gb}")
        return samples // gb
    steps = n_train // gb
    if steps < 1:
        raise PlanError(
            f"the training set has {n_train} cubes, fewer than one global batch of {gb}; "
            f"use more data, fewer workers or a smaller batch_size"
        )
    return steps


def pass_order(n_train: int, base_batch: int, k: int, seed: int) -> np.ndarray:
    """Pass k of the sample stream: the permutation drawn from (seed, k), cut to whole base batches."""
    return np.random.default_rng([seed, k]).permutation(n_train)[: pass_length(n_train, base_batch)]


def epoch_order(n_train: int, p, epoch: int, seed: int,
                definition: str = "per_worker", global_batch: Optional[int] = None) -> np.ndarray:
    """Sample indices of one epoch as a (steps, global_batch) array.

    per_worker: passes N*e .. N*(e+1)-1 of one stream that depends on (seed, pass) only,
      laid end to end and cut into global batches. Strong scaling's global batches are
      then the sequential run's, in the same order: its epoch e ends exactly where the
      sequential pass N*(e+1) ends. (Keras 2.1 under Horovod had each worker shuffle on
      its own, so a global batch could hold a sample twice; our stream is the same in
      distribution and exact for strong scaling.)
    global: one permutation drawn from (seed, epoch), shared by the workers.
    Either way the order never depends on the number of processes or the rank, nor (for
    adaptive, whose `global_batch` changes) on the batch: only the cut does.
    """
    gb = global_batch or p.global_batch
    steps = steps_per_epoch(n_train, p, definition, global_batch)
    if definition == "per_worker":
        first = p.workers * epoch
        stream = np.concatenate([pass_order(n_train, p.base_batch, k, seed)
                                 for k in range(first, first + p.workers)])
    else:
        stream = np.random.default_rng([seed, epoch]).permutation(n_train)
    return stream[: steps * gb].reshape(steps, gb)


def shard_of_batch(order: np.ndarray, rank: int, processes: int, uneven: bool = False) -> np.ndarray:
    """This process's disjoint slice of every global batch: (steps, global_batch/processes);
    `uneven`: the slice `batch_slice` gives where processes does not divide the batch."""
    if not 0 <= rank < processes:
        raise ValueError(f"rank {rank} outside 0..{processes - 1}")
    if order.shape[1] % processes and not uneven:
        raise ValueError("processes must divide the global batch")
    lo, hi = batch_slice(order.shape[1], rank, processes)
    return order[:, lo:hi]


def batch_slice(global_batch: int, rank: int, processes: int) -> tuple:
    """(start, stop) of this rank's part of a global batch: consecutive parts of B // P, the
    first B % P ranks one sample more, so the parts cover the batch once."""
    if not 0 <= rank < processes:
        raise ValueError(f"rank {rank} outside 0..{processes - 1}")
    small, extra = divmod(global_batch, processes)
    lo = rank * small + min(rank, extra)
    return lo, lo + small + (rank < extra)


def slice_weight(global_batch: int, rank: int, processes: int) -> float:
    """The factor on this rank's mean loss so that the average over the P ranks (Horovod's
    allreduce) is the mean over the global batch: P n_i / B, 1 when the parts are equal.
    (1/P) sum_i (P n_i / B) mean_i = (1/B) sum_i n_i mean_i = the global batch's mean."""
    lo, hi = batch_slice(global_batch, rank, processes)
    return processes * (hi - lo) / global_batch


def grad_slices(per_process_batch: int, max_pass_batch: int) -> int:
    """How many equal slices a process cuts its batch into so that no forward/backward
    pass holds more than `max_pass_batch` samples (0 = no limit): the smallest divisor of
    the batch that does it. Averaging the slices' mean gradients gives the batch's mean
    gradient exactly, as N Horovod workers' allreduce does."""
    if per_process_batch < 1:
        raise ValueError("per_process_batch must be >= 1")
    if max_pass_batch < 0:
        raise ValueError("max_pass_batch must be >= 0")
    if max_pass_batch == 0:
        return 1
    return next(s for s in divisors(per_process_batch) if per_process_batch // s <= max_pass_batch)


# ------------------------------------------------------------------------------------
# Beyond the paper: adaptive batches (De et al. 2017) and local SGD
# ------------------------------------------------------------------------------------
def gradient_noise(mean_part_sq_norm: float, sq_norm_of_mean: float, parts: int) -> float:
    """Estimated E||g - grad l||^2, the squared error of the batch gradient g, from N part means.

    g = (1/N) sum_i g_i is the mean of N equal parts' mean gradients g_i (the workers'
    gradients before their allreduce). Each g_i has covariance Sigma / b, so the sample
    variance of the parts, s^2 = 1/(N-1) sum_i ||g_i - g||^2, estimates tr(Sigma) / b, and
    g's own error is s^2 / N. With sum_i ||g_i - g||^2 = N (mean_i ||g_i||^2 - ||g||^2):

        E||g - grad l||^2  ~  (mean_i ||g_i||^2 - ||g||^2) / (N - 1).

    This is De et al.'s V_B / |B| (AISTATS 2017, section 3) with the N part means standing
    in for the |B| per-sample gradients, which no step computes."""
    if parts < 2:
        raise ValueError("need at least two parts to estimate a variance")
    return max(0.0, (mean_part_sq_norm - sq_norm_of_mean) / (parts - 1))


def adaptive_batch(per_worker_batch: int, noise: float, signal: float, theta: float, max_per_worker: int) -> int:
    """The next per-worker batch of `adaptive`: De et al.'s big-batch test

        E||g - grad l||^2 <= theta^2 ||g||^2      (noise <= theta^2 signal)

    with both sides averaged over the epoch's steps. Kept when it holds; otherwise grown by
    the factor that makes it hold (the noise falls as 1 / batch), rounded up to a whole
    sample per worker, so the global batch stays a multiple of N; never above
    `max_per_worker` and never shrunk (De et al.'s batches only grow)."""
    if per_worker_batch < 1 or max_per_worker < 1:
        raise ValueError("batches must be >= 1")
    if not theta > 0:
        raise ValueError("theta must be positive")
    if not (math.isfinite(noise) and math.isfinite(signal)) or noise <= theta ** 2 * signal:
        return per_worker_batch
    if signal <= 0:
        return max(per_worker_batch, max_per_worker)
    grown = math.ceil(per_worker_batch * noise / (theta ** 2 * signal) - 1e-9)
    return max(per_worker_batch, min(grown, max_per_worker))


def local_syncs_per_epoch(steps: int, local_steps: int) -> int:
    """Weight averagings (allreduces) in one epoch of `local`: after every H-th step, and
    after the epoch's last step so that the model validated and saved is the average."""
    if steps < 1 or local_steps < 1:
        raise ValueError("steps and local_steps must be >= 1")
    return -(-steps // local_steps)


def is_sync_step(step: int, steps: int, local_steps: int) -> bool:
    """Does `local` average the workers' weights after step `step` (0-based) of an epoch?"""
    return (step + 1) % local_steps == 0 or step + 1 == steps


def validation_shard(n_val: int, rank: int, processes: int) -> tuple:
    """(start, stop) of the validation cubes this process evaluates.

    Equal contiguous shards when `processes` divides n_val, so that the averaged
    metric is the exact mean; otherwise every process evaluates all of them.
    """
    if n_val % processes == 0:
        width = n_val // processes
        return rank * width, (rank + 1) * width
    return 0, n_val


def stalled(val_losses: Sequence[float], patience: int, target_loss: float = 0.0, near: float = 0.0,
            near_patience: int = 0) -> bool:
    """A run that has plainly stopped improving: none of its last `patience` validation
    losses is below the best one before them. A loss that keeps going down, however
    slowly, sets a new best every epoch and never stalls; the paper's Fig. 3 (the loss
    rises to a ceiling and stays there) stalls `patience` epochs after its best.
    `patience` 0 turns the rule off.

    A run whose best loss is within `near` (a fraction) above `target_loss` is still closing
    in: it waits `near_patience` epochs instead (>= `patience`). The rule then stops a run
    only where `patience` alone would have stopped it too, so an outcome that reached the
    target under `patience` alone is the same under both."""
    if patience < 0 or near_patience < 0:
        raise ValueError("patience must be >= 0")
    if patience == 0:
        return False
    if near > 0 and val_losses and min(val_losses) <= target_loss * (1 + near):
        patience = max(patience, near_patience)
    if len(val_losses) <= patience:
        return False
    return min(val_losses[-patience:]) >= min(val_losses[:-patience])


def collapsed(val_losses: Sequence[float], collapse_loss: float, patience: int) -> bool:
    """A run that sits at the collapse level (the loss of an output that ignores its input,
    where a model that has learnt nothing settles): its last `patience` validation losses are
    all at or above `collapse_loss`. 0 for either turns the rule off. In the AVX-512 study no
    run at that level for two evaluations in a row ever reached the target afterwards
    (tests/scaling/test_rules.py replays it on the committed curves)."""
    if patience < 0 or collapse_loss < 0:
        raise ValueError("patience and collapse_loss must be >= 0")
    if patience == 0 or collapse_loss == 0 or len(val_losses) < patience:
        return False
    return all(v >= collapse_loss for v in val_losses[-patience:])


def diverges(val_losses: Sequence[float], patience: int, collapse_loss: Optional[float] = None) -> bool:
    """The criterion for "this lr diverges" (paper section VI and Fig. 3): the loss became
    non-finite, or the run stalled at any point (rule above), or it ends above where its
    first epoch left it, or it ends no better than `collapse_loss`: the loss of an output
    that ignores its input (for the study, the training set's mean density for every
    cube), where a model that has learnt nothing settles. A slow but steady decrease below
    that level converges."""
    if not val_losses:
        raise ValueError("need at least one validation loss")
    if not all(math.isfinite(v) for v in val_losses):
        return True
    if any(stalled(val_losses[:i], patience) for i in range(patience + 1, len(val_losses) + 1)):
        return True
    if collapse_loss is not None and val_losses[-1] >= collapse_loss:
        return True
    return val_losses[-1] > val_losses[0]


def stop_reason(epoch: int, loss: float, val_loss: float, target_loss: float, max_epochs: int,
                val_history: Sequence[float] = (), stall_patience: int = 0, collapse_loss: float = 0.0,
                collapse_patience: int = 0, stall_near: float = 0.0, stall_near_patience: int = 0) -> Optional[str]:
    """Paper section VI: stop at the first non-finite loss, at the target, or at the cap;
    and at a plain failure: `collapsed` (see above) when `collapse_patience` > 0, `stalled`
    when `stall_patience` > 0 (with `stall_near`'s allowance near the target, see stalled).

    `epoch` is 0-based and names the epoch just finished; `val_history` holds the
    validation losses of every epoch so far, this one included. Returns None to go on.
    """
    if not (math.isfinite(loss) and math.isfinite(val_loss)):
        return "diverged"
    if val_loss <= target_loss:
        return "reached_target"
    if collapsed(val_history, collapse_loss, collapse_patience):
        return "collapsed"
    if stalled(val_history, stall_patience, target_loss, stall_near, stall_near_patience):
        return "stalled"
    if epoch + 1 >= max_epochs:
        return "max_epochs"
    return None


def passes_per_epoch(workers: int, definition: str) -> int:
    """Passes over the training set in one epoch: N for `per_worker` (every worker walks one
    pass), 1 for `global` (the workers share one)."""
    if definition not in EPOCH_DEFINITIONS:
        raise PlanError(f"unknown epoch definition {definition!r}")
    return workers if definition == "per_worker" else 1


def validation_points(rows: Sequence[dict], per_epoch: int) -> list:
    """[(passes, val_loss)] of a run's metrics rows, in order: the validations inside each epoch
    (`pass_val_losses`, [passes, val_loss] pairs, with validate_every_pass) and the epoch's own
    at its end (epoch x per_epoch passes); a non-finite loss is None in the rows and stays so."""
    return [point for row in rows
            for point in [tuple(p) for p in row.get("pass_val_losses") or []] + [(row["epoch"] * per_epoch,
                                                                                   row["val_loss"])]]


def passes_to_target(rows: Sequence[dict], target_loss: float, per_epoch: int) -> Optional[float]:
    """The passes a run took to reach the target, read from its metrics rows (validation_points).
    None when it never reached it."""
    for passes, val in validation_points(rows, per_epoch):
        if val is not None and math.isfinite(val) and val <= target_loss:
            return float(passes)
    return None


def sample_epoch_losses(pass_losses: Sequence[float], workers: int) -> list:
    """Strong scaling's per-epoch validation losses read off the sequential run's per-pass
    ones: with `per_worker` epochs, epoch e on N workers ends where pass N*(e+1) ends."""
    return [pass_losses[i] for i in range(workers - 1, len(pass_losses), workers)]


def derive_strong(pass_losses: Sequence[float], workers: int, target_loss: float, max_epochs: int,
                  stall_patience: int = 0, collapse_loss: float = 0.0, collapse_patience: int = 0,
                  stall_near: float = 0.0, stall_near_patience: int = 0) -> Optional[tuple]:
    """(status, epochs) of strong scaling on N workers from the sequential run's per-pass
    validation losses, applying the same stopping rules at its own epochs; None when the
    sequential run is not yet long enough to decide."""
    history = []
    for e, v in enumerate(sample_epoch_losses(pass_losses, workers)):
        history.append(v)
        reason = stop_reason(e, v, v, target_loss, max_epochs, history, stall_patience, collapse_loss,
                             collapse_patience, stall_near, stall_near_patience)
        if reason:
            return reason, e + 1
    return None


# The edge of stability (paper section VI: eta is the largest lr that still converges,
# so increasing it "causes divergence"), searched on a grid of base * sqrt(2)^k.
EDGE_STEP = math.sqrt(2.0)
EDGE_MAX_PROBES = 12


def edge_probe(outcomes: dict, n_seeds: int = 1) -> Optional[tuple]:
    """The next probe (grid index k, seed index) to run, given {(k, seed index): diverged?}
    so far; None once the edge is known.

    An lr converges only if it converges for every seed of the study: the edge is a
    property of the lr, not of one lucky initialisation. To spend few runs, the search
    climbs (from k = 0) or descends on the first seed alone until it meets a k that
    diverges, then checks the k just below it on the other seeds; if one diverges there,
    that k becomes the one that diverges and the search goes one step lower.
    """
    if n_seeds < 1:
        raise ValueError("need at least one seed")
    if not outcomes:
        return 0, 0
    if edge_index(outcomes, n_seeds) is not None:
        return None
    ks = {k for k, _ in outcomes}
    if len(ks) >= EDGE_MAX_PROBES:
        raise PlanError(f"no edge of stability within {EDGE_MAX_PROBES} probes of the lr grid")
    bad = _lowest_diverging(outcomes)
    if bad is None:                                   # everything so far converges: climb
        return max(ks) + 1, 0
    below = bad - 1
    return below, next(i for i in range(n_seeds) if (below, i) not in outcomes)


def _lowest_diverging(outcomes: dict) -> Optional[int]:
    bad = [k for (k, _), div in outcomes.items() if div]
    return min(bad) if bad else None


def edge_index(outcomes: dict, n_seeds: int = 1) -> Optional[int]:
    """The largest k that converges on every seed while k + 1 diverges on one; None if not
    yet bracketed."""
    bad = _lowest_diverging(outcomes)
    if bad is None:
        return None
    below = bad - 1
    if all(outcomes.get((below, i)) is False for i in range(n_seeds)):
        return below
    return None


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
def _nnls_small(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of columns: the best unconstrained
    solution over every subset of active columns (exact for 3 columns, 8 subsets)."""
    k = A.shape[1]
    best, best_err = np.zeros(k), float(np.sum(y ** 2))
    for mask in range(1, 2 ** k):
        cols = [j for j in range(k) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
        if (sol < 0).any():
            continue
        x = np.zeros(k)
        x[cols] = sol
        err = float(np.sum((A @ x - y) ** 2))
        if err < best_err - 1e-18:
            best, best_err = x, err
    return best


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple:
    """Least-squares (intercept, slope), both clipped at 0: a time is never negative."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    a, b = _nnls_small(np.stack([np.ones_like(xs), xs], axis=1), ys)
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


def epoch_seconds_model(p, n_train: int, n_val: int, step_fixed_s: float, per_sample_s: float,
                        allreduce_per_doubling_s: float, eval_per_sample_s: float,
                        definition: str = "per_worker", allreduce_latency_s: float = 0.0,
                        epoch_overhead_s: float = 0.0) -> float:
    """Seconds of one epoch of plan `p` (policies.ScalingPlan) on p.workers workers, each its
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
    return epoch_seconds(steps, p.per_worker_batch, steps, p.workers, n_val, step_fixed_s, per_sample_s,
                         allreduce_per_doubling_s, eval_per_sample_s, allreduce_latency_s=allreduce_latency_s,
                         epoch_overhead_s=epoch_overhead_s)


def allreduce_seconds_at(n: int, per_doubling_s: float, latency_s: float = 0.0, size: float = 1.0) -> float:
    """One allreduce among n workers: latency + size * per_doubling * log2 n, and nothing for
    one worker (there is no allreduce). The paper's form has no latency; `size` is the floats
    sent over the gradients' (local SGD: 3), the per-doubling part taken as proportional to
    it (bandwidth-bound), the latency not."""
    if n < 1:
        raise ValueError("need n >= 1")
    return 0.0 if n == 1 else latency_s + size * per_doubling_s * math.log2(n)


def epoch_seconds(steps: int, per_worker_batch: int, allreduces: int, n: int, n_val: int,
                  step_fixed_s: float, per_sample_s: float, allreduce_per_doubling_s: float,
                  eval_per_sample_s: float, allreduce_size: float = 1.0, allreduce_latency_s: float = 0.0,
                  epoch_overhead_s: float = 0.0) -> float:
    """Seconds of one epoch on n devices from what the epoch did (a metrics row):

        steps * (step_fixed + per_sample * per_worker_batch)
        + allreduces * allreduce_seconds_at(n) + eval_per_sample * n_val / n + epoch_overhead

    With one allreduce of the gradients per step (the paper's four, adaptive) this is
    `epoch_seconds_model`; local SGD allreduces `allreduce_size` = 3 times the floats
    every H steps (`allreduce_seconds_at`)."""
    if n < 1 or steps < 0 or allreduces < 0:
        raise ValueError("need n >= 1 and non-negative counts")
    return (steps * (step_fixed_s + per_sample_s * per_worker_batch)
            + allreduces * allreduce_seconds_at(n, allreduce_per_doubling_s, allreduce_latency_s, allreduce_size)
            + eval_per_sample_s * n_val / n + epoch_overhead_s)


def calibrate_target_median(runs_val_losses: Sequence[Sequence[float]], epochs: int) -> tuple:
    """The target from calibration runs that the study does not otherwise use: the median of
    their validation losses after `epochs` epochs, so that no seed of the study reaches it by
    construction. Returns (target, cap) with the cap 4 * epochs, as `calibrate_target`."""
    if not runs_val_losses:
        raise ValueError("calibration needs at least one run")
    ends = [calibrate_target(vals, epochs)[0] for vals in runs_val_losses]
    return float(np.median(ends)), 4 * epochs


def calibrate_target(sequential_val_losses: Sequence[float], epochs: int) -> tuple:
    """The paper's target: the validation loss the sequential run reaches after `epochs`
    epochs (paper: ~100), with a cap of 4 * epochs (paper: 400). Returns (target, cap)."""
    if epochs < 1:
        raise ValueError("calibration needs at least one epoch")
    if len(sequential_val_losses) < epochs:
        raise ValueError(f"the sequential run has {len(sequential_val_losses)} epochs, "
                         f"calibration needs {epochs}")
    target = float(sequential_val_losses[epochs - 1])
    if not math.isfinite(target):
        raise ValueError("the sequential run's loss is not finite at the calibration epoch")
    return target, 4 * epochs
