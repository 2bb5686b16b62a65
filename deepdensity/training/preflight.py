"""What a run is checked for before Horovod starts or anything is written: the policy's plan at
this N, the data's steps per epoch, and the memory one process must hold (trainer.py calls it
first; memory.py the model's part). No TensorFlow here."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from deepdensity.config import Config, ConfigError, run_plan
from deepdensity.data import synth
from deepdensity.data.cubes import check_regular_data
from deepdensity.scaling import rules
from deepdensity.training import memory
from deepdensity.utils.errors import launcher_size, shown
from deepdensity.utils.machine import memory_bytes, size_text
from deepdensity.utils.stack import found, release


def check_sizes(cfg: Config, mode: str, emulate_workers: int, resume: bool = False, elastic: bool = False) -> None:
    """Before Horovod starts or anything is written: the policy's plan at this N and the data's
    steps per epoch (the errors the run would meet later, after making its folder and its default
    data), and what one process must hold against this machine's memory: one per-process batch
    of float32 cubes, gathered whole before max_pass_batch slices it, and the sample order of
    the run (int64, N passes of the data an epoch under per_worker epochs; built for all epochs
    at once, but adaptive's one epoch at a time, and a resume's only for the epochs left, counted
    here as one). Both are lower bounds of what the run holds, so a run refused here could never
    have trained here (--emulate-workers 10^12 asked for hundreds of petabytes). Data that cannot
    be sized from its metadata is left to the loader's checks."""
    processes = launcher_size()
    workers = rules.workers(processes, emulate_workers)
    shape = data_shape(cfg.data_path)
    if workers < 1 or (emulate_workers > 1 and processes > 1) or elastic or shape is None:
        return  # launch() and load_cubes() say what is wrong; an elastic run's N is real workers
    n_train, voxels = shape
    n_used = min(n_train, cfg.max_train_cubes or n_train)
    p = run_plan(cfg, mode, workers, processes)
    try:
        steps = rules.steps_per_epoch(n_used, p, cfg.epoch_definition)
    except rules.PlanError as e:
        raise ConfigError(f"{shown(cfg.data_path)}: {e}") from None
    epochs = 1 if p.policy.grows_batch or resume else cfg.max_epochs
    batch, order = p.per_process_batch * voxels * 4, epochs * steps * p.global_batch * 8
    need, have = batch + order, memory_bytes()
    if have is None or need <= have:
        per_pass = p.per_process_batch // rules.grad_slices(p.per_process_batch, cfg.max_pass_batch)
        refused = memory.check(cfg, per_pass, need, release(found().tensorflow), WHAT_FITS, voxels)
        if refused:
            raise ConfigError(refused)
        return
    n_text = f"--emulate-workers {workers}" if emulate_workers > 1 else f"N = {workers}"
    raise ConfigError(
        f"{n_text} is more than this machine can hold: one process's batch of "
        f"{p.per_process_batch} cubes ({size_text(batch)}) and the run's sample order, {epochs} "
        f"epoch{'s' if epochs > 1 else ''} of {steps} steps of {p.global_batch} ({size_text(order)}), "
        f"need at least {size_text(need)} of memory; it has {size_text(have)}: at most about "
        f"N = {max(1, int(workers * have / need))} fits"
    )


# what a run refused for its memory can change
WHAT_FITS = (
    "lower n_components, or the samples of a pass (batch_size, or max_pass_batch where one process "
    "emulates workers); docs/performance.md#memory"
)


def data_shape(path: str) -> Optional[tuple]:
    """(training cubes, voxels of a cube) from a data file's metadata, or from the recipe of a
    default data set not made yet; None when neither says (the loader then names the problem)."""
    if not Path(path).exists():
        recipe = synth.DEFAULT_DATA.get(path)
        return (recipe[0] - recipe[1], 16**3) if recipe else None  # write_synthetic's default cube
    import h5py

    check_regular_data(path)
    try:
        with h5py.File(path, "r") as f:
            shape = f["train/cubes"].shape
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return None
    return (int(shape[0]), int(np.prod(shape[1:]))) if shape and len(shape) > 1 else None
