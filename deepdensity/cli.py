"""`deepdensity <command> [args]` and `python -m deepdensity <command> [args]`: every tool
of the project behind one entry. `deepdensity <command> --help` shows a command's flags."""

from __future__ import annotations

import importlib
import sys

from deepdensity.utils.args import version

# command -> (module whose main(argv) runs it, one line of what it does)
COMMANDS = {
    "train": ("deepdensity.training.cli", "train one run under a scaling policy (also: python train.py)"),
    "launch": (
        "deepdensity.launch.horovodrun",
        "horovodrun with one error line and the rank's exit code (deepdensity launch -np 2 python train.py ...)",
    ),
    "data": ("deepdensity.data.cli", "make synthetic cubes, or cut cubes from DICOM / LUNA16 scans"),
    "repro": ("deepdensity.study.repro", "run the paper's scaling study and write its reports"),
    "report": ("deepdensity.study.rerender", "render a study's reports again from its study.json, without training"),
    "bench": ("deepdensity.perf.bench", "time a training step and its parts on this host, against the roof"),
    "encode": ("deepdensity.tools.encode", "the mixture a trained run infers for every cube"),
    "generate": ("deepdensity.tools.generate", "new nodule cubes from a trained run's latent space"),
    "plot": ("deepdensity.tools.plot", "draw runs' loss, val_loss and lr per epoch and per pass"),
    "filter": ("deepdensity.tools.filter", "filter a training set for large batches (Gahlot et al. 2020)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: deepdensity <command> [args]    (or: python -m deepdensity <command> [args])", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    lines += ["", "`deepdensity <command> --help` lists a command's flags and their defaults; --version the version."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(version())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: no command {name!r}; choose one of {', '.join(COMMANDS)} (deepdensity --help)", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[name][0]).main(rest)
