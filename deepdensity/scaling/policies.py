"""The scaling policies: one object per way of using N workers, and the registry of them.
What every policy is (the base class `Policy`, the `ScalingPlan` it computes) is in policy.py.

A policy owns everything it decides: the global batch and lr as functions of N (paper
section IV), its warmup, whether it can run elastic or uneven, how the study names and draws
it, and, through the training side's `kit` (deepdensity/training/kit.py), the training step
and callbacks it needs. Nothing outside this module compares a mode's name with another:
code asks the policy. The `--mode` switch and the study presets name policies by `name`.

No TensorFlow here (the study driver and the tables use the registry without a framework):
the training hooks receive the kit that builds the TensorFlow parts.

Adding a policy is one subclass and `register` (docs/policies.md has a worked example):

    @register
    class SquareRootLR(Policy):
        name, summary = "sqrt", "as weak, lr sqrt(N) * eta (Krizhevsky 2014)"
        def peak_lr(self, base_lr, workers):
            return base_lr * math.sqrt(workers)
"""

from __future__ import annotations

import contextlib
from typing import Optional

from deepdensity.scaling.policy import PAPER_BATCH, PAPER_LR, PAPER_WARMUP_EPOCHS, Policy, ScalingPlan
from deepdensity.scaling.rules import PlanError, local_syncs_per_epoch

# ------------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------------
_REGISTRY: dict = {}
# The policy whose N = 1 run is the sequential model, and whose N > 1 runs follow its path:
# the study's reference, and the name its sequential runs are recorded under.
SEQUENTIAL = "strong"
# The policies by name, for code outside this module that must name one (the paper's claims are
# about named policies): a name there is always one of these, never a string literal.
STRONG, WEAK, LINEAR, WARMUP, ADAPTIVE, LOCAL = "strong", "weak", "linear", "warmup", "adaptive", "local"


def register(cls):
    """Class decorator: add a policy under its `name` (a second one of that name is refused)."""
    policy = cls() if isinstance(cls, type) else cls
    if not policy.name or policy.name in _REGISTRY:
        raise ValueError(f"a policy needs a name not yet registered, got {policy.name!r}")
    _REGISTRY[policy.name] = policy
    return cls


@contextlib.contextmanager
def registered(policy: Policy):
    """The registry with `policy` in it for the block (a test's toy policy)."""
    register(policy)
    try:
        yield policy
    finally:
        _REGISTRY.pop(policy.name, None)


def get(name: str) -> Policy:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise PlanError(f"unknown mode {name!r}; choose one of {', '.join(names())}") from None


def names() -> tuple:
    """Every registered policy's name: the paper's four first, in the paper's order."""
    return tuple(_REGISTRY)


def paper() -> tuple:
    return tuple(n for n, p in _REGISTRY.items() if p.in_paper)


def beyond() -> tuple:
    return tuple(n for n, p in _REGISTRY.items() if not p.in_paper)


def goes_beyond_the_paper(modes) -> bool:
    """Whether a study of these modes runs one the paper did not (a beyond study)."""
    return bool(set(modes) & set(beyond()))


def large_batch() -> tuple:
    """The paper's policies whose global batch grows with N (Gahlot et al.'s data filter)."""
    return tuple(n for n, p in _REGISTRY.items() if p.in_paper and not p.splits_batch)


def plan(
    mode: str,
    workers: int,
    base_batch: int = PAPER_BATCH,
    base_lr: float = PAPER_LR,
    warmup_epochs: int = PAPER_WARMUP_EPOCHS,
    processes: Optional[int] = None,
    uneven: bool = False,
) -> ScalingPlan:
    """`get(mode).plan(...)`: the plan of the policy named `mode` on `workers` workers."""
    return get(mode).plan(workers, base_batch, base_lr, warmup_epochs, processes, uneven)


def elastic_problem(mode: str, epoch_definition: str, emulate_workers: int = 1) -> Optional[str]:
    """Why a run cannot be elastic (its N may change between epochs), or None.

    Epochs must be `global`: a `per_worker` epoch is N passes of the stream, so its length and
    the passes it covers would change with N, and strong scaling would leave its path. What a
    change of N does to each policy: docs/cluster.md."""
    problem = get(mode).elastic_problem()
    if problem:
        return problem
    if epoch_definition != "global":
        return (
            "elastic training needs epoch_definition: global (--set epoch_definition=global): a "
            "per_worker epoch is N passes of the data, so its length would change with N and strong "
            "scaling would leave the sequential path"
        )
    if emulate_workers > 1:
        return "--elastic runs real Horovod workers; it cannot be combined with --emulate-workers"
    return None


# ------------------------------------------------------------------------------------
# The paper's four (section IV)
# ------------------------------------------------------------------------------------
@register
class Strong(Policy):
    """Global batch B split in N disjoint parts of B/N, lr eta (paper eq. 2 with B' = B).
    The global batches are the sequential run's, so any N follows its path."""

    name, label, style = "strong", "strong scaling", ("tab:blue", "o")
    summary = "global batch B split over N workers (B / N each), lr eta"
    paper_figure = "fig4.png"  # the paper's Fig. 4
    splits_batch = True
    follows_sequential_path = True

    def can_split_unevenly(self) -> bool:
        return True  # the path is the sequential one whatever the parts


