"""Files written so that a crash, a signal or a full disk never leaves half of one behind."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Optional

from deepdensity.utils.errors import UserError, shown


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
        # mkstemp makes the file 0600 whatever the umask; give it what open() would have, so
        # that a group sharing a cluster folder can read the results
        os.chmod(tmp, 0o666 & ~process_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def process_umask() -> int:
    """This process's umask, read without changing it (Linux /proc), else by setting it back."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("Umask:"))
        return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path, text: str) -> None:
    """Write `text` to `path` through a temporary file, fsync and a rename: never half a file."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def hdf5_atomic(path):
    """Yield an h5py.File built in memory; on success its bytes go to `path` through
    `atomic_path`. HDF5 itself, meeting a full disk, segfaulted in its clean-up (exit 139) and
    left its temporary file; a plain Python write fails cleanly with ENOSPC instead, and the
    free space is checked before it starts. (Our files are tens of MB: memory is no concern.)"""
    import h5py

    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        yield f
    write_bytes_atomic(path, buf.getvalue())


def write_bytes_atomic(path, data: bytes) -> None:
    """`data` to `path` in one rename; OSError(ENOSPC) before writing when it cannot fit."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(path.parent).free < len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def check_output(out, inputs=(), force: bool = False, suffix: str = "") -> Path:
    """`out` as a Path, once it is safe to write: not one of `inputs` (an output equal to an
    input would destroy what it is computed from), ending in `suffix` if one is asked for, and
    not an existing file unless `force` (a data set runs were trained on is not replaced silently)."""
    out = Path(out)
    if suffix and out.suffix != suffix:
        raise UserError(f"--out {shown(out)} must end in {suffix}")
    for path in inputs:
        if path is not None and Path(path).exists() and Path(path).resolve() == out.resolve():
            raise UserError(f"--out {shown(out)} is also an input of this command; choose another name")
    if out.exists() and not force:
        raise UserError(f"--out {shown(out)} exists; pass --force to replace it")
    if out.exists() and held_for_writing(out):
        raise UserError(
            f"--out {shown(out)} is open for writing in another process (HDF5 locks it); --force "
            f"replaces a file nobody writes: wait until that process has finished"
        )
    return out


def is_hdf5_lock_error(e: OSError) -> bool:
    """Is `e` HDF5 refusing a file another process has open for writing (its file lock)?"""
    return "unable to lock file" in str(e) or getattr(e, "errno", None) in (11, 35)


def held_for_writing(path) -> bool:
    """Does another process hold the HDF5 file `path` open for writing? Replacing it would leave
    that process writing into a file with no name. HDF5 locks such a file, so opening it to read
    fails; a file that is not HDF5, or that nobody writes, is not held."""
    path = Path(path)
    if not path.is_file():
        return False
    import h5py

    try:
        with h5py.File(path, "r"):
            return False
    except OSError as e:
        return is_hdf5_lock_error(e)


def special_kind(path) -> Optional[str]:
    """What `path` is when it is there but no regular file ('a folder', 'a named pipe (FIFO)',
    'a socket', 'a character device', 'a block device'); None for a regular file (through its
    links) or nothing there. Asked of stat, never by opening: opening a FIFO waits for a writer,
    and reading a device may never end."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), None)


# The file a command writes first into a folder it makes its own, naming the folder's kind.
# A folder that holds it is the project's; one that holds anything else is the user's.
FOLDER_MARK = ".deepdensity"
FOLDER_KINDS = {
    "run": "a training run's folder",
    "runs": "a study's runs folder",
    "reports": "a study's reports",
    "scans": "a folder of synthetic scans",
}


def folder_mark(folder) -> Optional[str]:
    """The kind of project folder `folder`'s mark names; None where there is no mark ('' where
    the mark is not one this project wrote)."""
    import json

    path = Path(folder) / FOLDER_MARK
    if not path.is_file():
        return None
    try:
        kind = json.loads(path.read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return ""
    return kind if kind in FOLDER_KINDS else ""


def check_own_folder(folder, flag: str, kind: str, earlier: Optional[Callable] = None) -> Path:
    """`folder` as a Path, once this project may write into it as a folder of `kind`: absent,
    empty, marked as one (FOLDER_MARK), or made before folders were marked, which
    `earlier(folder)` recognises by what the project wrote there. Anywhere else its files would
    land among someone else's and replace theirs (a config.json, a weights.h5 of the user's),
    so it is refused in one line, before anything is written. Nothing is written here."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {shown(folder)} is a file, not a folder; pass a new or empty folder")
    names = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    marked = folder_mark(folder) if names else None
    if not names or marked == kind or (marked is None and earlier is not None and earlier(folder)):
        return folder
    if marked:
        raise UserError(
            f"{flag} {shown(folder)} is {FOLDER_KINDS[marked]}, not {FOLDER_KINDS[kind]}; pass a new or empty folder"
        )
    others = [n for n in names if n != FOLDER_MARK] or names
    listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    raise UserError(
        f"{flag} {shown(folder)} holds files this project did not write ({listed}); nothing was "
        f"written there: pass a new or empty folder"
    )


def mark_folder(folder, kind: str) -> None:
    """Make `folder` (parents too) the project's folder of `kind`: its mark, written before
    anything else goes there (check_own_folder first)."""
    import json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if folder_mark(folder) != kind:
        write_atomic(folder / FOLDER_MARK, json.dumps({"kind": kind, "written_by": "deepdensity"}) + "\n")


def remove_if_unused(folder) -> None:
    """Remove `folder` when it holds nothing but its mark: made for a command that was refused
    before it wrote anything."""
    folder = Path(folder)
    if folder.is_dir() and all(p.name == FOLDER_MARK for p in folder.iterdir()):
        (folder / FOLDER_MARK).unlink(missing_ok=True)
        folder.rmdir()


def remove_pid_mark(path, pid: int) -> None:
    """Remove the mark at `path` if process `pid` wrote it ({"pid": ...}): never another
    process's, nor one that does not read."""
    try:
        if json.loads(Path(path).read_text()).get("pid") == pid:
            Path(path).unlink()
    except (OSError, ValueError, AttributeError):
        pass


def json_with(path, keys: tuple) -> bool:
    """Is `path` a JSON object holding every one of `keys`? (How a folder made before the marks
    is told from a user's: by what the project wrote in it.)"""
    if special_kind(path):  # a FIFO by that name would hold the check itself
        return False
    held = read_json_object(path)
    return held is not None and all(k in held for k in keys)


def read_json_object(path) -> Optional[dict]:
    """The JSON object in `path`; None where there is none, it cannot be read or parsed, or it
    holds another JSON value."""
    import json

    try:
        held = json.loads(Path(path).read_text())
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return held if isinstance(held, dict) else None
