#!/usr/bin/env bash
# Debian's Slurm (slurm-wlm: slurmctld, slurmd and the client commands) and munge, for
# tests/cluster/test_slurm.py. Needs root and the package registry; does nothing when they are
# there. No service is started: the tests start their own munged, slurmctld and slurmd with
# their own configuration in a temporary folder, and stop them.
set -euo pipefail
if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "error: installing slurm-wlm and munge needs root" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d exit 101: the packages must not start the machine's own munged or Slurm daemons
# (an existing policy-rc.d is the machine's own and stays as it is)
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
echo "Slurm installed: $(/usr/sbin/slurmctld -V 2>&1 | head -1 || true)"
