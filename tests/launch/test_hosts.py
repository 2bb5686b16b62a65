"""The host check before hvd.init(): a host name that does not resolve (any launch) or that
resolves to loopback under the Gloo controller on several hosts is refused with a line that says
what to fix."""

import shutil
import subprocess
import sys

import pytest

from deepdensity.launch.hosts import HostSetupError, check_hosts, loopback_name_problem, unresolved_name_problem
from tests.support import SMOKE, run

TWO_HOSTS = {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CROSS_SIZE": "2"}


def resolving_to(address):
    def resolve(name):
        if address is None:
            raise OSError("no such host")
        return address

    return resolve


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.1.1", "::1"])
def test_a_name_resolving_to_loopback_on_several_hosts_is_a_problem(address):
    problem = loopback_name_problem(TWO_HOSTS, lambda: "node1", resolving_to(address))
    assert problem is not None and "node1" in problem and address in problem and "/etc/hosts" in problem


def test_a_name_that_does_not_resolve_is_a_problem():
    problem = loopback_name_problem(TWO_HOSTS, lambda: "node1", resolving_to(None))
    assert problem is not None and "does not resolve" in problem


@pytest.mark.parametrize(
    "env",
    [
        {},  # not under horovodrun
        {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CROSS_SIZE": "1"},  # one host: loopback is right
        {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CROSS_SIZE": "2"},  # MPI connects the ranks itself
        {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CROSS_SIZE": "x"},  # not ours to judge
    ],
)
def test_no_problem_where_gloo_does_not_connect_hosts(env):
    assert loopback_name_problem(env, lambda: "node1", resolving_to("127.0.0.1")) is None


def test_a_name_resolving_to_the_cluster_address_is_fine():
    assert loopback_name_problem(TWO_HOSTS, lambda: "node1", resolving_to("10.0.0.7")) is None


@pytest.mark.parametrize("address, refused", [("127.0.1.1", True), ("10.0.0.7", False)])
def test_check_hosts_asks_this_host_and_raises_a_user_error(monkeypatch, address, refused):
    import deepdensity.launch.hosts as hosts

    monkeypatch.setattr(hosts.socket, "gethostbyname", resolving_to(address))
    if refused:
        with pytest.raises(HostSetupError, match="loopback"):
            check_hosts(TWO_HOSTS)
    else:
        check_hosts(TWO_HOSTS)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CROSS_SIZE": "1"},
        {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CROSS_SIZE": "1"},
        TWO_HOSTS,
    ],
)
def test_a_name_that_does_not_resolve_is_refused_on_one_host_and_under_mpi_too(monkeypatch, env):
    """hvd.init() aborts without a word on a host whose own name does not resolve, whatever the
    controller and however many hosts (seen in a Debian 13 chroot whose /etc/hosts lacked it)."""
    import deepdensity.launch.hosts as hosts

    monkeypatch.setattr(hosts.socket, "gethostname", lambda: "node9")
    monkeypatch.setattr(hosts.socket, "gethostbyname", resolving_to(None))
    with pytest.raises(HostSetupError) as refused:
        check_hosts(env)
    assert "'node9' does not resolve" in str(refused.value) and "/etc/hosts" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_resolving_name_is_no_problem():
    assert unresolved_name_problem(lambda: "node1", resolving_to("10.0.0.7")) is None
    assert unresolved_name_problem(lambda: "node1", resolving_to("127.0.1.1")) is None


UNRESOLVABLE = "deepdensity-test.invalid"  # .invalid never resolves (RFC 6761)


def in_own_host_name(args):
    """args run in a UTS namespace of their own whose host name does not resolve (root and
    unshare(1) needed; the machine's own name is untouched)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) from util-linux")
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a UTS namespace here (root needed): {probe.stderr.decode().strip()}")
    script = f'hostname {UNRESOLVABLE} && exec "$@"'
    return ["unshare", "--uts", "sh", "-c", script, "sh", *args]


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "train.py", "--mode", "strong", "--config", SMOKE, "--set", "max_epochs=1"],
        [
            sys.executable,
            "-m",
            "deepdensity",
            "launch",
            "-np",
            "2",
            sys.executable,
            "train.py",
            "--mode",
            "strong",
            "--config",
            SMOKE,
        ],
    ],
    ids=["train.py", "launch"],
)
def test_train_and_launch_say_in_one_line_that_the_host_name_does_not_resolve(tmp_path, command):
    """For real: a host whose name resolves to nothing gets one error line and exit 2 from
    train.py (which would otherwise abort inside hvd.init()) and from launch (before horovodrun
    starts), and no run folder is made."""
    out = tmp_path / "run"
    proc = run(in_own_host_name([*command, "--out", str(out)]), check=False, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert lines[-1].startswith(f"error: this host's name '{UNRESOLVABLE}' does not resolve"), lines
    assert "/etc/hosts" in lines[-1] and sum(line.startswith("error:") for line in lines) == 1, lines
    assert not out.exists()
