"""The scaling rules of Cunha et al. (HPML 2018), section IV and VI, as pure functions:
epochs, the sample stream, slices and stopping. What each policy decides (batch and lr as
functions of N) is in policies.py, which builds on these; the study's own mathematics (the
speedup model, reading a run's curve) is in deepdensity/study/core/speedup.py and curves.py.

No TensorFlow and no Horovod here, so that every rule can be tested exhaustively and
reused by the study driver without starting a framework.

Vocabulary:
  workers    N, the number of data-parallel workers the policy is computed for
             (Horovod's world size, or the emulated N of `--emulate-workers`).
  processes  how many processes actually share one global batch (1 when emulating).
  base batch B = 32 and base lr eta = 0.00105 are the sequential model's settings.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Optional, Sequence

import numpy as np

from deepdensity.utils.errors import UserError


class RunStatus(enum.StrEnum):
    """How a run ended: what StoppingRules.reason answers, and the "status" of result.json, state.json
    and the study's ledger (the values are those strings, so every record reads the same)."""

    REACHED = "reached_target"
    DIVERGED = "diverged"  # a non-finite loss
    COLLAPSED = "collapsed"  # at the collapse level for collapse_patience epochs (collapsed)
    STALLED = "stalled"  # no new best for stall_patience epochs (stalled)
    CAPPED = "max_epochs"  # the epoch cap


class PlanError(UserError):
    """A policy cannot be applied to this number of workers (e.g. N does not divide B)."""


def divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


EPOCH_DEFINITIONS = ("per_worker", "global")
PER_WORKER = EPOCH_DEFINITIONS[0]  # the paper's, and a run's when its settings name none


def pass_length(n_train: int, base_batch: int) -> int:
    """Samples of one pass over the training set: floor(n_train / B) * B, so that a pass
    is whole base batches (the sequential model drops the remainder, as Keras 2.1 did
    with steps_per_epoch = samples // batch_size)."""
    length = n_train // base_batch * base_batch
    if length < 1:
        raise PlanError(
            f"the training set has {n_train} cubes, fewer than one batch of {base_batch}; "
            f"use more data or a smaller batch_size"
        )
    return length


def steps_per_epoch(n_train: int, p, definition: str = "per_worker", global_batch: Optional[int] = None) -> int:
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
            raise PlanError(
                f"{p.workers} passes of {samples // p.workers} cubes are less than one global batch of {gb}"
            )
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


def epoch_order(
    n_train: int, p, epoch: int, seed: int, definition: str = "per_worker", global_batch: Optional[int] = None
) -> np.ndarray:
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
        stream = np.concatenate([pass_order(n_train, p.base_batch, k, seed) for k in range(first, first + p.workers)])
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


def workers(processes: int, emulate_workers: int) -> int:
    """N, the workers a run stands for: the launcher's processes, or --emulate-workers where one
    process emulates them (both above 1 is refused where the run starts, training/launch.py)."""
    return processes if processes > 1 else emulate_workers


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
    if not (math.isfinite(noise) and math.isfinite(signal)) or noise <= theta**2 * signal:
        return per_worker_batch
    if signal <= 0:
        return max(per_worker_batch, max_per_worker)
    grown = math.ceil(per_worker_batch * noise / (theta**2 * signal) - 1e-9)
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


def stalled(
    val_losses: Sequence[float], patience: int, target_loss: float = 0.0, near: float = 0.0, near_patience: int = 0
) -> bool:
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


@dataclass(frozen=True)
class StoppingRules:
    """When a run stops (paper section VI): at the first non-finite loss, at the target, or at
    the cap; and at a plain failure, where a study affords it: `collapsed` (see above) when
    `collapse_patience` > 0, `stalled` when `stall_patience` > 0 (with `stall_near`'s allowance
    near the target, see stalled). One value serves the training callback, the ledger's replay
    and the study's derivations, so that all of them stop a run at the same epoch."""

    target_loss: float
    max_epochs: int
    stall_patience: int = 0
    stall_near: float = 0.0
    stall_near_patience: int = 0
    collapse_loss: float = 0.0
    collapse_patience: int = 0

    @classmethod
    def of(cls, settings) -> "StoppingRules":
        """The rules a run's settings set: a Config, or a mapping holding every one of these keys
        (a ledger entry's `stopping`; one that lacks a rule is a KeyError, never that rule off)."""
        names = [f.name for f in fields(cls)]
        if isinstance(settings, Mapping):
            return cls(**{k: settings[k] for k in names})
        return cls(**{k: getattr(settings, k) for k in names})

    def reason(
        self, epoch: int, loss: float, val_loss: float, val_history: Sequence[float] = ()
    ) -> Optional[RunStatus]:
        """Why the run stops after `epoch` (0-based, the epoch just finished), or None to go on;
        `val_history` holds the validation losses of every epoch so far, this one included."""
        if not (math.isfinite(loss) and math.isfinite(val_loss)):
            return RunStatus.DIVERGED
        if val_loss <= self.target_loss:
            return RunStatus.REACHED
        if collapsed(val_history, self.collapse_loss, self.collapse_patience):
            return RunStatus.COLLAPSED
        if stalled(val_history, self.stall_patience, self.target_loss, self.stall_near, self.stall_near_patience):
            return RunStatus.STALLED
        if epoch + 1 >= self.max_epochs:
            return RunStatus.CAPPED
        return None
