"""A damaged study record (study.json cut short, not a JSON mapping, not text) is one `error:`
line naming the file and what is wrong, exit status 2, and nothing rendered."""

import shutil
from pathlib import Path

import pytest

from deepdensity.study import rerender

FIXTURE = Path(__file__).parent / "data" / "tiny-reports"


def damaged(tmp_path, content: bytes) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "study.json").write_bytes(content)
    return folder


@pytest.mark.parametrize(
    "name, cut, what",
    [
        ("truncated", lambda whole: whole[: len(whole) // 2], "is damaged (not whole JSON: "),
        ("empty", lambda whole: b"", "is damaged (not whole JSON: "),
        ("a list", lambda whole: b"[1, 2]\n", "is damaged (a JSON list, not a mapping)"),
        ("a string", lambda whole: b'"study"\n', "is damaged (a JSON str, not a mapping)"),
        ("not text", lambda whole: b"\xff\xfe\x00{", "is damaged (not UTF-8 text"),
    ],
)
def test_a_damaged_record_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys, name, cut, what):
    folder = damaged(tmp_path, cut((FIXTURE / "study.json").read_bytes()))
    out = tmp_path / "rendered"
    assert rerender.main(["--from", str(folder), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {folder / 'study.json'} {what}"), lines
    assert not out.exists() or not any(out.iterdir()), "nothing rendered"


def test_the_undamaged_record_still_renders(tmp_path):
    copy = tmp_path / "reports"
    shutil.copytree(FIXTURE, copy)
    assert rerender.main(["--from", str(copy), "--check"]) == 0
