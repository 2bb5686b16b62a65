"""A rank of plain mpirun watches its launcher (training/launcher_watch.py), with real processes:
a stand-in mpirun (a script of that name, so that /proc names it so), its parent, and the
rank. The whole chain under horovodrun and MPI is tests/training/test_interrupts.py's."""

import json
import os
import subprocess
import sys
import time

from deepdensity.training import launcher_watch
from deepdensity.utils.errors import LAUNCH_PREFIX_ENV
from tests.support import ROOT

RANK = (
    "import json, os; from deepdensity.training import launcher_watch as w; "
    "print(json.dumps([os.getppid(), w.watched(os.environ)]))"
)


def _rank_under(tmp_path, name: str, env: dict, shell: bool = True) -> tuple:
    """[the stand-in launcher's pid, what the rank's `watched` said] for a rank
    started by a script called `name`, itself started as horovodrun starts mpirun (`/bin/sh -c
    'mpirun ...'`, a second command keeping the shell from replacing itself), or directly."""
    launcher = tmp_path / name
    launcher.write_text(f'#!/bin/sh\n{sys.executable} -c "$RANK"\n')
    launcher.chmod(0o755)
    env = {**env, "RANK": RANK, "PYTHONPATH": str(ROOT), "PATH": f"{tmp_path}:{env.get('PATH', '/usr/bin:/bin')}"}
    args = ["/bin/sh", "-c", f"{name} --tag-output -np 2; true"] if shell else [str(launcher)]
    got = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout.strip().splitlines()[-1])


def test_a_rank_of_horovodruns_mpirun_watches_mpirun_and_horovodruns_shell(tmp_path):
    mpirun, watched = _rank_under(tmp_path, "mpirun", {**os.environ, "OMPI_COMM_WORLD_SIZE": "2"})
    assert watched is not None and watched[0] == mpirun
    assert watched[1] not in (os.getpid(), mpirun)  # the shell between this test and mpirun


def test_nothing_is_watched_off_mpi_under_launch_under_a_bare_mpirun_or_another_parent(tmp_path):
    plain = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_SIZE", LAUNCH_PREFIX_ENV)}
    mpi = {**plain, "OMPI_COMM_WORLD_SIZE": "2"}
    assert _rank_under(tmp_path, "mpirun", plain)[1] is None  # Gloo, one process
    assert _rank_under(tmp_path, "mpirun", {**mpi, LAUNCH_PREFIX_ENV: "deepdensity launch -np 2"})[1] is None
    assert _rank_under(tmp_path, "mpirun", mpi, shell=False)[1] is None  # a bare mpirun: nohup's to keep
    assert _rank_under(tmp_path, "orted-like", mpi)[1] is None


def test_horovodruns_shell_is_told_from_other_shells():
    assert launcher_watch.is_horovodruns_shell(["/bin/sh", "-c", "mpirun --allow-run-as-root --tag-output -np 2"])
    assert launcher_watch.is_horovodruns_shell(["/bin/bash", "-c", "  prterun -np 2"])
    assert not launcher_watch.is_horovodruns_shell(["-bash"])
    assert not launcher_watch.is_horovodruns_shell(["/bin/sh", "-c", "python train.py"])
    assert not launcher_watch.is_horovodruns_shell(["/bin/sh", "script.sh", "mpirun"])


def test_the_launcher_is_gone_once_it_ends_and_not_before(tmp_path):
    """A shell (the launcher) that starts a child (mpirun) and is then killed: the child is given
    another parent, which is what the watch sees."""
    shell = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    child = int(shell.stdout.readline())
    me = os.getpid()
    try:
        assert launcher_watch.parent_of(child) == shell.pid
        assert not launcher_watch.launcher_gone(child, shell.pid, me)
        shell.kill()
        shell.wait()
        deadline = time.time() + 10
        while launcher_watch.parent_of(child) == shell.pid and time.time() < deadline:
            time.sleep(0.05)
        assert launcher_watch.launcher_gone(child, shell.pid, me)
    finally:
        os.kill(child, 9)
    assert launcher_watch.parent_of(2**22 + 1) is None  # past pid_max: no such process
