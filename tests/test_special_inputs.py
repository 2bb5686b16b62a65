"""Inputs that are not regular files (issue 55): a folder, a named pipe, a socket or a device
where a file is expected is refused in one line, exit 2, before anything opens it. Opening a
FIFO waits for a writer: before, `data_path` a FIFO hung training until killed. Each reader is
tried on every member of the class; an alarm turns a hang into a failure."""

import os
import signal
import socket

import pytest

from deepdensity.data import cli as data_cli
from deepdensity.study import repro
from deepdensity.tools import generate
from deepdensity.training import cli as train_cli
from tests.support import SMOKE


@pytest.fixture
def special(tmp_path):
    """make(kind, name): a path of that kind (its words in the message) named `name`; sockets
    stay bound for the test."""
    bound = []

    def make(kind: str, name: str):
        path = tmp_path / "inputs" / name
        path.parent.mkdir(exist_ok=True)
        if kind == "a named pipe (FIFO)":
            os.mkfifo(path)
        elif kind == "a folder":
            path.mkdir()
        elif kind == "a socket":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path))
            bound.append(sock)
        else:
            path.symlink_to("/dev/zero")  # a character device every Linux has, under the name asked for
        return path

    yield make
    for sock in bound:
        sock.close()


@pytest.fixture(autouse=True)
def no_hang():
    def hung(*_):
        raise AssertionError("the command waited on its input (20 s)")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# (what reads the path, the name it is given: a preset is a path only when it ends in .yaml)
READERS = {
    "train data_path": (
        lambda p, tmp: train_cli.main(
            ["--mode", "strong", "--config", SMOKE, "--set", f"data_path={p}", "--out", str(tmp / "run")]
        ),
        "d.h5",
    ),
    "train --config": (
        lambda p, tmp: train_cli.main(["--mode", "strong", "--config", str(p), "--out", str(tmp / "run")]),
        "c.yaml",
    ),
    "repro --preset": (
        lambda p, tmp: repro.main(["--preset", str(p), "--runs", str(tmp / "runs"), "--dry-run"]),
        "p.yaml",
    ),
    "data prepare --annotations": (
        lambda p, tmp: data_cli.main(
            ["prepare", "--luna", str(tmp), "--annotations", str(p), "--out", str(tmp / "o.h5")]
        ),
        "a.csv",
    ),
    "generate --data": (
        lambda p, tmp: generate.main(["--run", str(tmp), "--n", "4", "--data", str(p), "--out", str(tmp / "o.h5")]),
        "g.h5",
    ),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", ["a named pipe (FIFO)", "a folder", "a socket", "a character device"])
def test_an_input_that_is_not_a_file_is_refused_in_one_line_before_it_is_opened(
    special, tmp_path, capsys, reader, kind
):
    command, name = READERS[reader]
    path = special(kind, name)
    status = command(path, tmp_path)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and f"{path} is {kind}, not a file" in lines[0], lines
    assert not (tmp_path / "run").exists() and not (tmp_path / "o.h5").exists() and not (tmp_path / "runs").exists()
