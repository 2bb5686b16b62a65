"""How `deepdensity launch` passes an interrupt on (launch/relay.py), on real processes: the
search of horovodrun's process group, the signal each target is given, and a rank's exit status
on the relayed signal. The whole chain under MPI and Gloo is tests/training/test_ctrl_c.py."""

import os
import signal
import subprocess
import sys
import threading
import time

from deepdensity.launch import relay, signals
from deepdensity.training import interrupts
from deepdensity.training.cli import where_to_continue
from deepdensity.utils.errors import LAUNCH_PREFIX_ENV

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_horovodrun_is_given_ctrl_c_as_ctrl_c_and_any_other_interrupt_as_sigterm():
    assert relay.to_horovodrun(signal.SIGINT) == signal.SIGINT
    assert relay.to_horovodrun(signal.SIGTERM) == relay.to_horovodrun(signal.SIGHUP) == signal.SIGTERM


def test_the_group_search_finds_every_process_of_a_group_and_none_of_another(tmp_path):
    # a shell in a group of its own starting a child, as horovodrun's `sh -c mpirun` does; an
    # outsider with the same command in this test's group
    leader = subprocess.Popen(
        ["sh", "-c", f"{' '.join(SLEEPER[:2])} 'import time; time.sleep(60)' & wait"], process_group=0
    )
    outsider = subprocess.Popen(SLEEPER)
    try:
        deadline = time.monotonic() + 10
        while len(relay.group_members(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = dict(relay.group_members(leader.pid))
        assert leader.pid in members and members[leader.pid] == "sh"
        assert len(members) == 2 and outsider.pid not in members
        assert relay.mpirun_of(leader.pid) is None  # no mpirun there: Gloo, or not started yet
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        outsider.kill()
        leader.wait()
        outsider.wait()


def test_an_mpirun_in_the_group_is_found_by_its_name(tmp_path):
    # a program called mpirun (a copy of sleep's interpreter would be named python: a symlink
    # named mpirun to /bin/sleep runs with that name)
    fake = tmp_path / "mpirun"
    fake.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(fake), "60"], process_group=0)
    try:
        deadline = time.monotonic() + 10
        while relay.mpirun_of(proc.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert relay.mpirun_of(proc.pid) == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_relay_gives_horovodrun_the_signal_once_and_stops_when_the_job_has_ended():
    """Without an mpirun in its group (Gloo), horovodrun itself gets the signal, once."""
    code = (
        "import signal, sys, time\n"
        "got = []\n"
        "signal.signal(signal.SIGTERM, lambda *a: got.append(1))\n"
        "deadline = time.time() + 3\n"
        "while time.time() < deadline: time.sleep(0.01)\n"
        "print(len(got))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], process_group=0, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)  # its handler in place
    ended = threading.Event()
    passing_on = relay.Relay(ended)
    passing_on.attach(proc)
    passing_on.start(signal.SIGHUP)
    out, _ = proc.communicate(timeout=20)
    ended.set()
    assert out.strip() == "1"


def test_a_signal_that_came_before_horovodrun_started_is_passed_on_once_it_has():
    """launch sets its handlers before it starts horovodrun (a SIGTERM between the two had left
    horovodrun running on its own): the relay holds the signal until it is given horovodrun."""
    code = (
        "import signal, sys, time\n"
        "got = []\n"
        "signal.signal(signal.SIGTERM, lambda *a: got.append(1))\n"
        "print('ready', flush=True)\n"
        "deadline = time.time() + 10\n"
        "while not got and time.time() < deadline: time.sleep(0.01)\n"
        "time.sleep(0.6)\n"  # a second signal would come within the relay's 0.5 s
        "print(len(got))\n"
    )
    ended = threading.Event()
    passing_on = relay.Relay(ended)
    passing_on.start(signal.SIGTERM)  # the signal first
    proc = subprocess.Popen([sys.executable, "-c", code], process_group=0, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # its handler in place
    passing_on.attach(proc)
    out, _ = proc.communicate(timeout=20)
    ended.set()
    assert out.strip() == "1"


def test_a_rank_started_by_launch_takes_the_relayed_signal_as_an_interrupt_that_exits_0(monkeypatch):
    monkeypatch.delenv(LAUNCH_PREFIX_ENV, raising=False)
    assert signals.RELAYED not in interrupts._codes()  # elsewhere SIGUSR1 is not ours
    monkeypatch.setenv(LAUNCH_PREFIX_ENV, "python -m deepdensity launch -np 2 ")
    assert interrupts._codes()[signals.RELAYED] == 0
    assert interrupts._codes()[signal.SIGHUP] == 129 and interrupts._codes()[signal.SIGTERM] == 143


def test_a_requeueing_slurm_job_says_it_requeues_and_prints_no_command(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / "state.json").write_text('{"epoch": 4}')
    monkeypatch.setenv("DEEPDENSITY_RELAUNCH", "sbatch scripts/slurm/train.sbatch")
    said = where_to_continue(out, ["--mode", "strong", "--out", str(out)])
    assert said.endswith(f"continue with: sbatch scripts/slurm/train.sbatch --mode strong --out {out} --resume")
    monkeypatch.setenv("DEEPDENSITY_REQUEUE_JOB", "42")
    said = where_to_continue(out, ["--mode", "strong", "--out", str(out)])
    assert said == f"at epoch 5, checkpointed in {out}; Slurm job 42 requeues itself and continues it"
