"""A full disk is one line (what could not be written, how much is free), leaves no temporary
file, and keeps what was complete. Shown on a small tmpfs, mounted for the test (root only)."""

import contextlib
import subprocess
import sys

import pytest

from tests.support import ROOT, SMOKE, run


@contextlib.contextmanager
def tmpfs(path, size: str):
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'not root'}): the disk-full cases need one")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)


def test_synth_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, capsys):
    """Before: HDF5 segfaulted in its clean-up (exit 139) and left its .tmp file behind."""
    from deepdensity.data import cli

    with tmpfs(tmp_path / "small", "1m") as small:
        assert cli.main(["synth", "--out", str(small / "s.h5"), "--n", "200", "--val", "20"]) == 2
        lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(lines) == 1 and "no space left on device" in lines[0] and "MB free there" in lines[0], lines
        assert list(small.iterdir()) == [], "no temporary or partial file"


@pytest.mark.slow
def test_a_checkpoint_on_a_full_disk_is_one_line_and_the_run_resumes_after(tmp_path, smoke_data):
    train = [
        sys.executable,
        str(ROOT / "train.py"),
        "--mode",
        "strong",
        "--config",
        SMOKE,
        "--set",
        f"data_path={smoke_data}",
        "--quiet",
    ]
    with tmpfs(tmp_path / "small", "64m") as small:
        out = small / "run"
        run(train + ["--set", "max_epochs=1", "--out", str(out)])
        filler = small / "filler"
        with open(filler, "wb") as f:  # fill the disk to the last few kB
            try:
                while True:
                    f.write(b"\0" * (1 << 16))
                    f.flush()
            except OSError:
                pass
        proc = run(train + ["--set", "max_epochs=2", "--out", str(out), "--resume"], check=False)
        lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "no space left on device" in lines[0] and "continue with: python train.py" in lines[0]
        assert sorted(p.name.split(".")[0] for p in (out / "ckpt").iterdir()) == ["epoch-0001", "epoch-0001"]
        filler.unlink()
        proc = run(train + ["--set", "max_epochs=2", "--out", str(out), "--resume"])
        assert "after 2 epochs" in proc.stdout
