"""The clocks a time verdict is given under. A run's epochs to target are a result of the
algorithm; its seconds are that times a clock, and the clock is the hardware's. So every time
claim is judged under three (pure; SciPy for the fit):

  host    this host's model (below; its parts measured by run/timing.py): a step's fixed cost and cost per sample, the
          allreduce of this model's gradients as a step pays it, measured here: per doubling of
          N and a latency beside it.
  paper   the same compute, with the serial share and the communication of the paper's cluster:
          the model T(n) / T(1) = s + (1 - s) / n + rho log2 n fitted (non-negative least squares)
          to Table I, where a strong-scaling pass on n GPUs took 1 / (n E_n) of one GPU's.
  device  one device per worker and communication free (rho = 0): the algorithm alone.

rho, the communication-to-compute ratio, is an allreduce's seconds per doubling of N over the
seconds of one worker's step at the base batch. A time claim's verdict as a function of rho
gives its break-even: the ratio at which the verdict changes (`break_even`), on the paper's
form (no latency: `with_rho`).

The host's model itself is here too, built from the parts timing.json holds: an epoch of (mode, N)
with each worker its own device (`model_epoch`), N workers sharing this host (`shared_host_epoch`,
what a real `horovodrun -np N` here runs), and the parts from the measured rounds
(`combine_rounds`, `step_scale_and_overhead`).

Under them all, the speedup model of Cunha et al. (HPML 2018), section IV (speedup.py): the
seconds of an epoch on n workers built from measured per-step parts.

The three are one registry, JUDGED: a clock's name, how the reports and figures name it, and how
it is made from this host's; adding a clock is one entry there and its function.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np
from scipy import optimize

from deepdensity.scaling import policies, rules
from deepdensity.scaling.policy import PAPER_BATCH
from deepdensity.study.core.protocol_text import PAPER_TABLE1
from deepdensity.study.core.speedup import (
    allreduce_seconds_at,
    epoch_seconds,
    epoch_seconds_model,
    fit_latency_and_per_doubling,
    fit_line,
)

PAPER, HOST, DEVICE = "paper", "host", "device"  # the names of the registry's clocks (JUDGED)
RHO_GRID = tuple(float(x) for x in np.geomspace(1e-4, 10.0, 101))  # the break-even search's ratios


@dataclass(frozen=True)
class Clock:
    """Seconds of a step's parts on one worker (each worker its own device)."""

    name: str
    step_fixed_s: float
    per_sample_s: float
    allreduce_per_doubling_s: float
    eval_per_sample_s: float
    base_batch: int = PAPER_BATCH
    allreduce_latency_s: float = 0.0  # an allreduce's cost at any N > 1; the paper's form has none
    epoch_overhead_s: float = 0.0  # the callbacks' epoch-end work, once an epoch at every N

    @property
    def step_s(self) -> float:
        """One worker's step at the base batch."""
        return self.step_fixed_s + self.per_sample_s * self.base_batch

    @property
    def rho(self) -> float:
        """Communication over compute: an allreduce per doubling of N over a base-batch step."""
        return self.allreduce_per_doubling_s / self.step_s

    def with_rho(self, rho: float, name: Optional[str] = None) -> "Clock":
        """The same compute with communication `rho` times a base-batch step per doubling and
        no latency: the paper's form, on which break-evens are stated."""
        return replace(
            self, name=name or self.name, allreduce_per_doubling_s=rho * self.step_s, allreduce_latency_s=0.0
        )

    def epoch_seconds(self, mode: str, n: int, n_train: int, n_val: int, definition: str) -> float:
        """One epoch of (mode, N), from the policy's batches (epoch_seconds_model)."""
        return epoch_seconds_model(
            policies.plan(mode, n, self.base_batch),
            n_train,
            n_val,
            self.step_fixed_s,
            self.per_sample_s,
            self.allreduce_per_doubling_s,
            self.eval_per_sample_s,
            definition,
            self.allreduce_latency_s,
            self.epoch_overhead_s,
        )

    def epoch_seconds_as_run(
        self, mode: str, n: int, n_val: int, steps: int, global_batch: int, allreduces: int
    ) -> float:
        """One epoch of (mode, N) as a run did it (a metrics row: its steps, global batch and
        allreduces; epoch_seconds), for the policies whose batch or allreduces vary by epoch."""
        return epoch_seconds(
            steps,
            global_batch // n,
            allreduces,
            n,
            n_val,
            self.step_fixed_s,
            self.per_sample_s,
            self.allreduce_per_doubling_s,
            self.eval_per_sample_s,
            policies.get(mode).allreduce_size,
            self.allreduce_latency_s,
            self.epoch_overhead_s,
        )


