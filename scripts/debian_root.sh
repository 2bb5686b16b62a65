#!/usr/bin/env bash
# A Debian root of another release (Debian 13 "trixie" by default: Python 3.13, gcc 14, OpenMPI
# 5) to install and test the project in, as a user of that release would: .ci/run's Debian 13
# lane. Made with `debootstrap --variant=minbase` from this machine's own Debian archive (the URI
# in its apt sources: the only network these machines have is the package registries), with
# /proc, /sys, /dev, /dev/pts and /dev/shm bound in and the machine's CA bundle, resolver, hosts
# file and pip settings copied in; the local package folders those pip settings name are bound
# read-only. Needs root.
#
#   scripts/debian_root.sh up DIR [SUITE]   make DIR/ (kept if made before) and mount into it
#   scripts/debian_root.sh run DIR CMD...   run CMD inside, as root, from /
#   scripts/debian_root.sh down DIR         unmount everything under DIR (DIR itself is kept)
#
# `down` is safe to run twice and after a failed `up`; .ci/run calls it from its EXIT trap, so
# that no mount outlives the run.
set -euo pipefail
usage="usage: scripts/debian_root.sh up DIR [SUITE] | run DIR CMD... | down DIR"
what=${1:?$usage}
dir=${2:?$usage}
shift 2

# the mounts under DIR, deepest first (findmnt lists them in mount order)
mounts_under() {
    local real
    real=$(realpath -m "$dir")
    awk -v root="$real" '$2 == root || index($2, root "/") == 1 { print $2 }' /proc/self/mounts | sort -r
}

down() {
    local m
    for m in $(mounts_under); do
        umount "$m" 2>/dev/null || umount -l "$m"
    done
}

# this machine's Debian archive: the first URI of its apt sources that serves Debian itself
archive() {
    local uri
    uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -E 'debian/?( |$)' | grep -v security | head -1 \
        | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//; s/[[:space:]].*//')
    echo "${uri:-http://deb.debian.org/debian}"
}

bind() {            # bind SOURCE under DIR at the same path (read-only with ro)
    local src=$1 ro=${2:-}
    mkdir -p "$dir$src"
    mountpoint -q "$dir$src" && return 0
    mount --bind "$src" "$dir$src"
    [ -z "$ro" ] || mount -o remount,bind,ro "$dir$src"
}

up() {
    local suite=${1:-trixie}
    [ "$(id -u)" -eq 0 ] || { echo "error: a Debian root needs root (debootstrap, mount)" >&2; exit 2; }
    command -v debootstrap >/dev/null || {
        echo "installing debootstrap" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2 \
            || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2; }
    }
    if [ ! -x "$dir/usr/bin/apt-get" ]; then
        echo "debootstrap --variant=minbase $suite $dir $(archive)" >&2
        debootstrap --variant=minbase "$suite" "$dir" "$(archive)" > "$dir.debootstrap.log" 2>&1 \
            || { tail -20 "$dir.debootstrap.log" >&2; exit 1; }
    fi
    trap down ERR
    mountpoint -q "$dir/proc" || mount -t proc proc "$dir/proc"
    bind /sys ro
    bind /dev
    bind /dev/pts
    bind /dev/shm
    cp -L /etc/resolv.conf /etc/hosts "$dir/etc/" 2>/dev/null || true
    mkdir -p "$dir/etc/ssl/certs"
    cp -L /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
    # and where update-ca-certificates reads it, so that installing Debian's ca-certificates
    # inside (python3 pulls it in) adds this machine's authorities instead of dropping them
    mkdir -p "$dir/usr/local/share/ca-certificates"
    cp -L /etc/ssl/certs/ca-certificates.crt "$dir/usr/local/share/ca-certificates/machine-bundle.crt"
    local f p
    for f in /etc/pip.conf /etc/xdg/pip/pip.conf /etc/xdg/pip/constraints.txt "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
        [ -f "$f" ] || continue
        mkdir -p "$dir$(dirname "$f")"
        cp -L "$f" "$dir$f"
        # the local folders a pip setting names (find-links, file:// indexes), read-only
        for p in $(grep -oE '(file://)?/[^[:space:]]+' "$f" | sed 's#^file://##'); do
            case "$p" in /etc/*) continue;; */simple) p=${p%/simple};; esac
            [ -d "$p" ] && bind "$p" ro
        done
    done
    for p in ${PIP_FIND_LINKS:-}; do [ -d "$p" ] && bind "$p" ro; done
    trap - ERR
}

case "$what" in
    up) up "$@" ;;
    run)
        [ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
        # a clean environment but for what pip and the locale need; HOME is root's inside
        exec chroot "$dir" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            ${PIP_FIND_LINKS:+PIP_FIND_LINKS="$PIP_FIND_LINKS"} PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-180} \
            PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt "$@" ;;
    down) down ;;
    *) echo "$usage" >&2; exit 2 ;;
esac
