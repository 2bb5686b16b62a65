"""Files the project writes are readable as the user's umask says, like any file open() makes."""

import os
import stat

import pytest

from deepdensity.utils import files
from tests.support import USERS_FOLDERS, snapshot, user_folder


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_atomic_files_take_the_process_umask(umask, tmp_path):
    old = os.umask(umask)
    try:
        assert files.process_umask() == umask
        files.write_atomic(tmp_path / "a.json", "{}")
        files.write_bytes_atomic(tmp_path / "b.h5", b"x")
        with open(tmp_path / "plain.txt", "w") as f:  # the reference: what open() makes
            f.write("x")
    finally:
        os.umask(old)
    want = stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode)
    assert want == 0o666 & ~umask
    for name in ("a.json", "b.h5"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == want, name


# ------------------------------------------------------------------------------------------
# Folders the project may write into (files.check_own_folder): new, empty, marked as the kind
# asked for, or recognised as made before the marks. Everything else is the user's.
@pytest.mark.parametrize("name", USERS_FOLDERS)
@pytest.mark.parametrize("kind", ["run", "runs", "reports", "scans"])
def test_a_users_folder_is_refused_in_one_line_and_left_as_it_was(tmp_path, name, kind):
    from deepdensity.training.runs import made_before_marks
    from deepdensity.utils.errors import UserError

    folder = user_folder(tmp_path, name, USERS_FOLDERS[name])
    before = snapshot(folder)
    with pytest.raises(UserError) as refused:
        files.check_own_folder(folder, "--out", kind, made_before_marks if kind == "run" else None)
    said = str(refused.value)
    assert "\n" not in said and said.startswith(f"--out {folder} holds files this project did not write (")
    assert "nothing was written there" in said
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", ["run", "runs", "reports", "scans"])
def test_a_new_an_empty_or_a_marked_folder_is_the_projects(tmp_path, kind):
    assert files.check_own_folder(tmp_path / "new" / "deeper", "--out", kind) == tmp_path / "new" / "deeper"
    (tmp_path / "empty").mkdir()
    assert files.check_own_folder(tmp_path / "empty", "--out", kind) == tmp_path / "empty"
    files.mark_folder(tmp_path / "marked", kind)
    assert files.folder_mark(tmp_path / "marked") == kind
    (tmp_path / "marked" / "anything.txt").write_text("written after the mark")
    assert files.check_own_folder(tmp_path / "marked", "--out", kind) == tmp_path / "marked"


@pytest.mark.parametrize("kind, other", [("run", "runs"), ("runs", "run"), ("reports", "run"), ("scans", "runs")])
def test_a_project_folder_of_another_kind_is_refused_by_its_name(tmp_path, kind, other):
    from deepdensity.utils.errors import UserError

    files.mark_folder(tmp_path / "f", other)
    with pytest.raises(UserError, match=f"is {files.FOLDER_KINDS[other]}, not {files.FOLDER_KINDS[kind]}"):
        files.check_own_folder(tmp_path / "f", "--out", kind)


def test_a_run_folder_written_before_the_marks_is_recognised_by_its_config(tmp_path):
    """What run_config.run_config wrote into config.json since the first version: the settings,
    and the run's mode and N. A run's temporaries (atomic writes cut by a kill) are its own."""
    from deepdensity.training.runs import made_before_marks

    old = user_folder(
        tmp_path,
        "old",
        {
            "config.json": b'{"base_lr": 0.00105, "n_components": 50, "mode": "weak", "workers": 2, "world_size": 2}',
            "metrics.jsonl": b"",
            "state.json": b"{}",
            "ckpt/epoch-0001.index": b"",
            "tb": None,
            "metrics.jsonl.k2j4.tmp": b"",
        },
    )
    assert made_before_marks(old) and files.check_own_folder(old, "--out", "run", made_before_marks) == old
    (old / "notes.txt").write_text("the user's, beside a run")
    assert not made_before_marks(old)
    (old / "notes.txt").unlink()
    (old / "config.json").write_text('{"base_lr": 0.1, "mode": "weak"}')  # not what a run writes
    assert not made_before_marks(old)


def test_a_folder_made_for_a_refused_command_goes_with_its_mark_and_nothing_else(tmp_path):
    files.mark_folder(tmp_path / "made", "run")
    files.remove_if_unused(tmp_path / "made")
    assert not (tmp_path / "made").exists()
    files.mark_folder(tmp_path / "used", "run")
    (tmp_path / "used" / "config.json").write_text("{}")
    files.remove_if_unused(tmp_path / "used")
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == [".deepdensity", "config.json"]


def test_a_json_object_is_read_and_anything_else_is_none(tmp_path):
    (tmp_path / "object.json").write_text('{"job_id": "12"}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "cut.json").write_text('{"job_id": ')
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    assert files.read_json_object(tmp_path / "object.json") == {"job_id": "12"}
    for name in ("list.json", "cut.json", "latin1.json", "missing.json"):
        assert files.read_json_object(tmp_path / name) is None, name
    assert files.read_json_object(tmp_path) is None, "a folder"
