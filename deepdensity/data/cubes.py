"""Nodule cubes on disk: the HDF5 layout and its loader.

HDF5 layout (format "deepdensity-cubes", version 1), written by `synth` and by the
DICOM / LUNA16 ingestion alike:

    /                 attrs: format, format_version, cube_size, ndim, spacing_mm,
                             hu_window (lo, hi), source ("synthetic" | "dicom" | "luna16"),
                             created_by, created_utc, plus source-specific attrs
    /train/cubes      float32 (N, G, G, G), HU windowed to [0, 1] (0 = air)
    /train/seriesuid  utf-8 strings (N,)   scan each cube was cut from
    /train/world_xyz  float64 (N, 3)       nodule centre in world coordinates, mm
    /train/diameter_mm float64 (N,)
    /val/...          the same, for the validation cubes (256 in the paper)


The writer is in deepdensity/data/writer.py, the fingerprint of the files a run read in
deepdensity/data/fingerprint.py, and the commands that make such files in deepdensity/data/cli.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import h5py
import numpy as np

from deepdensity.utils.errors import UserError, one_line, shell_word, shown
from deepdensity.utils.files import is_hdf5_lock_error, special_kind

FORMAT = "deepdensity-cubes"
FORMAT_VERSION = 1
HU_AIR, HU_WINDOW = -1000.0, (-1000.0, 400.0)
# Cubes must hold windowed intensities in [0, 1]; this much float rounding is let through.
UNIT_SLACK = 1e-6


class DataError(UserError):
    """Unusable data: reported as one line naming the file and the fix, exit status 2."""


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------
@dataclass
class Cubes:
    train: np.ndarray  # (N, G, ..., G) float32 in [0, 1]
    val: np.ndarray
    attrs: dict

    @property
    def grid_size(self) -> int:
        return self.train.shape[1]

    @property
    def ndim(self) -> int:
        return self.train.ndim - 1


def load_cubes(path, expect_grid: Optional[int] = None, need: tuple = ("train", "val")) -> Cubes:
    """Read and check a cubes file; every problem is a DataError saying what to do. `need`:
    the splits that must hold cubes (training needs both; encoding one split only that one).
    The file's structure is checked before a value is read (check_structure)."""
    path, name = Path(path), shown(path)  # name: the path as given, a newline seen as one
    made = path if path.suffix == ".h5" else path.with_suffix(".h5")  # synth writes .h5 files only
    make = f"make one with: python -m deepdensity.data synth --out {shell_word(made)}" + (
        "" if made == path else f" and set data_path={shell_word(made)}"
    )
    if not path.exists():
        raise DataError(f"data file {name} does not exist; {make} (or set data_path)")
    check_regular_data(path)
    if not h5py.is_hdf5(path):
        raise DataError(f"data file {name} is not an HDF5 file; {make}")
    try:
        with h5py.File(path, "r") as f:
            check_structure(f, name, make)
            attrs = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()}
            arrays = {split: f[split]["cubes"][...] for split in ("train", "val")}
    except OSError as e:
        raise DataError(_unreadable(path, e)) from None
    for split, a in arrays.items():
        _check_values(name, split, a, split in need)
    if arrays["train"].shape[1:] != arrays["val"].shape[1:]:
        raise DataError(
            f"{name}: train cubes {arrays['train'].shape[1:]} and val cubes {arrays['val'].shape[1:]} differ in shape"
        )
    if expect_grid is not None and arrays["train"].shape[1] != expect_grid:
        raise DataError(f"{name}: cubes are {arrays['train'].shape[1]} voxels wide, the model expects {expect_grid}")
    return Cubes(arrays["train"].astype(np.float32), arrays["val"].astype(np.float32), attrs)