@register
class Weak(Policy):
    """Every worker takes B (global B*N), lr eta."""

    name, label, style = "weak", "weak scaling", ("tab:orange", "s")
    summary = "B per worker (global B * N), lr eta"
    paper_figure = "fig5.png"  # the paper's Fig. 5


@register
class Linear(Weak):
    """As weak, lr N*eta (Goyal et al.'s linear scaling rule)."""

    name, label, style = "linear", "linear rule", ("tab:red", "v")
    summary = "as weak, lr N * eta (Goyal et al.'s linear scaling rule)"
    paper_figure = ""  # the paper draws the loss against time for strong and weak only

    def peak_lr(self, base_lr: float, workers: int) -> float:
        return base_lr * workers


@register
class Warmup(Linear):
    """As linear, lr ramped from ~eta to N*eta over the warmup epochs.

    Follows Horovod's LearningRateWarmupCallback exactly: with initial_lr the already-scaled
    N*eta, W warmup epochs and S steps per epoch, for epoch < W

        lr = initial_lr / N * ((epoch + batch/S + 1/S) * (N - 1) / W + 1),

    so the first batch runs at eta * (1 + (N-1)/(S*W)) and the last warmup batch at N*eta.
    After warmup the callback stops touching the lr, which stays at N*eta."""

    name, label, style = "warmup", "warmup", ("tab:green", "^")
    summary = "as linear, lr ramped per batch from ~eta to N * eta over warmup_epochs"
    schedule = "warmup"

    def warmup_epochs(self, configured: int) -> int:
        return configured

    def lr_moves_within(self, p: ScalingPlan, epoch: int) -> bool:
        return epoch < p.warmup_epochs

    def lr_at(self, p: ScalingPlan, epoch: int, batch: int, steps_per_epoch: int) -> float:
        if epoch >= p.warmup_epochs:
            return p.peak_lr
        progress = epoch + batch / steps_per_epoch + 1.0 / steps_per_epoch
        return p.peak_lr / p.workers * (progress * (p.workers - 1) / p.warmup_epochs + 1.0)

    def describe(self, p: ScalingPlan, cfg, steps: Optional[int]) -> list:
        return [f"warmup: lr ramps per batch from ~{p.base_lr:g} to {p.peak_lr:g} over {p.warmup_epochs} epochs"]


# ------------------------------------------------------------------------------------
# Beyond the paper (Goldstein 2018, section 4): grow the batch when the gradient is too noisy
# to trust (De et al., AISTATS 2017), and let workers take H local steps between averagings.
# ------------------------------------------------------------------------------------
class _BeyondPaper(Policy):
    in_paper = False
    splits_batch = True  # both start from strong scaling's batches and lr
    varies_by_epoch = True
    averages_in_optimizer = False

    def elastic_problem(self) -> Optional[str]:
        return (
            f"{self.name} cannot be elastic: its per-step state (the growing batch, the workers' own "
            f"weights) is not restored when workers change; use strong, weak, linear or warmup"
        )


@register
class Adaptive(_BeyondPaper):
    """Starts as strong (global B, B/N each), lr eta; the per-worker batch then grows with the
    gradient's noise (rules.adaptive_batch) up to weak's B. The plan holds the start."""

    name, label, style = "adaptive", "adaptive batch", ("tab:purple", "D")
    summary = "starts as strong; the batch grows with the gradient's noise up to B per worker (De et al. 2017)"
    min_workers = 2
    grows_batch = True

    def too_few_workers(self, workers: int) -> str:
        return (
            "adaptive estimates the gradient's variance from the spread of the N workers' "
            "gradients, so it needs N >= 2 workers (one worker is the sequential model: "
            "use --mode strong)"
        )

    def describe(self, p: ScalingPlan, cfg, steps: Optional[int]) -> list:
        if cfg is None:
            return []
        return [
            f"adaptive: the per-worker batch grows from {p.per_worker_batch} up to {cfg.batch_size} when the "
            f"gradient's noise exceeds theta^2 = {cfg.adaptive_theta:g}^2 times its squared norm"
        ]

    def training_model(self, kit, model, p: ScalingPlan):
        return kit.noise_step(model, p)

    def callbacks(self, kit, p: ScalingPlan, steps: int, feeds) -> list:
        return [kit.adaptive_batch(feeds)]


@register
class Local(_BeyondPaper):
    """Strong's batches and lr, but workers average their weights every H steps instead of
    their gradients every step (rules.local_syncs_per_epoch)."""

    name, label, style = "local", "local SGD", ("tab:brown", "P")
    summary = "strong's batches; workers average weights and Adam moments every local_steps steps"
    broadcast_after_first_step = False
    # Local SGD averages the weights and Adam's two moments: three times the gradient's floats.
    allreduce_size = 3.0

    def describe(self, p: ScalingPlan, cfg, steps: Optional[int]) -> list:
        if cfg is None or steps is None:
            return []
        return [
            f"local: {p.workers} workers average weights and Adam moments every {cfg.local_steps} steps "
            f"({local_syncs_per_epoch(steps, cfg.local_steps)} allreduces per epoch instead of {steps})"
        ]

    def training_model(self, kit, model, p: ScalingPlan):
        return kit.local_step(model, p)

    def callbacks(self, kit, p: ScalingPlan, steps: int, feeds) -> list:
        return [kit.local_sync(steps)]

    def start(self, model) -> None:
        model.start_workers()
