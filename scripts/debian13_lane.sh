#!/usr/bin/env bash
# .ci/run's Debian 13 lane: the README's set-up as a user of Debian 13 (trixie: Python 3.13,
# gcc 14, OpenMPI 5) runs it, in a Debian 13 root made by scripts/debian_root.sh. The
# README's prerequisites are installed with apt-get, this checkout's HEAD is cloned in (what is
# committed, as a user's `git clone` gets it), then `make install` and `make test-smoke` (the
# fast tier and the smoke tests: horovodrun -np 2 under MPI following one process, the stack
# check) run inside.
#
#   scripts/debian13_lane.sh install ROOT   make the root, clone, make install
#   scripts/debian13_lane.sh test ROOT      make test-smoke in it
#   scripts/debian13_lane.sh down ROOT      unmount it and remove it (nothing left mounted)
#
# Needs root. `install` and `test` unmount what they mounted when they end, however they end.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: scripts/debian13_lane.sh install|test|down ROOT}
root=${2:?usage: scripts/debian13_lane.sh install|test|down ROOT}
# the README's prerequisites of `make install` on Debian and Ubuntu
PREREQUISITES="python3-venv python3-dev g++ make git"
inside() { scripts/debian_root.sh run "$root" bash -c "$1"; }

case "$what" in
    install)
        trap 'scripts/debian_root.sh down "$root"' EXIT
        scripts/debian_root.sh up "$root" trixie
        inside "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PREREQUISITES > /dev/null"
        inside 'echo "Debian $(cat /etc/debian_version), $(python3 --version), $(g++ --version | head -1)"'
        rm -rf "$root/root/deepdensity"
        git clone --quiet --no-hardlinks "$PWD" "$root/root/deepdensity"
        inside 'cd /root/deepdensity && make install'
        ;;
    test)
        trap 'scripts/debian_root.sh down "$root"' EXIT
        scripts/debian_root.sh up "$root" trixie
        inside 'cd /root/deepdensity && make test-smoke'
        ;;
    down)
        scripts/debian_root.sh down "$root"
        # never remove through a mount: what is bound in (/dev, /sys) is the machine's own
        if awk -v r="$(realpath -m "$root")" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
            echo "error: $root still has mounts under it; not removed" >&2
            exit 1
        fi
        rm -rf "$root" "$root.debootstrap.log"
        ;;
    *) echo "usage: scripts/debian13_lane.sh install|test|down ROOT" >&2; exit 2 ;;
esac
