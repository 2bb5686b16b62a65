"""The run's data: the data set the shipped settings name, made where it is missing (rank 0 writes
it, the others wait), and the cubes as the model sees them (the study clock's step probe too)."""

from __future__ import annotations

import sys
from pathlib import Path

from deepdensity.config import Config
from deepdensity.data import synth
from deepdensity.data.cubes import load_cubes, to_density
from deepdensity.training import interrupts
from deepdensity.training.launch import Launch


def make_default_data(path: str, run: Launch) -> None:
    """A data set the shipped settings name (synth.DEFAULT_DATA) that does not exist yet is
    made: deterministic, written by rank 0 alone while the other workers wait."""
    recipe = synth.DEFAULT_DATA.get(path)
    if not run.ranks.any(run.is_chief and recipe is not None and not Path(path).exists()):
        return
    if run.is_chief:
        n, n_val, seed = recipe
        run.tell(
            f"making the default data set {path}: {n} synthetic cubes, {n_val} of them for validation, "
            f"seed {seed} (python -m deepdensity.data synth --out {path} --n {n} --val {n_val} --seed {seed})"
        )
        with interrupts.opened():  # seconds of NumPy, written atomically: a signal cuts it short
            synth.write_synthetic(path, n, n_val, seed, progress=run.say is print and sys.stderr.isatty())
    run.ranks.wait_for_chief()  # Horovod: the others wait here until rank 0's file is complete


def training_data(cfg: Config, say=print) -> tuple:
    """(cubes file, training cubes, validation cubes) as the model sees them (also the study's
    clock's step probe, whose steps cost what the real runs' steps cost only on the same data)."""
    cubes = load_cubes(cfg.data_path)
    train_x, val_x = cubes.train, cubes.val
    if cfg.max_train_cubes:
        train_x = train_x[: cfg.max_train_cubes]
    if cfg.intensity_scaling == "density":
        train_x, empty_train = to_density(train_x)
        val_x, empty_val = to_density(val_x)
        if empty_train + empty_val:
            say(f"warning: {empty_train + empty_val} cubes hold no mass (all air); used a uniform density")
    return cubes, train_x, val_x
