"""Files written so that a crash, a signal or a full disk never leaves half of one behind."""
from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
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
    from deepdensity.utils.errors import UserError, shown
    out = Path(out)
    if suffix and out.suffix != suffix:
        raise UserError(f"--out {shown(out)} must end in {suffix}")
    for path in inputs:
        if path is not None and Path(path).exists() and Path(path).resolve() == out.resolve():
            raise UserError(f"--out {shown(out)} is also an input of this command; choose another name")
    if out.exists() and not force:
        raise UserError(f"--out {shown(out)} exists; pass --force to replace it")
    return out


def check_own_folder(folder, flag: str, marks: tuple) -> Path:
    """`folder` as a Path, once it is one this project may write into: absent, empty, or
    holding one of `marks` (a file or folder it writes there first). Anywhere else its files
    would land among someone else's (`--runs ~`), so it is refused in one line."""
    from deepdensity.utils.errors import UserError, shown
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {shown(folder)} is a file, not a folder; pass a new or empty folder")
    if not folder.exists() or any((folder / m).exists() for m in marks):
        return folder
    others = sorted(p.name for p in folder.iterdir())
    if not others:
        return folder
    listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    raise UserError(f"{flag} {shown(folder)} holds files this command did not write ({listed}); "
                    f"pass a new or empty folder")
