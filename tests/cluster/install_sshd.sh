#!/usr/bin/env bash
# Debian's openssh-server, for tests/cluster (two hosts in network namespaces). Needs root and
# the package registry; does nothing when sshd is already there. The service is not started:
# the tests start their own sshd per namespace, bound to that namespace's address only.
set -euo pipefail
if [ -x /usr/sbin/sshd ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "error: installing openssh-server needs root" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d exit 101: the package must not start a system-wide sshd on this machine (an
# existing policy-rc.d is the machine's own and stays as it is)
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
echo "openssh-server installed: $(/usr/sbin/sshd -V 2>&1 | head -1 || true)"
