"""`deepdensity plot RUN [RUN ...] --out curves.png`: the picture a person wants after a run.

Training loss, validation loss and the learning rate of each run, against epochs and against
passes over the training set, so that runs at different N (whose epochs hold different
amounts of data) line up; the target as a dashed line.

    python -m deepdensity.plot runs/s runs/w --out curves.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deepdensity.training.runs import read_metrics
from deepdensity.utils.args import parser
from deepdensity.utils.errors import UserError, command
from deepdensity.utils.files import check_output
from deepdensity.utils.plots import pyplot, save_figure


class RunError(UserError):
    """A folder that is not a run with epochs to draw."""


def passes(rows: list, n_train: int) -> list:
    """Passes over the training set at the end of each epoch: samples seen / training cubes
    (an epoch's steps x its global batch), so that any N, batch or policy compares."""
    out, seen = [], 0
    for r in rows:
        seen += r["steps"] * r["global_batch"]
        out.append(seen / n_train)
    return out


def run_label(name: str, settings: dict) -> str:
    """A run's legend: its policy and workers first (what a reader compares), its folder after."""
    if "mode" in settings and "workers" in settings:
        return f"{settings['mode']} N={settings['workers']} ({name})"
    return name


def data_note(runs: dict) -> str:
    """'' when every run trained on the same data; else a warning naming how many data sets."""
    seen = {(s.get("data_fingerprint") or s.get("data_path"), s.get("n_train")) for s, _ in runs.values()}
    seen.discard((None, None))
    return (
        ""
        if len(seen) <= 1
        else (f"note: these runs trained on {len(seen)} different data sets; their losses do not compare")
    )


def load_run(folder: Path) -> tuple:
    """(settings, metrics rows) of a run folder, or RunError saying what is missing."""
    if not (folder / "config.json").is_file():
        raise RunError(f"{folder} is not a run folder (no config.json); pass folders made by train.py --out")
    settings = json.loads((folder / "config.json").read_text())
    rows = read_metrics(folder) if (folder / "metrics.jsonl").exists() else []
    if not rows:
        raise RunError(f"{folder} has no finished epoch to draw yet")
    return settings, rows


def draw(runs: dict, out: Path, note: str = "") -> None:
    """One row per x axis (epochs, passes), columns: losses and lr; one colour per run."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharey="col")
    targets = set()
    for i, (name, (settings, rows)) in enumerate(runs.items()):
        color = plt.get_cmap("tab10")(i % 10)
        name = run_label(name, settings)
        xs = {"epoch": [r["epoch"] for r in rows], "passes over the training set": passes(rows, settings["n_train"])}
        for row, (label, x) in enumerate(xs.items()):
            loss_ax, lr_ax = axes[row]
            loss_ax.plot(x, [r["loss"] for r in rows], color=color, ls=":", marker=".", label=f"{name}: loss")
            loss_ax.plot(x, [r["val_loss"] for r in rows], color=color, marker="o", ms=3, label=f"{name}: val_loss")
            lr_ax.plot(x, [r["lr"] for r in rows], color=color, marker=".", label=name)
            loss_ax.set(xlabel=label, ylabel="MSLE", yscale="log")
            lr_ax.set(xlabel=label, ylabel="learning rate (end of epoch)")
        if settings.get("target_loss"):
            targets.add(settings["target_loss"])
    for t in sorted(targets):
        for ax in axes[:, 0]:
            ax.axhline(t, color="gray", ls="--", lw=1)
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole
    axes[0, 0].set_title("training (dotted) and validation loss; target dashed")
    if note:
        fig.suptitle(note, color="firebrick", fontsize=9)
    axes[0, 1].set_title("learning rate")
    axes[0, 1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    save_figure(fig, out)


@command
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.plot")
    ap.add_argument("runs", nargs="+", help="run folders (train.py --out)")
    ap.add_argument("--out", default="curves.png", help="the figure (.png)")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = ap.parse_args(argv)
    out = check_output(args.out, [], args.force, suffix=".png")
    runs = {}
    for folder in map(Path, args.runs):
        runs[folder.name if folder.name not in runs else str(folder)] = load_run(folder)
    note = data_note(runs)
    draw(runs, out, note)
    if note:
        print(note, file=sys.stderr)
    print(f"wrote {out}: {len(runs)} run(s), loss, val_loss and lr per epoch and per pass")
    return 0
