"""A real Slurm cluster on one machine: slurmctld and one slurmd per host of TwoHosts (two
network namespaces with their own addresses and ssh servers), one munged for the machine's
credentials. Nodes `ddnode-a` and `ddnode-b`, one CPU each (`cpus`: more), partition `dd`.

    with SlurmCluster() as cluster:
        cluster.run(["sbatch", "--wrap", "hostname"])      # in host A, the login node

Needs root, `ip netns` and Debian's slurm-wlm, munge and openssh-server
(tests/cluster/install_packages.sh). Everything it starts (daemons, namespaces, the state and
spool folders in a temporary folder) goes on exit, on an error and on Ctrl-C alike.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.cluster.hosts import PREFIX, SSHD, ClusterUnavailable, TwoHosts, unavailable_reason

NODES = {"a": f"{PREFIX}node-a", "b": f"{PREFIX}node-b"}
PARTITION = "dd"
DAEMONS = ("slurmctld", "slurmd", "munged")


def slurm_installed() -> bool:
    """Is all that SlurmCluster needs here but the network namespaces themselves: root, `ip`,
    sshd, Slurm's daemons and commands? Asks nothing of the kernel: no namespace is made."""
    return (
        os.geteuid() == 0
        and shutil.which("ip") is not None
        and Path(SSHD).exists()
        and shutil.which("sbatch") is not None
        and all(shutil.which(d) is not None or Path(f"/usr/sbin/{d}").exists() for d in DAEMONS)
    )


def slurm_unavailable_reason():
    """None when SlurmCluster can run here, else why not (the tests' skip reason)."""
    reason = unavailable_reason()
    if reason:
        return reason
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if missing or shutil.which("sbatch") is None:
        missing_words = ", ".join(missing) or "sbatch"
        return f"needs slurm-wlm and munge ({missing_words} missing): run tests/cluster/install_packages.sh"
    return None


