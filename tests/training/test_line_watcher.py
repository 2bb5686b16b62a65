"""Rank 0's line watcher (training/line_watcher.py): the page it shares with the rank, and its
life beside a rank that ends without a signal. Saying the line for a rank held in C, Python's
lock kept, under a real mpirun: tests/training/test_interrupts.py
(test_rank_0_held_in_c_past_mpiruns_kill_still_says_where_the_run_stands)."""

import os
import subprocess
import sys
import time

import pytest

from deepdensity.training import line_watcher
from deepdensity.training.line_watcher import Page
from deepdensity.utils.errors import LAUNCH_PREFIX_ENV
from tests.support import ROOT
from tests.training.terminal import run_pids

CLAIM = """
import sys
from deepdensity.training.line_watcher import Page
sys.exit(0 if Page(int(sys.argv[1])).claim() else 3)
"""


def claim_in_another_process(page: Page) -> bool:
    proc = subprocess.run(
        [sys.executable, "-c", CLAIM, str(page.fd)], pass_fds=(page.fd,), env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode in (0, 3), proc
    return proc.returncode == 0


def test_the_line_is_claimed_once_between_the_rank_and_its_watcher():
    page = Page()
    assert claim_in_another_process(page)
    assert not page.claim() and not claim_in_another_process(page)
    other = Page()
    assert other.claim() and not claim_in_another_process(other)


def test_the_watcher_says_the_prepared_line_once_and_only_if_the_rank_has_not():
    r, w = os.pipe()
    page = Page()
    assert not page.say(w), "no line prepared: nothing said, nothing claimed"
    page.prepare(b"interrupted: at epoch 2\n")
    assert page.say(w) and not page.say(w) and not page.claim()
    os.close(w)
    assert os.read(r, 100) == b"interrupted: at epoch 2\n"
    claimed = Page()
    claimed.prepare(b"interrupted: at epoch 2\n")
    assert claimed.claim() and not claimed.say(r)


def test_the_page_holds_the_last_line_prepared_and_where_the_rank_is():
    page = Page()
    assert page.line() == b"" and not page.may_say()
    page.prepare("interrupted: at epoch 3 …\n".encode())
    page.prepare(b"interrupted: at epoch 4\n")
    assert page.line() == b"interrupted: at epoch 4\n"
    for opens, holds, may in [(1, 0, True), (2, 0, True), (1, 1, False), (0, 0, False), (0, 1, False), (300, 0, True)]:
        page.publish(opens, holds)
        assert page.may_say() is may, (opens, holds)
    long = b"x" * (line_watcher.PAGE * 2)
    page.prepare(long)
    assert 0 < len(page.line()) < line_watcher.PAGE and set(page.line()) == {ord("x")}


# a rank 0 under mpirun as OpenMPI describes one, that starts its watcher in a window and ends
# without a signal: by its end (exit handlers run) or by os._exit (none run)
RANK_THAT_FINISHES = """
import os, sys, time
from pathlib import Path
from deepdensity.training import interrupts
out, end = sys.argv[1], sys.argv[2]
with interrupts.handling(restore=False):
    print(interrupts.last_word(lambda: "where the run stands", Path(out) / ".running"), flush=True)
    interrupts.open_window()
    time.sleep(0.3)
    if end == "os._exit":
        os._exit(0)
"""


@pytest.mark.parametrize("end", ["exit", "os._exit"])
def test_the_watcher_ends_with_its_rank_and_says_nothing_without_a_signal(tmp_path, end):
    """Its rank's exit handlers stop it: it is gone when the rank is, so that nothing naming the
    run folder is left when mpirun, and horovodrun after it, end as their ranks do. Without
    them, the kernel kills it as the rank ends (Linux's PR_SET_PDEATHSIG): gone moments later."""
    out = tmp_path / "run-of-this-test"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}
    env.pop(LAUNCH_PREFIX_ENV, None)
    err = tmp_path / "stderr"  # a file: the rank is waited for, not the last holder of its stderr
    with err.open("w") as stderr:
        proc = subprocess.run(
            [sys.executable, "-c", RANK_THAT_FINISHES, str(out), end], env=env, stdout=subprocess.PIPE, stderr=stderr
        )
    assert (proc.returncode, proc.stdout, err.read_text()) == (0, b"True\n", "")
    if end == "os._exit":  # the kernel's kill is sent as the rank ends; the watcher dies once it next runs
        deadline = time.monotonic() + 2
        while run_pids(str(out)) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert run_pids(str(out)) == [], "the watcher outlived its rank"
