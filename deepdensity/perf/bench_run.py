"""`deepdensity bench` once its flags are read (perf/bench.py): the figures it asks for,
measured and written into --out."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import tensorflow as tf

from deepdensity.config import load
from deepdensity.model.autoencoder import build_model
from deepdensity.perf import controller_figures
from deepdensity.perf.horovod_figures import distributed_report, horovod_figures, print_horovod
from deepdensity.perf.profile import print_profiles
from deepdensity.perf.step_figures import step_profile, step_report
from deepdensity.utils.files import write_atomic


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.horovod:
        cfg = load(args.config, [])
        figures = horovod_figures(
            args.config, build_model(cfg, 16, 3).count_params(), cfg.horovod_cycle_ms, pairs=args.pairs
        )
        print_horovod(figures)
        _write_entry(out, "horovod", figures)
        return 0
    if args.controllers:
        figures = controller_figures.controller_figures(args.config, pairs=args.pairs)
        controller_figures.print_controllers(figures)
        _write_entry(out, "controllers", figures)
        return 0
    if args.profile:
        cfg = load(args.config, [])
        threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
        profiles = [step_profile(cfg, b, threads, out.parent / f"{out.stem}-profile", args.repeats) for b in (1, 32)]
        print_profiles(profiles)
        _write_entry(out, "profiles", profiles)
        return 0
    report = step_report(args.config, args.repeats, out.parent / f"{out.stem}-profile")
    if not args.quick:
        report.update(distributed_report(args.config, report["weights"]))
        report["controllers"] = controller_figures.controller_figures(args.config)
        controller_figures.print_controllers(report["controllers"])
    write_atomic(out, json.dumps(report, indent=2))
    print(f"\nwritten: {out}")
    return 0


def _write_entry(out: Path, key: str, figures: dict) -> None:
    """Set one entry of a bench file, keeping the others (a full `make bench` writes them all)."""
    try:
        report = json.loads(out.read_text())
    except (OSError, ValueError):
        report = {}
    report = report if isinstance(report, dict) else {}
    write_atomic(out, json.dumps({**report, key: figures}, indent=2))
    print(f"\nwritten: {out} ({key})")
