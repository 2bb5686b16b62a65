"""Two real hosts on one machine: two Linux network namespaces joined by a veth pair, each
with its own address and its own ssh server, so that `horovodrun -H` launches over ssh and
Horovod's Gloo connects the ranks over TCP between them.

    with TwoHosts() as hosts:
        hosts.run(["horovodrun", "-np", "2", "-H", hosts.horovod_hosts(1), ...])   # in host A

Needs root, `ip netns` and Debian's openssh-server (tests/cluster/install_packages.sh). Everything
it makes (namespaces, the veth pair, the sshd processes, keys in a temporary folder) goes on
exit, on an error and on Ctrl-C alike; `leftovers()` lists any that did not.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PREFIX = "ddhost"  # names of everything this makes start with it
SUBNET = "10.231.7"  # a private /24 nobody else on the machine uses
NIC = "dd0"  # the veth end's name inside each namespace
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


class ClusterUnavailable(RuntimeError):
    """Why two hosts cannot be made here (not root, no netns, no sshd): the test's skip reason."""


def unavailable_reason():
    """None when TwoHosts can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and an ssh server per namespace)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    if not Path(SSHD).exists():
        return "needs openssh-server: run tests/cluster/install_packages.sh (make test-cluster does)"
    probe = subprocess.run(["ip", "netns", "add", f"{PREFIX}-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"network namespaces unavailable: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"{PREFIX}-probe"], capture_output=True)
    return None


def _sh(*args, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ClusterUnavailable(f"{' '.join(args)}: {proc.stderr.strip()}")
    return proc


class TwoHosts:
    """Host A (10.231.7.1) and host B (10.231.7.2), namespaces ddhost-a and ddhost-b."""

    names = ("a", "b")

    def __init__(self, names_resolve_to_hosts: bool = True, aliases=None):
        """names_resolve_to_hosts=False keeps the machine's /etc/hosts, where the host name
        is 127.0.0.1 in both namespaces (to test that train.py refuses it with one line).
        aliases: {name: host} more names that resolve to a host in both namespaces (a
        scheduler's node names) and that ssh reaches as it reaches the addresses."""
        self.names_resolve_to_hosts = names_resolve_to_hosts
        self.aliases = dict(aliases or {})
        self.tmp = None
        self.made_etc_netns = False
        self.sshd = []
        self.address = {n: f"{SUBNET}.{i + 1}" for i, n in enumerate(self.names)}

    def namespace(self, host: str) -> str:
        return f"{PREFIX}-{host}"

    def __enter__(self) -> "TwoHosts":
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-"))
        self.made_etc_netns = not Path("/etc/netns").exists()
        try:
            self._network()
            self._keys()
            self._etc_files()
            for host in self.names:
                self._start_sshd(host)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _network(self) -> None:
        for host in self.names:
            _sh("ip", "netns", "add", self.namespace(host))
            _sh("ip", "-n", self.namespace(host), "link", "set", "lo", "up")
        _sh("ip", "link", "add", f"{PREFIX}-va", "type", "veth", "peer", "name", f"{PREFIX}-vb")
        for host in self.names:
            ns, end = self.namespace(host), f"{PREFIX}-v{host}"
            _sh("ip", "link", "set", end, "netns", ns)
            _sh("ip", "-n", ns, "link", "set", end, "name", NIC)
            _sh("ip", "-n", ns, "addr", "add", f"{self.address[host]}/24", "dev", NIC)
            _sh("ip", "-n", ns, "link", "set", NIC, "up")

    def _keys(self) -> None:
        """One client key, authorised for root on both hosts, and one host key."""
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.tmp / "id"))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.tmp / "host_key"))
        shutil.copy(self.tmp / "id.pub", self.tmp / "authorized_keys")

    def _etc_files(self) -> None:
        """Files `ip netns exec NS` bind-mounts over /etc's for the commands it runs."""
        # Every ssh in the namespaces (horovodrun's too) uses this key and trusts these hosts,
        # and root's own ~/.ssh is left alone: /etc/netns/NS/ssh stands for /etc/ssh, and ssh
        # reads /etc/ssh/ssh_config.
        for host in self.names:
            etc = self._etc(host)
            etc.mkdir(parents=True, exist_ok=True)
            # Each host's name resolves to its own address, as on a cluster. The machine's
            # /etc/hosts maps it to 127.0.0.1, and Horovod 0.28.1's Gloo process-set contexts
            # ignore --network-interface and bind to the host name's address: the ranks would
            # tell each other 127.0.0.1 and fail to connect (docs/cluster.md).
            if self.names_resolve_to_hosts:
                (etc.parent / "hosts").write_text(
                    f"127.0.0.1 localhost\n{self.address[host]} {socket.gethostname()}\n"
                    + "".join(f"{self.address[h]} {alias}\n" for alias, h in self.aliases.items())
                )
            patterns = " ".join([f"{SUBNET}.*", *self.aliases])
            (etc / "ssh_config").write_text(
                f"Host {patterns}\n  IdentityFile {self.tmp / 'id'}\n  StrictHostKeyChecking no\n"
                f"  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  BatchMode yes\n"
            )

    def _etc(self, host: str) -> Path:
        return Path("/etc/netns") / self.namespace(host) / "ssh"

    def _start_sshd(self, host: str) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        config = self.tmp / f"sshd_{host}"
        config.write_text(
            f"ListenAddress {self.address[host]}\nPort 22\nHostKey {self.tmp / 'host_key'}\n"
            f"AuthorizedKeysFile {self.tmp / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"PidFile {self.tmp / f'sshd_{host}.pid'}\nAcceptEnv *\nPermitUserEnvironment yes\n"
        )
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(host), SSHD, "-D", "-e", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / f"sshd_{host}.log", "w"),
        )
        self.sshd.append(proc)
        for _ in range(100):  # until it accepts a login
            if self.ssh(host, ["true"], check=False).returncode == 0:
                return
            if proc.poll() is not None:
                raise ClusterUnavailable(
                    f"sshd on host {host} exited: {(self.tmp / f'sshd_{host}.log').read_text()[-500:]}"
                )
            time.sleep(0.1)
        raise ClusterUnavailable(f"sshd on host {host} does not accept the key")

    def ssh(self, host: str, command: list, check=True) -> subprocess.CompletedProcess:
        """`command` on `host` over ssh, from host A (as horovodrun's own ssh would)."""
        return self.run(["ssh", f"root@{self.address[host]}", *command], check=check)

    def horovod_hosts(self, slots: int) -> str:
        return ",".join(f"{self.address[h]}:{slots}" for h in self.names)

    def run(self, command: list, check=True, timeout=900, env=None, cwd=None) -> subprocess.CompletedProcess:
        """`command` in host A's namespace (the launcher's host), in folder `cwd` if given."""
        proc = subprocess.run(
            ["ip", "netns", "exec", self.namespace("a"), *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc

    def start(self, command: list, log: Path, env=None) -> subprocess.Popen:
        """`command` in host A's namespace, in the background, its output into `log`."""
        with open(log, "w") as f:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.namespace("a"), *command],
                stdout=f,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )

    def pids(self, host: str, word: str) -> list:
        """The processes running in `host`'s namespace whose command line holds `word`."""
        found = []
        for pid in _sh("ip", "netns", "pids", self.namespace(host), check=False).stdout.split():
            try:
                if word in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(pid))
            except OSError:  # gone meanwhile
                pass
        return found

    def __exit__(self, *exc) -> None:
        for proc in self.sshd:
            proc.terminate()
        for proc in self.sshd:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for host in self.names:  # deleting a namespace deletes its veth end
            _sh("ip", "netns", "del", self.namespace(host), check=False)
            shutil.rmtree(self._etc(host).parent, ignore_errors=True)
        _sh("ip", "link", "del", f"{PREFIX}-va", check=False)
        if self.made_etc_netns:
            shutil.rmtree("/etc/netns", ignore_errors=True)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def leftovers() -> list:
    """Namespaces, links and sshd processes of ours still present (should be none)."""
    found = [
        line.split()[0]
        for line in _sh("ip", "netns", "list", check=False).stdout.splitlines()
        if line.startswith(PREFIX)
    ]
    found += [
        line.split(":")[1].strip().split("@")[0]
        for line in _sh("ip", "-o", "link", check=False).stdout.splitlines()
        if f"{PREFIX}-v" in line
    ]
    found += [str(p) for p in Path("/etc/netns").glob(f"{PREFIX}-*")]
    found += [
        f"sshd pid {line.split()[0]}"
        for line in _sh("ps", "-eo", "pid,args", check=False).stdout.splitlines()
        if "sshd" in line and f"/{PREFIX}-" in line
    ]
    return found
