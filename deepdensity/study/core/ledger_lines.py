"""A ledger file's lines, one JSON entry each, written whole or not at all: a last line a crash cut
short is dropped as the file is read and cut off before the next is appended; any other line that
is not an entry of this format stops the read, named with what to do (LedgerError)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from deepdensity.utils.errors import UserError

FORMAT = 1


class LedgerError(UserError):
    """A ledger file that cannot be read as one: one error line naming the file, the line and
    what is wrong, and what to do."""


ENTRY_FIELDS = {"key": str, "mode": str, "n": int, "seed": int, "stopping": dict, "result": dict, "val_losses": list}
REPAIR = "restore it (git checkout -- FILE for the committed one) or delete the line"


def entries_in(path: Path) -> list:
    """The entries of a ledger file as its lines hold them ([] when missing); a last line cut
    short by a crash is dropped, any other unreadable line is named."""
    path = Path(path)
    if not path.is_file():
        return []
    text = path.read_text()
    lines = text.split("\n")
    if not text.endswith("\n") and not _whole(lines[-1].encode()):
        lines = lines[:-1]  # a line a crash cut short
    entries = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except ValueError:
            raise LedgerError(
                f"{path}:{i}: not a JSON line; the ledger is damaged: {REPAIR.replace('FILE', str(path))}"
            ) from None
        problem = _entry_problem(e)
        if problem:
            raise LedgerError(f"{path}:{i}: {problem}; {REPAIR.replace('FILE', str(path))}")
        entries.append(e)
    return entries


def end_the_last_line(f) -> None:
    """Before a line is appended to `f` (a ledger file open as "a+b"): a last line without its
    newline gets one if it is a whole entry, else is cut off."""
    f.seek(0)
    text = f.read()
    if text and not text.endswith(b"\n"):
        tail = text[text.rfind(b"\n") + 1 :]
        if _whole(tail):  # a whole entry that lacks its newline (an edited file): kept
            f.write(b"\n")
        else:  # a line a crash cut short: dropped, as entries_in does
            f.truncate(text.rfind(b"\n") + 1)


def _whole(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _entry_problem(e) -> Optional[str]:
    """What keeps a parsed line from being a ledger entry, or None."""
    if not isinstance(e, dict) or e.get("format") != FORMAT:
        return f"not a ledger entry of format {FORMAT}"
    wrong = [k for k, kind in ENTRY_FIELDS.items() if not isinstance(e.get(k), kind)]
    if wrong:
        return f"an entry without a valid {', '.join(wrong)}"
    if not isinstance(e["result"].get("status"), str):
        return "an entry whose result has no status"
    return None