def _check_values(name: str, split: str, a: np.ndarray, needed: bool) -> None:
    """One split's cubes as read: their shape, and intensities that are finite and in [0, 1]."""
    if a.ndim not in (2, 3, 4) or len(set(a.shape[1:])) != 1:
        raise DataError(
            f"{name}: /{split}/cubes has shape {a.shape}; expected (N, G, G, G) "
            f"(or (N, G, G) / (N, G) for 2-D and 1-D data)"
        )
    if a.shape[0] == 0:
        if needed:
            raise DataError(
                f"{name}: /{split}/cubes is empty; training needs both splits (was it prepared with --val 0?)"
            )
        return
    if not np.isfinite(a).all():
        raise DataError(f"{name}: /{split}/cubes holds NaN or inf values; re-create the file")
    lo, hi = float(a.min()), float(a.max())
    if lo < -UNIT_SLACK or hi > 1 + UNIT_SLACK:
        raise DataError(
            f"{name}: /{split}/cubes holds values in [{lo:g}, {hi:g}], not intensities "
            f"windowed to [0, 1]{' (raw Hounsfield units?)' if lo <= -100 or hi >= 100 else ''}; "
            f"cut cubes with `python -m deepdensity.data prepare`, which windows "
            f"{HU_WINDOW[0]:g}..{HU_WINDOW[1]:g} HU to [0, 1]"
        )


def _unreadable(path: Path, e: OSError) -> str:
    """Why an HDF5 file that exists cannot be read, and what to do (never: write a new file over
    it, which would replace data the user may have prepared from scans)."""
    if is_hdf5_lock_error(e):
        return (
            f"data file {shown(path)} is open for writing in another process (HDF5 locks it); wait until that "
            f"process (a synth, prepare or filter still writing it) has finished, then run again"
        )
    return (
        f"data file {shown(path)} cannot be read ({e}); is it truncated (an interrupted copy)? copy it again, or "
        f"re-create it with the command that made it (its created_by attribute says which)"
    )


def check_regular_data(path) -> None:
    """A data path that is a folder, a FIFO, a socket or a device is refused in one line before
    anything opens it (HDF5 would wait on a FIFO for a writer that never comes)."""
    kind = special_kind(path)
    if kind:
        raise DataError(f"data file {shown(path)} is {kind}, not a file; set data_path to an HDF5 file of cubes")


def read_columns(path, split: str) -> dict:
    """The per-cube columns beside a split's cubes (seriesuid, world_xyz, diameter_mm, ...),
    those the file has; call after load_cubes has checked the file. A column of the layout in
    another form (world_xyz as strings, a diameter per cube missing) is a DataError."""
    name = shown(path)
    with h5py.File(path, "r") as f:
        g, n = f[split], len(f[split]["cubes"])
        for k, shape in (("world_xyz", (n, 3)), ("diameter_mm", (n,))):
            what = _elements(g[k].dtype) if k in g else "real numbers"
            if k in g and (g[k].shape != shape or not (what == "real numbers" or what.startswith("integers"))):
                raise DataError(
                    f"{name}: /{split}/{k} holds {what} of shape {g[k].shape}; the layout has "
                    f"real numbers (float64) of shape {shape}, one row per cube"
                )
        columns = {}
        for k in g:
            if k == "cubes" or len(g[k].shape) < 1:
                continue
            try:
                columns[k] = g[k].asstr()[...] if h5py.check_string_dtype(g[k].dtype) else g[k][...]
            except (OSError, TypeError, ValueError) as e:
                raise DataError(f"{name}: /{split}/{shown(k)} cannot be read ({_h5_reason(e)})") from None
    return columns


