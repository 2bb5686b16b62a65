"""Files the project writes are readable as the user's umask says, like any file open() makes."""
import os
import stat

import pytest

from deepdensity.utils import files


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_atomic_files_take_the_process_umask(umask, tmp_path):
    old = os.umask(umask)
    try:
        assert files.process_umask() == umask
        files.write_atomic(tmp_path / "a.json", "{}")
        files.write_bytes_atomic(tmp_path / "b.h5", b"x")
        with open(tmp_path / "plain.txt", "w") as f:         # the reference: what open() makes
            f.write("x")
    finally:
        os.umask(old)
    want = stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode)
    assert want == 0o666 & ~umask
    for name in ("a.json", "b.h5"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == want, name
