"""`horovodrun -H` across two hosts for real: two network namespaces with an ssh server each
(tests/cluster/hosts.py), one rank per host, over TCP on the veth pair between them: under Gloo,
and under MPI where Horovod was built with it (mpirun starts the remote rank over ssh; the
`np2` fixture skips a controller check-build does not list).

Strong scaling and warmup across the two hosts must follow the same path as two ranks on one
host and as `--emulate-workers 2`; nothing of the two hosts may be left afterwards."""

import json
import re
import sys

import pytest

from tests.cluster.hosts import NIC, TwoHosts, leftovers, unavailable_reason
from tests.support import ROOT, SMOKE, horovodrun
from tests.training.test_horovod import assert_same_path, controller_cases, launch, losses, np2  # noqa: F401 (np2: a fixture)

_reason = unavailable_reason() if horovodrun() else "horovodrun not installed"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_reason is not None, reason=f"two hosts: {_reason}")]

# the line in one write: mpirun tags each chunk it reads, and with PYTHONUNBUFFERED set print()
# writes each of its arguments apart ("RANK 0[1,0]<stdout>: [1,1]<stdout>:RANK...")
RANK_PROBE = (
    "import subprocess, sys, horovod.tensorflow as hvd, tensorflow as tf; hvd.init(); "
    "nic = subprocess.run(['ip', '-4', '-o', 'addr', 'show', '%s'], capture_output=True, text=True); "
    "total = hvd.allreduce(tf.constant(float(hvd.rank() + 1)), op=hvd.Sum).numpy(); "
    "sys.stdout.write(f'RANK {hvd.rank()} {nic.stdout.split()[3]} {total}\\n')"
) % NIC


def on_two_hosts(hosts, command: list, controller: str = "--gloo", check=True):
    """`horovodrun CONTROLLER -np 2 -H a:1,b:1 --network-interface dd0 COMMAND` from host A."""
    return hosts.run(
        [horovodrun(), "-np", "2", "-H", hosts.horovod_hosts(1), "--network-interface", NIC, controller, *command],
        check=check,
    )


def test_each_rank_runs_on_its_own_host_and_they_allreduce(np2):
    with TwoHosts() as hosts:
        out = on_two_hosts(hosts, [sys.executable, "-c", RANK_PROBE], np2[1]).stdout
    ranks = dict(re.findall(r"RANK (\d) (\S+) ", out))
    assert ranks == {"0": f"{hosts.address['a']}/24", "1": f"{hosts.address['b']}/24"}, out
    assert out.count(" 3.0") == 2, "1 + 2 summed across the hosts on both ranks"
    assert leftovers() == []


# strong scaling across the hosts under each controller; warmup (its lr schedule is no
# controller's concern, its allreduce is strong's) under one
@pytest.mark.parametrize("mode, np2", controller_cases(["strong"], ["warmup"]), indirect=["np2"])
def test_two_hosts_follow_the_one_host_path(tmp_path, smoke_data, mode, np2, one_process):
    out = tmp_path / "two-hosts"
    with TwoHosts() as hosts:
        on_two_hosts(
            hosts,
            [
                sys.executable,
                str(ROOT / "train.py"),
                "--mode",
                mode,
                "--config",
                SMOKE,
                "--set",
                f"data_path={smoke_data}",
                "--out",
                str(out),
                "--quiet",
            ],
            np2[1],
        )
    assert leftovers() == [], "namespaces, veth or sshd left behind"
    ran_under = json.loads((out / "config.json").read_text())["launch"]
    assert ran_under["controller"] == np2[1].lstrip("-") and "TCP" in ran_under["transport"], ran_under
    two_hosts = losses(out)
    one_host = launch(np2, mode, tmp_path / "one-host", smoke_data)
    emulated, _ = one_process(mode, "--emulate-workers", "2")
    assert_same_path(one_host, two_hosts)
    assert_same_path(emulated, two_hosts)


def test_a_host_name_on_loopback_is_refused_with_one_line(tmp_path, smoke_data):
    """Where each host's name resolves to 127.0.0.1, Horovod's Gloo would abort in init with
    "connect [127.0.0.1]: Connection refused"; train.py says what to fix, once."""
    with TwoHosts(names_resolve_to_hosts=False) as hosts:
        proc = on_two_hosts(
            hosts,
            [
                sys.executable,
                str(ROOT / "train.py"),
                "--mode",
                "strong",
                "--config",
                SMOKE,
                "--set",
                f"data_path={smoke_data}",
                "--out",
                str(tmp_path / "run"),
            ],
            check=False,
        )
    text = proc.stdout + proc.stderr
    said = [line for line in text.splitlines() if "resolves to 127.0.0.1, a loopback address" in line]
    assert proc.returncode != 0 and len(said) == 1, text[-3000:]
    assert "Connection refused" not in text and not (tmp_path / "run").exists()
    assert leftovers() == []


def test_a_failure_inside_leaves_nothing_behind():
    with pytest.raises(AssertionError):
        with TwoHosts() as hosts:
            hosts.run(["false"])
    assert leftovers() == []
