"""make test-all's lanes (scripts/test_all.sh) split the suite: every test file runs in exactly
one lane, so that a new folder, or a lane's --ignore forgotten, cannot leave a test out of CI
or run it twice."""

import subprocess
from collections import Counter
from pathlib import Path

from tests.support import ROOT


def lanes() -> dict:
    """{lane: (paths it names, paths it ignores)}, as the script would start them."""
    listed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test_all.sh"), "--lanes"], capture_output=True, text=True, timeout=30
    )
    assert listed.returncode == 0, listed.stderr
    found = {}
    for line in listed.stdout.splitlines():
        name, *words = line.split()
        paths = [Path(w) for w in words if not w.startswith("-")]
        ignored = [Path(w.split("=", 1)[1]) for w in words if w.startswith("--ignore=")]
        found[name] = (paths, ignored)
    return found


def selected(paths, ignored, files) -> set:
    """The files pytest collects from `paths` less `ignored` (each a file or a folder)."""

    def under(f: Path, p: Path) -> bool:
        return f == p or p in f.parents

    return {f for f in files if any(under(f, p) for p in paths) and not any(under(f, p) for p in ignored)}


def test_every_test_file_runs_in_exactly_one_lane():
    files = {p.relative_to(ROOT) for p in (ROOT / "tests").rglob("test_*.py")}
    assert len(files) > 100
    split = {name: selected(*lane, files) for name, lane in lanes().items()}
    assert set(split) == {"others", "cluster", "training"}
    ran = Counter(f for chosen in split.values() for f in chosen)
    assert sorted(files - set(ran)) == [], "in no lane"
    assert sorted(f for f, lanes_of_f in ran.items() if lanes_of_f > 1) == [], "in two lanes"
    assert Path("tests/training/test_ctrl_c.py") in split["training"]


def test_the_selection_sees_a_folder_left_out_and_a_file_taken_twice():
    files = {Path("tests/a/test_x.py"), Path("tests/b/test_y.py"), Path("tests/test_z.py")}
    assert selected([Path("tests")], [Path("tests/a")], files) == {Path("tests/b/test_y.py"), Path("tests/test_z.py")}
    assert selected([Path("tests/a/test_x.py")], [], files) == {Path("tests/a/test_x.py")}
    # a folder whose name starts like another's is not under it
    assert selected([Path("tests/a")], [], {Path("tests/ab/test_w.py")}) == set()
