"""Files written so that a crash, a signal or a full disk never leaves half of one behind."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path, suffix: str = ".tmp"):
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename,
    on any exception (KeyboardInterrupt included) it is removed and `path` is untouched.

    The temporary file is in the same folder so that the rename stays on one file system
    (an `os.replace` across file systems is a copy, not atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomic(path, text: str) -> None:
    """Write `text` to `path` through a temporary file, fsync and a rename: never half a file."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
