"""The process's peak memory after one training step of a model with K components at a batch:
the measurement behind training/memory.py's figures (docs/performance.md#memory).

    python -m deepdensity.perf.memory_probe --components 10000 20000 --batch 32 [--xla off]

Each K in a process of its own (a process's peak only grows); prints one JSON line each: the
TensorFlow and XLA setting, K, the batch, the model's weights, and the address space (VmPeak)
and resident set (VmHWM) after importing TensorFlow, after building the model and after the
step, in bytes; then the growth per sample and component between the first two K, less the
weights' part, as memory.py counts it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from deepdensity.config import load

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml"  # the settings the tests train


def peaks() -> dict:
    """This process's VmPeak and VmHWM (Linux's /proc/self/status), bytes."""
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmPeak", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
    return found


def one(components: int, batch: int, xla: str) -> dict:
    """One training step of the smoke settings with `components` at `batch`, in this process."""
    # TensorFlow in the child that measures (its import is part of the peak): the parent that
    # starts one child for each K imports none (tf.keras is Keras 2: deepdensity/__init__.py)
    import numpy as np
    import tensorflow as tf

    imported = peaks()
    from deepdensity.model.autoencoder import build_model, for_training, make_adam  # TensorFlow: as above

    cfg = load(str(SMOKE), [f"n_components={components}", f"xla={xla}"])
    model = for_training(build_model(cfg))
    model.compile(optimizer=make_adam(cfg, cfg.base_lr), loss="msle")
    built = peaks()
    cubes = np.random.default_rng(0).random((batch, 16, 16, 16, 1), dtype=np.float32) * 0.01
    model.fit(cubes, cubes, batch_size=batch, epochs=1, verbose=0)
    return {
        "tensorflow": tf.__version__,
        "xla": xla,
        "components": components,
        "batch": batch,
        "weights": model.count_params(),
        "imported": imported,
        "built": built,
        "step": peaks(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m deepdensity.perf.memory_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--components", type=int, nargs="+", default=[10000, 20000])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--xla", default="coefficients", choices=["coefficients", "off"])
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child's own measurement
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.components[0], args.batch, args.xla)))
        return 0
    rows = []
    for k in args.components:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "deepdensity.perf.memory_probe",
                "--one",
                "--components",
                str(k),
                "--batch",
                str(args.batch),
                "--xla",
                args.xla,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    if len(rows) >= 2:
        a, b = rows[0], rows[1]
        per_weight = (b["weights"] - a["weights"]) * 16  # weight, gradient, Adam's two slots
        growth = {
            key: (b["step"][key] - a["step"][key] - per_weight) / (b["components"] - a["components"]) / args.batch
            for key in ("VmPeak", "VmHWM")
        }
        print(
            json.dumps(
                {
                    "bytes a sample and component": {
                        "address space": round(growth["VmPeak"]),
                        "resident": round(growth["VmHWM"]),
                    }
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
