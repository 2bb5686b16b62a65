"""Who this process is in a run, and what the run's policy asks of it (the plan at the world
size Horovod reports now). Made once at start-up, and again after an elastic change of N."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import tensorflow as tf

from deepdensity.config import Config, ConfigError, run_plan
from deepdensity.scaling import policies, rules
from deepdensity.scaling.policy import ScalingPlan
from deepdensity.scaling.rules import PlanError
from deepdensity.training import dist, interrupts
from deepdensity.training.agree import Ranks


@dataclass
class Launch:
    """This process's part in the run."""

    backend: object  # dist.Horovod, or dist.Single without Horovod
    threads: int
    rank: int
    processes: int  # Horovod's world size
    workers: int  # N: the world size, or the emulated N
    p: ScalingPlan
    out: Optional[Path]
    say: object  # print on rank 0 unless quiet, else nothing
    tell: object  # print on rank 0, quiet or not (how the run ended)
    elastic: bool = False  # N may change between epochs (Horovod elastic)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def writes(self) -> bool:
        """Does this process write the run folder? Rank 0 alone, and only with an --out."""
        return self.is_chief and self.out is not None

    @property
    def ranks(self) -> Ranks:
        return Ranks(self.backend)


def launch(
    cfg: Config, mode: str, out_dir: Optional[str], emulate_workers: int, verbose: bool, elastic: bool = False
) -> Launch:
    """Start Horovod (or one process without it) and work out this process's part."""
    if emulate_workers < 1:
        raise ConfigError("--emulate-workers must be >= 1")
    try:
        problem = policies.elastic_problem(mode, cfg.epoch_definition, emulate_workers) if elastic else None
    except PlanError as e:
        raise ConfigError(str(e)) from None
    if problem:
        raise ConfigError(problem)
    # Horovod: init and pin (device and thread share) before any other TensorFlow work.
    backend, threads = interrupts.while_waiting(lambda: dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms))
    quiet_python_logs(backend.rank())
    processes = backend.size()
    if emulate_workers > 1 and processes > 1:
        raise ConfigError("--emulate-workers is for one process; under horovodrun the workers are real")
    if elastic and not backend.elastic_launched():
        raise ConfigError(
            "--elastic needs an elastic launch: horovodrun -np N --min-np M --max-np N "
            "--host-discovery-script SCRIPT ... (docs/cluster.md)"
        )
    return as_launch(
        cfg,
        mode,
        backend,
        threads,
        rules.workers(processes, emulate_workers),
        Path(out_dir) if out_dir else None,
        verbose,
        elastic,
    )


def quiet_python_logs(rank: int) -> None:
    """Keras's "Callback method `on_train_batch_end` is slow compared to the batch time" is
    dropped: it came between the progress lines of the first epoch, whose first step waits in
    Horovod's broadcast of the weights (on rank 0 as on the others). On a rank other than 0,
    TensorFlow's Python warnings go altogether: rank 0 alone prints."""
    logger = tf.get_logger()
    if not any(isinstance(f, _SlowCallbackFilter) for f in logger.filters):
        logger.addFilter(_SlowCallbackFilter())
    if rank > 0:
        logger.setLevel("ERROR")  # Horovod: rank 0 alone prints


class _SlowCallbackFilter:
    def filter(self, record) -> bool:
        return "is slow compared to the batch time" not in str(record.msg)


def as_launch(
    cfg: Config, mode: str, backend, threads: int, workers: int, out: Optional[Path], verbose: bool, elastic: bool
) -> Launch:
    """This process's part in the run at the world size Horovod reports now."""
    rank, processes = backend.rank(), backend.size()
    # Horovod: scale batch and lr by the policy (all arithmetic lives in scaling/policies.py).
    p = run_plan(cfg, mode, workers, processes, uneven=elastic)
    silent = lambda *a, **k: None  # noqa: E731
    say = print if (verbose and rank == 0) else silent
    tell = print if rank == 0 else silent
    return Launch(backend, threads, rank, processes, workers, p, out, say, tell, elastic)
