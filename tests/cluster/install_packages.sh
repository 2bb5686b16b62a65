#!/usr/bin/env bash
# Debian's openssh-server, slurm-wlm and munge, for tests/cluster: two hosts in network
# namespaces with an ssh server each (hosts.py), and a Slurm controller and nodes on them
# (slurm.py). Needs root and the package registry; installs only what is missing. No service
# is started: the tests start their own sshd, munged, slurmctld and slurmd with their own
# configuration, bound to the namespaces, and stop them.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ]; } || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "error: installing ${missing[*]} needs root" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d exit 101: the packages must not start the machine's own sshd, munged or Slurm
# daemons (an existing policy-rc.d is the machine's own and stays as it is)
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "installed: ${missing[*]}"