# --------------------------------------------------------------------------------------
# Structure: what load_cubes checks before it reads a value (and the files fingerprint.py digests)
# --------------------------------------------------------------------------------------
def check_structure(f: h5py.File, name: str, make: str) -> list:
    """The file's objects as the layout names them, or a DataError naming the object: every
    link leads somewhere; /train and /val are groups of datasets only; the cubes are real
    numbers; values stored in other files (a virtual dataset's sources, external raw files)
    are there. Returns the files the splits' bytes are read from, this one first."""
    _check_links(f, name)
    files = [Path(f.filename)]
    for split in ("train", "val"):
        group = f.get(split)
        if group is None or (isinstance(group, h5py.Group) and "cubes" not in group):
            raise DataError(
                f"data file {name} has no /{split}/cubes dataset; it is not in deepdensity's layout ({make})"
            )
        if not isinstance(group, h5py.Group):
            raise DataError(
                f"{name}: /{split} is {_kind(group)} where deepdensity's layout has a group "
                f"(of datasets: cubes, seriesuid, world_xyz, diameter_mm)"
            )
        files.append(Path(group.file.filename))
        for key in group:
            obj, where = group[key], f"/{split}/{shown(key)}"
            if not isinstance(obj, h5py.Dataset):
                raise DataError(
                    f"{name}: {where} is {_kind(obj)} where deepdensity's layout has a dataset "
                    f"(/{split} holds cubes and one row per cube: seriesuid, world_xyz, ...)"
                )
            files += [Path(obj.file.filename)] + _stored_in(obj, name, where)
        _check_dtype(group["cubes"].dtype, name, f"/{split}/cubes")
    unique = {}
    for p in files:
        unique.setdefault(os.path.realpath(p), p)
    return [Path(p) for p in unique]


def _check_links(f: h5py.File, name: str) -> None:
    """Every link in the file, external files' included, leads to an object: h5py raises a
    KeyError at the first use of one that does not, and tools that list a group meet them all."""
    seen, todo = set(), [(f, "")]
    while todo:
        group, at = todo.pop()
        if group.id in seen:  # a link back up the tree: each group once
            continue
        seen.add(group.id)
        for key in group:
            where = f"{at}/{shown(key)}"
            try:
                obj = group[key]
            except (KeyError, OSError, ValueError, RuntimeError) as e:
                raise DataError(_broken_link(name, where, group.get(key, getlink=True), e)) from None
            if isinstance(obj, h5py.Group):
                todo.append((obj, where))


def _broken_link(name: str, where: str, link, e: Exception) -> str:
    reason = _h5_reason(e)
    if isinstance(link, h5py.SoftLink):
        return (
            f"{name}: {where} is a soft link to {shown(link.path)}, which leads nowhere ({reason}); "
            f"point it at an object of the file, or store the data there"
        )
    if isinstance(link, h5py.ExternalLink):
        return (
            f"{name}: {where} is an external link to {shown(link.path)} in {shown(link.filename)}, which "
            f"cannot be followed ({reason}); put that file where the link expects it (HDF5 looks beside "
            f"{name}, then in the current folder), or store the data in {name} itself"
        )
    return f"{name}: {where} cannot be opened ({reason}); the file is damaged: copy or re-create it"


def _h5_reason(e: Exception) -> str:
    """HDF5's own reason, the last parenthesis of h5py's message ("Unable to synchronously open
    object (component not found)" -> "component not found")."""
    text = str(e).strip("'\"")
    inner = text[text.rfind("(") + 1 : text.rfind(")")] if text.endswith(")") and "(" in text else text
    return one_line(inner or type(e).__name__)


def _kind(obj) -> str:
    return (
        "a group"
        if isinstance(obj, h5py.Group)
        else "a dataset"
        if isinstance(obj, h5py.Dataset)
        else "a named datatype"
    )


def _check_dtype(dtype: np.dtype, name: str, where: str) -> None:
    """Cubes are real numbers (float32 in the layout; other float widths are read as float32).
    Integers are refused, not converted: 0/1, 0..255 and Hounsfield units all come as integers,
    and which [0, 1] they stand for only the user knows (docs/data.md says how to convert)."""
    what = _elements(dtype)
    if what == "real numbers":
        return
    if what.startswith("integers"):
        lo, hi = HU_WINDOW
        raise DataError(
            f"{name}: {where} holds {what}, which are not converted on the way in; "
            f"store the cubes as float32 intensities in [0, 1] (a 0/1 mask as it is, 8-bit values "
            f"/ 255, Hounsfield units windowed {lo:g}..{hi:g} to [0, 1]), as docs/data.md shows"
        )
    raise DataError(f"{name}: {where} holds {what}; expected real intensities in [0, 1] (float32)")


