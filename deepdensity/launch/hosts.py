"""What a Horovod launch needs from the hosts themselves, checked before hvd.init(), where a
failure is a C++ abort with no word of its cause: a host name that resolves (every launch) and,
for Gloo across hosts, one that does not resolve to loopback. Pure: no TensorFlow,
no Horovod."""

from __future__ import annotations

import socket
from typing import Callable, Mapping, Optional

from deepdensity.utils.errors import UserError


class HostSetupError(UserError):
    """A host set up so that Horovod's ranks cannot connect."""


def unresolved_name_problem(
    hostname: Optional[Callable[[], str]] = None, resolve: Optional[Callable[[str], str]] = None
) -> Optional[str]:
    """Why hvd.init() will abort on this host whatever the controller and however many hosts,
    or None: Horovod looks up the host's own name when it starts (Gloo's rendezvous and MPI's
    both), and where the name resolves to nothing (a container or chroot whose /etc/hosts lacks
    it) the process aborts inside init without a word."""
    name = (hostname or socket.gethostname)()
    try:
        (resolve or socket.gethostbyname)(name)
    except (OSError, UnicodeError):
        return (
            f"this host's name {name!r} does not resolve to an address, and Horovod aborts in its "
            f"init without it: add it to /etc/hosts (on one host '127.0.1.1 {name}' will do; across "
            f"hosts, this host's address on the network they share) or to DNS, then run the same "
            f"command again"
        )
    return None


def loopback_name_problem(
    env: Mapping[str, str], hostname: Optional[Callable[[], str]] = None, resolve: Optional[Callable[[str], str]] = None
) -> Optional[str]:
    """Why Gloo will not connect the ranks of several hosts, or None.

    Horovod 0.28.1 connects each process set's Gloo context (the global set is always made)
    on the address the host's name resolves to, not on HOROVOD_GLOO_IFACE (horovodrun's
    --network-interface), which only the first contexts use. Where the name resolves to a
    loopback address (Debian's /etc/hosts maps it to 127.0.1.1), the ranks hand each other
    127.x and the job aborts with "connect [127.0.0.1]:PORT: Connection refused"."""
    if env.get("HOROVOD_CONTROLLER", "").lower() != "gloo":
        return None
    try:
        several_hosts = int(env.get("HOROVOD_CROSS_SIZE", "1")) > 1
    except ValueError:
        return None
    if not several_hosts:
        return None
    name = (hostname or socket.gethostname)()
    try:
        address = (resolve or socket.gethostbyname)(name)
    except (OSError, UnicodeError):
        return unresolved_name_problem(lambda: name, resolve or socket.gethostbyname)
    if address.startswith("127.") or address == "::1":
        return (
            f"this host's name {name!r} resolves to {address}, a loopback address: Horovod's Gloo "
            f"would give the other hosts that address and fail to connect. Map {name} to this host's "
            f"address on the network the ranks share (/etc/hosts or DNS); see docs/cluster.md"
        )
    return None


def check_hosts(env: Mapping[str, str]) -> None:
    """Raise HostSetupError when Horovod cannot start on this host (unresolved_name_problem) or
    the hosts cannot connect (loopback_name_problem). `deepdensity launch` asks before it starts
    horovodrun, each rank before hvd.init()."""
    problem = unresolved_name_problem() or loopback_name_problem(env)
    if problem:
        raise HostSetupError(problem)