def host_clock(timing: dict, base_batch: int) -> Clock:
    """The calibrated model of the parts run/timing.py measured (its compute parts scaled to the real
    one-process epoch)."""
    k = timing["compute_scale"]
    return Clock(
        HOST,
        k * timing["step_fixed_s"],
        k * timing["per_sample_s"],
        timing["allreduce_per_doubling_s"],
        k * timing["eval_per_sample_s"],
        base_batch,
        timing["allreduce_latency_s"],
        timing["epoch_overhead_s"],
    )


def device_clock(host: Clock) -> Clock:
    return host.with_rho(0.0, DEVICE)


def fit_table1(table1: dict) -> tuple:
    """(s, rho) of T(n) / T(1) = s + (1 - s) / n + rho log2 n fitted to the paper's Table I,
    {n: efficiency %}, where T(n) / T(1) = 100 / (n E_n). Non-negative least squares on
    T(n)/T(1) - 1/n = s (1 - 1/n) + rho log2 n over n > 1, s capped at 1."""
    ns = np.array([n for n in sorted(table1) if n > 1 and math.isfinite(table1[n])], float)
    if len(ns) < 2:
        raise ValueError("the fit needs Table I at two N > 1 at least")
    y = np.array([100.0 / (n * table1[int(n)]) - 1.0 / n for n in ns])
    (s, rho), _ = optimize.nnls(np.stack([1.0 - 1.0 / ns, np.log2(ns)], axis=1), y)
    return min(float(s), 1.0), float(rho)


def paper_clock(host: Clock, table1: dict) -> Clock:
    """The host's base-batch step split and priced as the paper's cluster (its per-epoch work
    kept as the host's): serial share s of the
    step and communication rho per doubling, both from Table I."""
    s, rho = fit_table1(table1)
    step = host.step_s
    return Clock(
        PAPER,
        s * step,
        (1.0 - s) * step / host.base_batch,
        rho * step,
        host.eval_per_sample_s,
        host.base_batch,
        epoch_overhead_s=host.epoch_overhead_s,
    )


@dataclass(frozen=True)
class JudgedClock:
    """A clock every time claim is judged under: its name (a Clock's and the verdicts' key), how
    the reports and figures name it, and how it is made from this host's calibrated clock."""

    name: str
    label: str
    from_host: Callable[[Clock], Clock]


# The verdict's clock first: the verdicts are given under it and the reports show it first.
JUDGED = (
    JudgedClock(PAPER, "the paper's clock", lambda host: paper_clock(host, PAPER_TABLE1)),
    JudgedClock(HOST, "this host's clock", lambda host: host),
    JudgedClock(DEVICE, "one device per worker", device_clock),
)


def judged_clocks(host: Clock) -> dict:
    """{name: clock} of every registered clock (JUDGED), made from this host's, the verdict's first."""
    return {c.name: c.from_host(host) for c in JUDGED}


def label(name: str) -> str:
    """How a report or a figure names the clock `name`: its registered label, else "the <name> clock"."""
    return next((c.label for c in JUDGED if c.name == name), f"the {name} clock")


def break_even(verdict_at: Callable[[float], str], grid=RHO_GRID) -> list:
    """[(rho, verdict below, verdict above)] where `verdict_at(rho)` changes along `grid`, each
    rho narrowed by bisection to 3 significant digits; [] when it is the same everywhere."""
    flips, before = [], verdict_at(grid[0])
    for lo, hi in zip(grid, grid[1:]):
        after = verdict_at(hi)
        if after != before:
            a, b = lo, hi
            while b / a > 1.0005:
                mid = math.sqrt(a * b)
                a, b = (mid, b) if verdict_at(mid) == before else (a, mid)
            flips.append((float(f"{b:.3g}"), before, after))
        before = after
    return flips


def describe_break_even(flips: list, grid=RHO_GRID) -> str:
    if not flips:
        return f"the same at every rho from {grid[0]:g} to {grid[-1]:g}"
    return "; ".join(f"{below} below rho = {rho:g}, {above} above" for rho, below, above in flips)


# The version of what the clock's parts mean (CHANGELOG.md says what each version changed).
# The model reads clocks of this version only: a record of another is refused (rerender.py), and
# a runs folder's timing.json of another, or without the key (version 1), is measured again
# (run/timing.py; the old one kept beside as timing-vK.json), never mixed with new runs.
CLOCK_VERSION = 5


def is_current(timing) -> bool:
    """Whether a clock (timing.json, or a record's `timing`) is of the version this code reads."""
    return isinstance(timing, dict) and timing.get("clock_version") == CLOCK_VERSION


CONTROLLER_NAMES = {"gloo": "Gloo", "mpi": "MPI"}


def clock_controller(timing: dict) -> str:
    """The controller a clock's horovodrun ran under, as the reports name it ("Gloo", "MPI")."""
    return CONTROLLER_NAMES.get(timing["controller"], str(timing["controller"]))


