"""Where a `horovodrun -np N` step loses time to the allreduce, from each rank's own clock.

Every rank of the probe (`python -m deepdensity.perf.rank_probes rank-waits` under horovodrun) records,
step by step, when it called the averaging allreduce of its gradients (its backward pass done)
and when the allreduce returned. On one host the ranks read one monotonic clock, so the
records line up without correction. A step's allreduce then splits in two:

- **the wait for the last rank**: from the first rank's call to the last one's. The ranks run
  the same work, but on shared cores each one's backward pass ends a little earlier or later
  from step to step; every rank but the last spends this time idle.
- **the allreduce once every rank has called**: from the last call to the last return. Horovod's
  background thread sees a request only at the start of its next cycle, so this holds the rest
  of a cycle, the ranks' agreement that every one has asked, Gloo's transfer and the hand-back
  to TensorFlow.

Pure Python, no Horovod or TensorFlow: the bench and the tests pass it timestamps.
"""

from __future__ import annotations

import statistics


def split_steps(calls: list) -> list:
    """[(wait for the last rank, allreduce after every rank called), ...] in seconds, one pair
    per step, from `calls`: for each rank, its steps' (called, returned) times in seconds on
    one clock, every rank the same number of steps."""
    if not calls or len({len(rank) for rank in calls}) != 1:
        raise ValueError("every rank must record the same number of steps")
    steps = []
    for per_rank in zip(*calls):
        called = [c for c, _ in per_rank]
        returned = [r for _, r in per_rank]
        if any(r < c for c, r in per_rank):
            raise ValueError("an allreduce returned before it was called: not one clock")
        steps.append((max(called) - min(called), max(returned) - max(called)))
    return steps


def summary_ms(calls: list) -> dict:
    """The medians and means (ms) of split_steps over the recorded steps."""
    steps = split_steps(calls)
    waits, after = [w * 1e3 for w, _ in steps], [a * 1e3 for _, a in steps]
    return {
        "steps": len(steps),
        "wait_for_last_rank_ms_median": statistics.median(waits),
        "wait_for_last_rank_ms_mean": statistics.fmean(waits),
        "after_all_called_ms_median": statistics.median(after),
        "after_all_called_ms_mean": statistics.fmean(after),
    }
