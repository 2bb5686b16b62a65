"""Nothing of the user's is written over (issue 55): every command that writes a folder (train.py
--out, with and without --resume; repro --runs and --out; report --out; data synth-scans --out)
pointed at a folder of the user's refuses in one line, exit 2, and leaves every file in it
byte-identical. The tools that write files refuse every file they would write beside --out
too (OUT.png, OUT.random.h5, the filter's figures). Each command is tried on every member of
tests/support.USERS_FOLDERS."""

import pytest

from deepdensity.data import cli as data_cli
from deepdensity.study import repro, rerender
from deepdensity.training import cli as train_cli
from tests.study.conftest import TINY_PRESET
from tests.support import ROOT, SMOKE, USERS_FOLDERS, snapshot, user_folder


def preset(tmp) -> str:
    path = tmp / "tiny.yaml"
    path.write_text(TINY_PRESET)
    return str(path)


def refused(capsys, status: int, folder) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(folder) in lines[0] and "did not write" in lines[0], err
    return lines[0]


COMMANDS = {
    "train": lambda d, data, tmp: train_cli.main(
        ["--mode", "strong", "--config", SMOKE, "--set", f"data_path={data}", "--out", str(d)]
    ),
    "train --resume": lambda d, data, tmp: train_cli.main(
        ["--mode", "strong", "--config", SMOKE, "--set", f"data_path={data}", "--out", str(d), "--resume"]
    ),
    "repro --runs": lambda d, data, tmp: repro.main(
        ["--preset", preset(tmp), "--runs", str(d), "--reports", str(tmp / "reports")]
    ),
    "repro --reports": lambda d, data, tmp: repro.main(
        ["--preset", preset(tmp), "--runs", str(tmp / "runs"), "--reports", str(d)]
    ),
    "report --out": lambda d, data, tmp: rerender.main(["--from", str(ROOT / "reports"), "--out", str(d)]),
    "data synth-scans": lambda d, data, tmp: data_cli.main(["synth-scans", "--out", str(d), "--n", "1"]),
}


@pytest.mark.parametrize("name", USERS_FOLDERS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_pointed_at_a_users_folder_refuses_and_leaves_it_byte_identical(
    tmp_path, capsys, smoke_data, command, name
):
    folder = user_folder(tmp_path, name, USERS_FOLDERS[name])
    before = snapshot(folder)
    refused(capsys, COMMANDS[command](folder, smoke_data, tmp_path), folder)
    assert snapshot(folder) == before
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists(), "nothing written elsewhere"


@pytest.mark.parametrize(
    "tool, extra, beside",
    [
        ("generate", ["--n", "4"], ".png"),
        ("filter", [], ".random.h5"),
        ("filter", [], ".embedding.png"),
        ("filter", [], ".dropped.png"),
    ],
)
def test_a_tool_refuses_a_users_file_where_it_would_write_one_beside_out(
    tool, extra, beside, smoke_data, tmp_path, capsys
):
    import importlib

    main = importlib.import_module(f"deepdensity.tools.{tool}").main
    theirs = tmp_path / f"made{beside}"
    theirs.write_bytes(b"the user's own")
    assert main(["--run", str(tmp_path), "--data", str(smoke_data), "--out", str(tmp_path / "made.h5"), *extra]) == 2
    assert f"{theirs} exists; pass --force" in capsys.readouterr().err
    assert theirs.read_bytes() == b"the user's own" and not (tmp_path / "made.h5").exists()
