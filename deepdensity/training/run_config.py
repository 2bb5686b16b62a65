"""config.json: what a run records of itself as it starts, the settings, the policy's arithmetic
at its N, its data and the software it runs on."""

from __future__ import annotations

import os
import platform
from typing import Optional

import numpy as np
import tensorflow as tf

from deepdensity.config import Config
from deepdensity.launch import controllers
from deepdensity.training import dist
from deepdensity.training.launch import Launch
from deepdensity.utils.stack import keras_of


def run_config(
    cfg: Config, run: Launch, emulate_workers: int, steps: int, n_train: int, n_val: int, fingerprint: Optional[str]
) -> dict:
    """config.json: the settings, the policy's arithmetic, the data and the software."""
    p = run.p
    return {
        **cfg.to_dict(),
        "mode": p.mode,
        "world_size": run.processes,
        "workers": run.workers,
        "emulated": emulate_workers > 1,
        "global_batch": p.global_batch,
        "per_worker_batch": p.per_worker_batch,
        "per_process_batch": p.per_process_batch,
        "lr": p.peak_lr,
        "steps_per_epoch": steps,
        "n_train": n_train,
        "n_val": n_val,
        "threads_per_process": run.threads,
        "data_fingerprint": fingerprint,
        "elastic": run.elastic,
        # Horovod: the controller and transport the launcher gave the ranks (none: one process)
        "launch": controllers.of_this_run(dict(os.environ)),
        "versions": versions(),
    }


def versions() -> dict:
    """The software and the machine the run runs on (the study's ledger reads them)."""
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras_of(tf),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
        "horovod": dist.horovod_version(),
    }