def combine_rounds(rounds: list, batch_size: int) -> dict:
    """The model's parts from the rounds (pure): every figure the median over the rounds, then
    the step's line through the batches' medians and a + c log2 n through the allreduces'
    medians (fit_latency_and_per_doubling). The rounds are kept beside (`rounds`)."""
    median = lambda key, k: statistics.median(r[key][k] for r in rounds)  # noqa: E731
    steps = {b: median("steps", b) for b in rounds[0]["steps"]}
    shared = {n: median("shared", n) for n in rounds[0]["shared"]}
    allreduce = {n: median("allreduce", n) for n in rounds[0]["allreduce"]}
    step_fixed, per_sample = fit_line([int(b) for b in steps], list(steps.values()))
    latency, per_doubling = fit_latency_and_per_doubling({int(n): s for n, s in allreduce.items()})
    return {
        "step_seconds": steps,
        "step_fixed_s": step_fixed,
        "per_sample_s": per_sample,
        "eval_per_sample_s": statistics.median(r["eval"] for r in rounds),
        "shared_step_seconds": {"1": steps[str(batch_size)], **shared},
        "allreduce_seconds": {"1": 0.0, **allreduce},
        "allreduce_latency_s": latency,
        "allreduce_per_doubling_s": per_doubling,
        "real_epoch_seconds": {n: median("real", n) for n in rounds[0]["real"]},
        "real_steps_seconds": {n: median("real_steps", n) for n in rounds[0]["real_steps"]},
        "rounds": rounds,
    }


def step_scale_and_overhead(
    parts: dict, n_train: int, n_val: int, base_batch: int, definition: str, t1_real: float, t1_steps: float
) -> tuple:
    """(k, epoch overhead) from the real one-process epoch: k makes the
    model's steps of that epoch its real steps (`steps_seconds`), and the overhead is the rest
    of the real epoch less the evaluation (k x the probe's): its callbacks' epoch-end work,
    paid once an epoch at every N. Then the model's one-process epoch is the real one, and
    neither part is stretched into the other: a per-epoch cost scaled per step grows with the
    steps an epoch has (N x at N under the per_worker epoch)."""
    steps = rules.steps_per_epoch(n_train, policies.plan(policies.SEQUENTIAL, 1, base_batch), definition)
    k = t1_steps / (steps * (parts["step_fixed_s"] + parts["per_sample_s"] * base_batch))
    return k, max(0.0, t1_real - t1_steps - k * parts["eval_per_sample_s"] * n_val)


def describe_allreduce(timing: dict) -> str:
    """The clock's allreduce in words: per doubling of N, and its latency where the fit gave one."""
    per_doubling = f"{timing['allreduce_per_doubling_s'] * 1e3:.2f} ms per doubling of N"
    latency = timing["allreduce_latency_s"]  # the fit is non-negative: 0 where it finds none
    return f"{latency * 1e3:.2f} ms + {per_doubling} (none at N = 1)" if latency else per_doubling


def model_epoch(timing: dict, mode: str, n: int, n_train: int, n_val: int, base_batch: int, definition: str) -> float:
    """Seconds of one epoch of (mode, N), each worker its own device: the calibrated model
    (host_clock)."""
    return host_clock(timing, base_batch).epoch_seconds(mode, n, n_train, n_val, definition)


def shared_host_epoch(timing: dict, n: int, n_train: int, n_val: int, base_batch: int, definition: str) -> float:
    """The same model for N strong-scaling workers sharing this one host (what a real
    `horovodrun -np N` here runs), from parts measured in the real runs' thread configuration:
    each step is a rank's step while all N ranks step at once on their share of the cores
    (`shared_step_seconds`, at N = 1, 2 and 4), plus the allreduce of the model's gradients
    between N processes of this host; the host evaluates the validation set once. The compute
    scale k applies at N = 1 only: k is fitted on the one-process run's steps (two threads, a
    step that was bimodal on a 2-core AMD EPYC), while the steps at N > 1 are probed in the ranks'
    own configuration (one thread each, all N at once) in the same rounds as the real -np N
    epochs, and a factor fitted in one configuration is not carried into another."""
    c = host_clock(timing, base_batch)
    steps = rules.steps_per_epoch(n_train, policies.plan(policies.SEQUENTIAL, n, base_batch), definition)
    allreduce = steps * allreduce_seconds_at(n, c.allreduce_per_doubling_s, c.allreduce_latency_s)
    evaluation = c.eval_per_sample_s * n_val + c.epoch_overhead_s
    scale = timing["compute_scale"] if n == 1 else 1.0
    return steps * scale * timing["shared_step_seconds"][str(n)] + allreduce + evaluation
