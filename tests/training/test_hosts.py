"""The multi-host check before hvd.init(): a host name that resolves to loopback under the
Gloo controller on several hosts is refused with a line that says what to fix."""
import pytest

from deepdensity.training.hosts import HostSetupError, check_hosts, loopback_name_problem

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


@pytest.mark.parametrize("env", [
    {},                                                          # not under horovodrun
    {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CROSS_SIZE": "1"},   # one host: loopback is right
    {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CROSS_SIZE": "2"},    # MPI connects the ranks itself
    {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CROSS_SIZE": "x"},   # not ours to judge
])
def test_no_problem_where_gloo_does_not_connect_hosts(env):
    assert loopback_name_problem(env, lambda: "node1", resolving_to("127.0.0.1")) is None


def test_a_name_resolving_to_the_cluster_address_is_fine():
    assert loopback_name_problem(TWO_HOSTS, lambda: "node1", resolving_to("10.0.0.7")) is None


@pytest.mark.parametrize("address, refused", [("127.0.1.1", True), ("10.0.0.7", False)])
def test_check_hosts_asks_this_host_and_raises_a_user_error(monkeypatch, address, refused):
    import deepdensity.training.hosts as hosts
    monkeypatch.setattr(hosts.socket, "gethostbyname", resolving_to(address))
    if refused:
        with pytest.raises(HostSetupError, match="loopback"):
            check_hosts(TWO_HOSTS)
    else:
        check_hosts(TWO_HOSTS)
