"""A study in TensorBoard that opens with data: `tensorboard --logdir RUNS/tensorboard`.

Each training run already logs its own curves under RUN/tb, but a study makes 50-100 runs and
TensorBoard selects none of them when a folder holds more than 40, so `--logdir runs` opens
on empty charts. This view is small enough to open selected:
  - one TensorBoard run per seed ("seed 0", "seed 1", ...), with a tag per cell
    ("val_loss/weak N=4"): the chart of a cell overlays its seeds;
  - a run "study" with the median passes to target of each mode against N (step = N).
The x axis of every curve is passes over the training set (the global model has seen the data
that many times), so that cells of different N compare. Strong scaling at N > 1 follows the
sequential run's path (a test shows it) and is drawn once, as the sequential run.
"""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path

from deepdensity.scaling import policies
from deepdensity.study.core import curves
from deepdensity.training.runs import read_metrics


def curve_points(rows: list, per_epoch: int) -> list:
    """[(passes, val_loss)] of a run's metrics rows: the validations inside an epoch
    (validate_every_pass) and at its end; non-finite losses left out (TensorBoard draws no gap)."""
    return sorted(
        {
            int(round(passes)): float(val)
            for passes, val in curves.validation_points(rows, per_epoch)
            if val is not None and math.isfinite(val)
        }.items()
    )


def view_series(record: dict, runs: Path) -> tuple:
    """({seed: {tag: [(passes, loss)]}}, {mode: [(N, median passes to target)]}) of a study's
    record and its runs folder."""
    definition = curves.epoch_definition(record.get("settings", {}))
    seeds, medians = {}, {}
    for c in record["cells"]:
        derived = policies.get(c["mode"]).follows_sequential_path and c["n"] > 1 and c["run"].startswith("seq-")
        tag = "val_loss/" + ("sequential N=1" if c["n"] == 1 else f"{c['mode']} N={c['n']}")
        # N = 1 of every mode is one sequential run: read it once
        if not derived and tag not in seeds.get(c["seed"], {}) and (runs / c["run"] / "metrics.jsonl").is_file():
            per_epoch = 1 if c["n"] == 1 else curves.passes_per_epoch(c["n"], definition)
            seeds.setdefault(c["seed"], {})[tag] = curve_points(read_metrics(runs / c["run"]), per_epoch)
    by_cell = {}
    for c in record["cells"]:
        by_cell.setdefault((c["mode"], c["n"]), []).append(c.get("passes_to_target"))
    for (mode, n), passes in sorted(by_cell.items()):
        reached = [p for p in passes if p is not None]
        if len(reached) * 2 > len(passes):  # a median only where most seeds reached the target
            medians.setdefault(mode, []).append((n, statistics.median(reached)))
    return seeds, medians


def write_view(record: dict, runs: Path, logdir: Path) -> Path:
    """Write the view's event files into `logdir` (replaced), and return it."""
    import tensorflow as tf

    seeds, medians = view_series(record, runs)
    shutil.rmtree(logdir, ignore_errors=True)
    for seed, tags in sorted(seeds.items()):
        with tf.summary.create_file_writer(str(logdir / f"seed {seed}")).as_default():
            for tag, points in sorted(tags.items()):
                for passes, loss in points:
                    tf.summary.scalar(tag, loss, step=passes)
    with tf.summary.create_file_writer(str(logdir / "study")).as_default():
        for mode, points in sorted(medians.items()):
            for n, passes in points:
                tf.summary.scalar(f"median passes to target/{mode}", passes, step=n)
    return logdir
