"""A run folder's files, read and written without TensorFlow (the study driver needs them too)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: never half a file."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_metrics(run_dir) -> list:
    """The per-epoch rows of a run's metrics.jsonl ([] when it has none yet)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
