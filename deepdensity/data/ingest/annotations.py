"""Nodule annotations: LUNA16's CSV (seriesuid, world x y z in mm, diameter), as LUNA16 writes
it or as a spreadsheet saves it."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path
from typing import Optional

import numpy as np

from deepdensity.data.cubes import DataError
from deepdensity.utils.textfile import read_text

ANNOTATION_COLUMNS = ("seriesuid", "coordX", "coordY", "coordZ", "diameter_mm")


def _dialect(header: str) -> tuple:
    """(separator, decimal comma?) of an annotations CSV from its header line: the comma of
    LUNA16's own file, or the semicolon (with decimal commas) or tab a spreadsheet writes in
    locales where the comma is the decimal mark."""
    counts = {sep: header.count(sep) for sep in (",", ";", "\t")}
    sep = max(counts, key=lambda k: (counts[k], k == ","))  # a tie, or nothing: LUNA16's comma
    return sep, sep != ","


def _number(text: str, decimal_comma: bool) -> float:
    return float(text.strip().replace(",", ".") if decimal_comma else text)


def read_annotations(path, skipped: Optional[list] = None) -> dict:
    """{seriesuid: [(xyz, diameter_mm), ...]} from a LUNA16-format CSV (UTF-8, with or
    without the byte-order mark a spreadsheet writes; commas, or semicolons with decimal
    commas, or tabs; spaces after a separator allowed). Rows with a non-finite coordinate or
    a diameter that is not a positive number, and repeats of an earlier row, are left out
    and listed in `skipped` as ("nodule", reason)."""
    path = Path(path)
    text = read_text(path, "annotations file", DataError, "save it as UTF-8 CSV")
    sep, decimal_comma = _dialect(text.splitlines()[0] if text.strip() else "")
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=sep, skipinitialspace=True)
    reader.fieldnames = [f.strip() for f in (reader.fieldnames or [])]
    missing = [c for c in ANNOTATION_COLUMNS if c not in reader.fieldnames]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {', '.join(missing)} (found {', '.join(reader.fieldnames)}); "
            f"expected LUNA16's {','.join(ANNOTATION_COLUMNS)}"
        )
    out, first_line, skipped = defaultdict(list), {}, skipped if skipped is not None else []
    for n, row in enumerate(reader, start=2):
        try:
            xyz = np.array([_number(row[c], decimal_comma) for c in ("coordX", "coordY", "coordZ")])
            diameter = _number(row["diameter_mm"], decimal_comma)
        except (TypeError, ValueError, AttributeError):
            raise DataError(f"{path}, line {n}: coordinates and diameter must be numbers") from None
        uid = row["seriesuid"].strip()
        if not (np.isfinite(xyz).all() and np.isfinite(diameter) and diameter > 0):
            skipped.append(
                (
                    "nodule",
                    f"{path.name} line {n} ({uid}): coordinates must be finite and the diameter "
                    f"a positive number, got {list(xyz)} and {diameter}",
                )
            )
            continue
        key = (uid, tuple(xyz), diameter)
        if key in first_line:
            skipped.append(("nodule", f"{path.name} line {n} ({uid}): the same nodule as line {first_line[key]}"))
            continue
        first_line[key] = n
        out[uid].append((xyz, diameter))
    return dict(out)
