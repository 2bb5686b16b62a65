"""Which data a run trained on: the files the cubes of a data file are read from (itself, then
those its external links, virtual datasets and raw storage reach) and the digest of their bytes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import h5py

from deepdensity.data.cubes import DataError, check_regular_data, check_structure
from deepdensity.utils.errors import shown


def data_files(path) -> list:
    """The files the cubes of data file `path` are read from: `path`, then those its splits
    reach through external links, virtual datasets and external raw storage. Just `path` when
    its structure is broken (load_cubes then says how)."""
    check_regular_data(path)
    try:
        with h5py.File(path, "r") as f:
            return check_structure(f, shown(path), "")
    except (OSError, DataError):
        return [Path(path)]


def data_fingerprint(path) -> str:
    """'size:sha256' of the data file's bytes, then '+size:sha256' of every other file its cubes
    are read from (data_files): replacing a file an external link points to changes it. A file
    that links to nothing keeps the fingerprint it had before links were followed."""
    return "+".join(_file_digest(p) for p in data_files(path))


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{os.path.getsize(path)}:{h.hexdigest()}"