def _elements(dtype: np.dtype) -> str:
    """What an HDF5 dataset's elements are, in words: "real numbers", "integers (int8)", "strings"..."""
    base = dtype.base if dtype.subdtype else dtype
    return (
        "real numbers"
        if base.kind == "f"
        else f"integers ({base})"
        if base.kind in "iub"
        else "complex numbers"
        if base.kind == "c"
        else "strings"
        if base.kind in "SU" or h5py.check_string_dtype(base)
        else "object references"
        if h5py.check_ref_dtype(base)
        else "variable-length sequences"
        if h5py.check_vlen_dtype(base)
        else f"compound records (fields {', '.join(map(shown, base.names))})"
        if base.names
        else "opaque bytes"
    )


def _stored_in(dset: h5py.Dataset, name: str, where: str) -> list:
    """The other files `dset`'s values are read from, found where HDF5 looks: a virtual
    dataset's sources (beside the file, then in the current folder; a missing one would read
    as fill values without a word) and external raw files (in the current folder)."""
    beside = Path(dset.file.filename).parent
    files = []
    for source in dset.virtual_sources() if dset.is_virtual else []:
        if source.file_name == ".":
            continue
        named = Path(source.file_name)
        places = (named, beside / named.name, Path(named.name)) if named.is_absolute() else (beside / named, named)
        found = next((p for p in places if _holds(p, source.dset_name)), None)
        if found is None:
            raise DataError(
                f"{name}: {where} is a virtual dataset whose source {shown(source.dset_name)} in "
                f"{shown(source.file_name)} is missing (HDF5 would read fill values in its place); "
                f"put that file where it was, or store the data in {name} itself"
            )
        files.append(found)
    for raw, _, _ in dset.external or []:
        if not Path(raw).is_file():
            raise DataError(
                f"{name}: {where} keeps its values in the external file {shown(raw)}, which is not "
                f"in the current folder (HDF5 reads it from there); run from the folder that holds "
                f"it, or store the data in {name} itself"
            )
        files.append(Path(raw))
    return files


def _holds(path: Path, dataset: str) -> bool:
    try:
        with h5py.File(path, "r") as f:
            return isinstance(f.get(dataset), h5py.Dataset)
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------------------
# Densities: what the model is trained on
# --------------------------------------------------------------------------------------
def to_density(cubes: np.ndarray) -> tuple:
    """Scale each cube so its voxels integrate to 1 over [-1, 1]^n (cell volume (2/G)^n).

    Returns (scaled, n_empty): a cube with no mass (all air) becomes the uniform
    density 2^-n instead of dividing by zero, and is counted.
    """
    ndim = cubes.ndim - 1
    cell = (2.0 / cubes.shape[1]) ** ndim
    mass = cubes.reshape(len(cubes), -1).sum(axis=1) * cell
    empty = mass <= 0
    scaled = cubes / np.where(empty, 1.0, mass).reshape((-1,) + (1,) * ndim)
    scaled[empty] = 2.0**-ndim
    return scaled.astype(np.float32), int(empty.sum())


def input_independent_loss(train_density: np.ndarray, val_density: np.ndarray) -> float:
    """The validation MSLE (the training loss) of a model that ignores its input and
    renders the training set's mean density for every cube: the level at which a run that
    has learnt nothing about the individual nodule settles (the study's collapse level)."""
    mean = train_density.astype(np.float64).mean(axis=0)
    diff = np.log1p(val_density.astype(np.float64)) - np.log1p(mean)
    return float(np.mean(diff**2))
