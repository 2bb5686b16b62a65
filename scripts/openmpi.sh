#!/usr/bin/env bash
# MPI beside Gloo for `make install`: prints on stdout the variable that builds Horovod with MPI
# (HOROVOD_WITH_MPI=1) where an MPI's compiler wrapper and launcher are there (mpicxx, mpirun),
# after installing Debian's OpenMPI (openmpi-bin, libopenmpi-dev) where they are missing and this
# is root with apt-get; else HOROVOD_WITHOUT_MPI=1, and one line on stderr saying that Horovod
# gets Gloo alone and what to install for MPI. A machine without MPI still installs; only an
# argument other than auto or off is an error (exit 2).
#
#   scripts/openmpi.sh [auto|off] [VENV]     (auto: make install's default; make install MPI=off:
#                                             Gloo alone, nothing installed)
set -uo pipefail
want=${1:-auto}
venv=${2:-.venv}
have_mpi() { command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; }
gloo_alone() {
    echo "note: Horovod is built with Gloo alone ($1); for MPI beside it, $2" >&2
    echo HOROVOD_WITHOUT_MPI=1
    exit 0
}
again="then: rm $venv/.installed && make install"
case "$want" in auto|off) ;; *) echo "error: MPI=$want: auto or off" >&2; exit 2;; esac
if [ "$want" = off ]; then
    gloo_alone "MPI=off" "run: rm $venv/.installed && make install"
fi
if ! have_mpi; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's OpenMPI for Horovod's MPI controller: openmpi-bin libopenmpi-dev" >&2
        # stale package lists may still hold OpenMPI: a failed update is said, and install tried
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 \
            || echo "warning: apt-get update failed; installing from the package lists there are" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >&2 \
            || gloo_alone "apt-get install openmpi-bin libopenmpi-dev failed" "fix that, $again"
    else
        gloo_alone "no mpicxx and mpirun on PATH" \
            "install OpenMPI (Debian/Ubuntu as root: apt-get install openmpi-bin libopenmpi-dev), $again"
    fi
    have_mpi || gloo_alone "mpicxx or mpirun still missing after apt-get" "install OpenMPI, $again"
fi
echo "Horovod's controllers: MPI ($(mpirun --version 2>/dev/null | head -1)) beside Gloo" >&2
echo HOROVOD_WITH_MPI=1
