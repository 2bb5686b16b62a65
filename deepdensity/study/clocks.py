"""The clocks a time verdict is given under. A run's epochs to target are a result of the
algorithm; its seconds are that times a clock, and the clock is the hardware's. So every time
claim is judged under three (pure; SciPy for the fit):

  host    this host's model (timing.py): a step's fixed cost and cost per sample, the
          allreduce of this model's gradients as a step pays it, measured here: per doubling of
          N and, from clock version 4, a latency beside it.
  paper   the same compute, with the serial share and the communication of the paper's cluster:
          the model T(n) / T(1) = s + (1 - s) / n + rho log2 n fitted (non-negative least squares)
          to Table I, where a strong-scaling pass on n GPUs took 1 / (n E_n) of one GPU's.
  device  one device per worker and communication free (rho = 0): the algorithm alone.

rho, the communication-to-compute ratio, is an allreduce's seconds per doubling of N over the
seconds of one worker's step at the base batch. A time claim's verdict as a function of rho
gives its break-even: the ratio at which the verdict changes (`break_even`), on the paper's
form (no latency: `with_rho`).

The three are one registry, JUDGED: a clock's name, how the reports and figures name it, and how
it is made from this host's; adding a clock is one entry there and its function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np
from scipy import optimize

from deepdensity.scaling import policies
from deepdensity.study import speedup
from deepdensity.study.paper import PAPER_TABLE1

PAPER, HOST, DEVICE = "paper", "host", "device"   # the names of the registry's clocks (JUDGED)
RHO_GRID = tuple(float(x) for x in np.geomspace(1e-4, 10.0, 101))   # the break-even search's ratios


@dataclass(frozen=True)
class Clock:
    """Seconds of a step's parts on one worker (each worker its own device)."""
    name: str
    step_fixed_s: float
    per_sample_s: float
    allreduce_per_doubling_s: float
    eval_per_sample_s: float
    base_batch: int = 32
    allreduce_latency_s: float = 0.0      # an allreduce's cost at any N > 1; the paper's form has none
    epoch_overhead_s: float = 0.0         # the callbacks' epoch-end work, once an epoch at every N

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
        return replace(self, name=name or self.name, allreduce_per_doubling_s=rho * self.step_s,
                       allreduce_latency_s=0.0)

    def epoch_seconds(self, mode: str, n: int, n_train: int, n_val: int, definition: str) -> float:
        """One epoch of (mode, N), from the policy's batches (speedup.epoch_seconds_model)."""
        return speedup.epoch_seconds_model(policies.plan(mode, n, self.base_batch), n_train, n_val, self.step_fixed_s,
                                         self.per_sample_s, self.allreduce_per_doubling_s, self.eval_per_sample_s,
                                         definition, self.allreduce_latency_s, self.epoch_overhead_s)

    def epoch_seconds_as_run(self, mode: str, n: int, n_val: int, steps: int, global_batch: int,
                             allreduces: int) -> float:
        """One epoch of (mode, N) as a run did it (a metrics row: its steps, global batch and
        allreduces; speedup.epoch_seconds), for the policies whose batch or allreduces vary by epoch."""
        return speedup.epoch_seconds(steps, global_batch // n, allreduces, n, n_val, self.step_fixed_s,
                                     self.per_sample_s, self.allreduce_per_doubling_s, self.eval_per_sample_s,
                                     policies.get(mode).allreduce_size, self.allreduce_latency_s, self.epoch_overhead_s)


def host_clock(timing: dict, base_batch: int) -> Clock:
    """timing.py's calibrated model (its compute parts scaled to the real one-process epoch)."""
    k = timing["compute_scale"]
    return Clock(HOST, k * timing["step_fixed_s"], k * timing["per_sample_s"], timing["allreduce_per_doubling_s"],
                 k * timing["eval_per_sample_s"], base_batch, timing.get("allreduce_latency_s", 0.0),
                 timing.get("epoch_overhead_s", 0.0))


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
    return Clock(PAPER, s * step, (1.0 - s) * step / host.base_batch, rho * step, host.eval_per_sample_s,
                 host.base_batch, epoch_overhead_s=host.epoch_overhead_s)


@dataclass(frozen=True)
class JudgedClock:
    """A clock every time claim is judged under: its name (a Clock's and the verdicts' key), how
    the reports and figures name it, and how it is made from this host's calibrated clock."""
    name: str
    label: str
    from_host: Callable[[Clock], Clock]


# The verdict's clock first: the verdicts are given under it and the reports show it first.
JUDGED = (JudgedClock(PAPER, "the paper's clock", lambda host: paper_clock(host, PAPER_TABLE1)),
          JudgedClock(HOST, "this host's clock", lambda host: host),
          JudgedClock(DEVICE, "one device per worker", device_clock))


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