class SlurmCluster(TwoHosts):
    """TwoHosts with a controller on host A and a compute node on each host."""

    def __init__(self, cpus: int = 1):
        """cpus: the CPUs each node declares. Both nodes share this machine's cores, so more
        than it has oversubscribes them: Slurm then allots CPUs the hardware does not have
        (SlurmdParameters=config_overrides), which a job needing several CPUs on one node
        (the study's clock, horovodrun -np 4) asks for."""
        super().__init__(aliases={NODES[h]: h for h in self.names})
        self.cpus = cpus
        self.daemons = []

    def __enter__(self) -> "SlurmCluster":
        reason = slurm_unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        super().__enter__()
        try:
            self._slurm_files()
            self._start(
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--key-file={self.tmp / 'munge.key'}",
                    f"--socket={self.munge_socket}",
                    f"--pid-file={self.tmp / 'munged.pid'}",
                    f"--seed-file={self.tmp / 'munge.seed'}",
                    f"--log-file={self.tmp / 'munged.log'}",
                ],
                host=None,
                log="munged.out",
            )
            self._wait_for(lambda: self.munge_socket.exists(), "munged's socket")
            self._start(["slurmctld", "-D", "-i", "-f", str(self.conf)], host="a", log="slurmctld.out")
            self._wait_for(
                lambda: (
                    self.run(["scontrol", "ping"], check=False).returncode == 0
                    and "UP" in self.run(["scontrol", "ping"], check=False).stdout
                ),
                "slurmctld",
            )
            for host in self.names:
                self._start(
                    ["slurmd", "-D", "-N", NODES[host], "-f", str(self.conf)], host=host, log=f"slurmd-{host}.out"
                )
            self._wait_for(self._nodes_idle, "both nodes idle")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @property
    def conf(self) -> Path:
        return self.tmp / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.tmp / "munge" / "munge.socket"

    def env(self) -> dict:
        """The environment every Slurm command of the tests runs with (the cluster's config)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _slurm_files(self) -> None:
        (self.tmp / "munge").mkdir()
        (self.tmp / "munge.key").write_bytes(os.urandom(1024))
        os.chmod(self.tmp / "munge.key", 0o400)
        os.chmod(self.tmp / "munge", 0o711)  # munged wants others able to reach its socket
        for folder in ("state", "spool", *(f"spool/{n}" for n in NODES.values())):
            (self.tmp / folder).mkdir()
        # slurmd sets up its cgroup plugin even with task/none; this machine has cgroup v1
        # hierarchies under a tmpfs, which autodetection does not recognise
        (self.tmp / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainCores=no\nConstrainRAMSpace=no\n"
        )
        a, b = self.address["a"], self.address["b"]
        self.conf.write_text(
            # slurmctld accepts to run only on a host of this name: the machine's (both namespaces share it)
            f"ClusterName=dd\nSlurmctldHost={socket.gethostname()}({a})\nSlurmUser=root\nSlurmdUser=root\n"
            "MailProg=/bin/true\n"
            # cred_expire: also how long a requeued job waits before it starts again (120 s by default)
            f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket},cred_expire=30\nCredType=cred/munge\n"
            f"StateSaveLocation={self.tmp / 'state'}\nSlurmdSpoolDir={self.tmp / 'spool'}/%n\n"
            f"SlurmctldPidFile={self.tmp / 'slurmctld.pid'}\nSlurmdPidFile={self.tmp / 'slurmd-%n.pid'}\n"
            f"SlurmctldLogFile={self.tmp / 'slurmctld.log'}\nSlurmdLogFile={self.tmp / 'slurmd-%n.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nReturnToService=2\n"
            # no accounting database, hence no AccountingStorageEnforce: Slurm takes any account a
            # job names (-A) without checking it against associations, and keeps it on the job
            "SchedulerType=sched/backfill\nAccountingStorageType=accounting_storage/none\n"
            "JobCompType=jobcomp/none\nJobAcctGatherType=jobacct_gather/none\n"
            # jobs stay in scontrol's view for 10 minutes after they end, so a driver that was
            # away reads their end state
            "MinJobAge=600\nKillWait=30\nInactiveLimit=0\nSlurmctldTimeout=30\nSlurmdTimeout=30\n"
            # a node declaring more CPUs than the machine has registers only with config_overrides;
            # without, slurmctld sets it INVAL ("Low socket*core*thread count, Low CPUs")
            + ("SlurmdParameters=config_overrides\n" if self.cpus > 1 else "")
            + f"NodeName={NODES['a']} NodeAddr={a} CPUs={self.cpus} State=UNKNOWN\n"
            f"NodeName={NODES['b']} NodeAddr={b} CPUs={self.cpus} State=UNKNOWN\n"
            f"PartitionName={PARTITION} Nodes={NODES['a']},{NODES['b']} Default=YES MaxTime=INFINITE State=UP\n"
        )

    def _start(self, command: list, host, log: str) -> None:
        prefix = ["ip", "netns", "exec", self.namespace(host)] if host else []
        out = open(self.tmp / log, "w")
        self.daemons.append(
            subprocess.Popen(
                prefix + command, stdout=out, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True
            )
        )

    def _wait_for(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p for p in self.daemons if p.poll() is not None]
            if dead:
                raise ClusterUnavailable(
                    f"{dead[0].args} exited ({dead[0].returncode}) waiting for {what}: " + self.logs()[-2000:]
                )
            time.sleep(0.3)
        raise ClusterUnavailable(f"no {what} within {timeout:.0f} s: " + self.logs()[-2000:])

    def _nodes_idle(self) -> bool:
        states = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout.split()
        return states.count("idle") == 2

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
            for p in sorted(self.tmp.glob("*.log")) + sorted(self.tmp.glob("*.out"))
        )

    def run(self, command: list, check=True, timeout=900, env=None, cwd=None) -> subprocess.CompletedProcess:
        return super().run(command, check=check, timeout=timeout, env=env or self.env(), cwd=cwd)

    def job(self, job_id: str) -> dict:
        """`scontrol show job` of a job the controller still remembers (MinJobAge), as fields."""
        from deepdensity.launch.sbatch_resubmit import parse_show_job

        return parse_show_job(self.run(["scontrol", "show", "job", job_id]).stdout)

    def start(self, command: list, log: Path, env=None) -> subprocess.Popen:
        return super().start(command, log, env=env or self.env())

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.daemons):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # a job step slurmd started and that outlived it (slurmstepd) is ours too
        for pid in self.job_processes():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        super().__exit__(*exc)

    def job_processes(self) -> list:
        """Processes of this cluster still alive: its daemons and slurmstepd (by config path)."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if (
                self.tmp is not None
                and (str(self.tmp) in cmd or f"SLURM_CONF={self.conf}" in environ)
                and int(pid) != os.getpid()
            ):
                found.append(int(pid))
        return found
