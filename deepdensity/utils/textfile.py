"""The text files users hand us (YAML presets and configs, annotation CSVs, run JSON):
read as UTF-8, with or without the byte-order mark a spreadsheet writes, or refused in
one line that says what the file is instead and what to do."""

from __future__ import annotations

from pathlib import Path

from deepdensity.utils.files import special_kind

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def read_text(path, what: str, error: type = ValueError, advice: str = "save it as UTF-8 text") -> str:
    """The content of the text file at `path`; `error(message)` if it is missing, binary or
    not UTF-8. `what` names the file for the message ("config file", "annotations file")."""
    path = Path(path)
    kind = special_kind(path)
    if kind:
        raise error(f"{what} {path} is {kind}, not a file")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{what} {path} not found") from None
    except OSError as e:
        raise error(f"{what} {path} cannot be read ({e.strerror})") from None
    if raw.startswith(HDF5_SIGNATURE):
        raise error(f"{what} {path} is an HDF5 file, not text; {advice}")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(f"{what} {path} is UTF-16 text; {advice}")
    if b"\x00" in raw[:8192]:
        raise error(f"{what} {path} is a binary file, not text; {advice}")
    try:
        return raw.decode("utf-8-sig")  # a leading byte-order mark is valid UTF-8 and dropped
    except UnicodeDecodeError as e:
        raise error(
            f"{what} {path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}, "
            f"perhaps Latin-1); {advice}"
        ) from None
