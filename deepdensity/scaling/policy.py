"""What a scaling policy is: the base class (a synchronous data-parallel policy, whose parts the
policies of policies.py override) and the ScalingPlan it computes for a run on N workers. Free
of TensorFlow, as policies.py is: the study and the tables read plans without a framework."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deepdensity.scaling.rules import PlanError, divisors

# The paper's sequential model (section VI): base batch B, eta, the warmup's epochs (config.py's defaults)
PAPER_BATCH, PAPER_LR, PAPER_WARMUP_EPOCHS = 32, 0.00105, 5


@dataclass(frozen=True)
class ScalingPlan:
    """What a policy asks of a run on N workers, computed once at start-up."""

    policy: "Policy"
    workers: int
    processes: int
    base_batch: int
    base_lr: float
    global_batch: int
    per_worker_batch: int
    per_process_batch: int
    peak_lr: float
    warmup_epochs: int

    @property
    def mode(self) -> str:
        """The policy's name, as `--mode` and the run folder's files spell it."""
        return self.policy.name

    def lr_at(self, epoch: int, batch: int, steps_per_epoch: int) -> float:
        """The lr of batch `batch` (0-based) of epoch `epoch` (0-based)."""
        if steps_per_epoch < 1:
            raise ValueError("steps_per_epoch must be >= 1")
        return self.policy.lr_at(self, epoch, batch, steps_per_epoch)

    def describe(self, cfg=None, steps: Optional[int] = None) -> str:
        """The scaling arithmetic, printed at start-up so a run says what it does."""
        uneven = f" (or {self.per_worker_batch - 1})" if self.global_batch % self.workers else ""
        lines = [
            f"mode={self.mode}  workers N={self.workers}  processes={self.processes}",
            f"global_batch = {self.global_batch}  per_worker_batch = {self.per_worker_batch}{uneven}"
            f"  per_process_batch = {self.per_process_batch}{uneven}",
            f"lr = {self.peak_lr:g}  (base {self.base_lr:g} x {self.peak_lr / self.base_lr:g})",
        ]
        return "\n".join(lines + self.policy.describe(self, cfg, steps))


class Policy:
    """A synchronous data-parallel policy: every step, N workers average their gradients
    (Horovod's DistributedOptimizer) and apply one update. Subclasses override what differs."""

    name = ""
    summary = ""  # one line for --help and the docs' table
    label = ""  # how reports name it (defaults to `name`)
    style = ("tab:gray", "x")  # colour and marker in the study's figures
    in_paper = True  # one of the paper's four (section IV)
    paper_figure = ""  # the paper's loss-against-time figure of it (reports draw ours beside it)
    splits_batch = False  # the global batch B is split over N (else B per worker)
    follows_sequential_path = False  # any N takes the sequential run's steps (strong scaling)
    varies_by_epoch = False  # its batch or its allreduces change from epoch to epoch
    averages_in_optimizer = True  # Horovod's DistributedOptimizer averages; else the step does
    broadcast_after_first_step = True  # Horovod's broadcast callback; local SGD's first step is local
    allreduce_size = 1.0  # floats per allreduce, in gradients (the clock's allreduce term)
    grows_batch = False  # the batch grows during the run (an epoch's feed is made at its start)
    min_workers = 1
    schedule = "constant"  # lr schedule, as the failure table names it

    # --- the arithmetic (pure) ---------------------------------------------------------
    def global_batch(self, base_batch: int, workers: int) -> int:
        return base_batch * workers

    def peak_lr(self, base_lr: float, workers: int) -> float:
        return base_lr

    def warmup_epochs(self, configured: int) -> int:
        return 0

    def lr_at(self, p: ScalingPlan, epoch: int, batch: int, steps_per_epoch: int) -> float:
        return p.peak_lr

    def lr_moves_within(self, p: ScalingPlan, epoch: int) -> bool:
        """Does the lr change from batch to batch in this epoch (so it is set every batch)?"""
        return False

    def plan(
        self,
        workers: int,
        base_batch: int = PAPER_BATCH,
        base_lr: float = PAPER_LR,
        warmup_epochs: int = PAPER_WARMUP_EPOCHS,
        processes: Optional[int] = None,
        uneven: bool = False,
    ) -> ScalingPlan:
        """Global batch, per-worker batch and lr on `workers` workers.

        `processes` defaults to `workers`; with fewer processes (emulation) each process
        takes global_batch / processes samples, which must divide evenly. `uneven` (elastic
        training, where N is whatever workers are left): a policy that splits the batch may
        split B over an N that does not divide it, in parts of B // N and one more
        (rules.batch_slice); per_worker_batch and per_process_batch are then the larger part.
        """
        processes = _check_plan_inputs(workers, base_batch, base_lr, warmup_epochs, processes)
        if workers < self.min_workers:
            raise PlanError(self.too_few_workers(workers))
        if (
            self.splits_batch
            and base_batch % workers
            and not (uneven and self.can_split_unevenly() and processes == workers)
        ):
            raise PlanError(
                f"{self.name} splits the global batch of {base_batch} over {workers} workers, "
                f"but {workers} does not divide {base_batch}; use a worker count that divides it "
                f"(e.g. {', '.join(str(d) for d in divisors(base_batch))}) or change batch_size"
            )
        global_batch = base_batch if self.splits_batch else self.global_batch(base_batch, workers)
        return ScalingPlan(
            policy=self,
            workers=workers,
            processes=processes,
            base_batch=base_batch,
            base_lr=base_lr,
            global_batch=global_batch,
            per_worker_batch=-(-global_batch // workers),
            per_process_batch=-(-global_batch // processes),
            peak_lr=self.peak_lr(base_lr, workers),
            warmup_epochs=self.warmup_epochs(warmup_epochs),
        )

    def too_few_workers(self, workers: int) -> str:
        return f"{self.name} needs N >= {self.min_workers} workers, got {workers}"

    def can_split_unevenly(self) -> bool:
        """May an elastic run split B over an N that does not divide it (rules.slice_weight)?"""
        return False

    def elastic_problem(self) -> Optional[str]:
        """Why this policy cannot run elastic (N changing between epochs), or None."""
        return None

    def describe(self, p: ScalingPlan, cfg, steps: Optional[int]) -> list:
        """Lines the start-up description adds for this policy."""
        return []

    @property
    def display(self) -> str:
        return self.label or self.name

    # --- the training side (the kit builds the TensorFlow parts) -----------------------
    def training_model(self, kit, model, p: ScalingPlan):
        """The model with this policy's training step."""
        return kit.synchronous_step(model, p)

    def callbacks(self, kit, p: ScalingPlan, steps: int, feeds) -> list:
        """Keras callbacks of this policy's own, after the lr's and before the run record's.
        `feeds`: this call of fit's data (training/feeds.py), for a callback that changes it."""
        return []

    def start(self, model) -> None:
        """After every worker holds rank 0's weights, before the first step."""


def _check_plan_inputs(workers, base_batch, base_lr, warmup_epochs, processes) -> int:
    if not isinstance(workers, int) or workers < 1:
        raise PlanError(f"the number of workers must be a positive integer, got {workers!r}")
    if not isinstance(base_batch, int) or base_batch < 1:
        raise PlanError(f"batch_size must be a positive integer, got {base_batch!r}")
    if not base_lr > 0:
        raise PlanError(f"base_lr must be positive, got {base_lr!r}")
    if warmup_epochs < 0:
        raise PlanError(f"warmup_epochs must be >= 0, got {warmup_epochs!r}")
    processes = workers if processes is None else processes
    if processes < 1 or workers % processes:
        raise PlanError(f"{processes} processes cannot share the work of {workers} workers evenly")
    return processes
