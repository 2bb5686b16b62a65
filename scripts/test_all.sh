#!/usr/bin/env bash
# make test-all: every test once, in two pytest processes side by side. tests/cluster's two-host,
# elastic and Slurm tests spend much of their time waiting on daemons, the scheduler and
# launchers, so they run in a lane of their own while the other tests use the CPU
# (docs/performance.md#tests has what that gains). The cluster lane's output follows the
# others'; the exit status is the others' if they failed, else the cluster lane's. Each lane has
# its own temporary folder, new for each run (removed when both pass), so neither's processes or
# files are the other's or another run's.
#   scripts/test_all.sh PYTEST        (JUNIT_DIR=D: D/cluster.xml and D/others.xml)
set -uo pipefail
pytest=${1:?usage: scripts/test_all.sh PYTEST}
base=$(mktemp -d "${TMPDIR:-/tmp}/test-all.XXXXXX")
log="$base/cluster.log"
junit() { [ -z "${JUNIT_DIR:-}" ] || echo "--junitxml=$JUNIT_DIR/$1.xml"; }
start=$(date +%s)

# A lane in the background. A script's background job starts with Ctrl-C ignored; the lane gets
# it back, so that one Ctrl-C stops both lanes and each takes its daemons and namespaces down.
lane() {
    "$(dirname "$pytest")/python" -c \
        'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
        "$pytest" "$@" &
}

# reaped=the exit status of background job $1, waiting through the signals trapped below (a
# trapped signal ends `wait` early; a lane still tearing down is waited for again). Not in $(...):
# a subshell cannot wait for this shell's jobs.
reap() {
    while :; do
        wait "$1"
        reaped=$?
        kill -0 "$1" 2>/dev/null || break
    done
}

echo "make test-all: tests/cluster in a lane of its own beside the others (its output: $log, printed at the end)"
lane -q -rs --durations=10 --basetemp="$base/cluster" -o cache_dir="$base/cluster-cache" $(junit cluster) \
    tests/cluster > "$log" 2>&1
cluster=$!
lane -q -rs --durations=30 --basetemp="$base/others" $(junit others) --ignore=tests/cluster tests
others=$!
trap ':' INT                                   # a Ctrl-C reaches both lanes; wait for both to end
trap 'kill -TERM "$cluster" "$others" 2>/dev/null' TERM
trap 'kill -HUP "$cluster" "$others" 2>/dev/null' HUP
reap "$others"
others_code=$reaped
reap "$cluster"
cluster_code=$reaped
echo
echo "make test-all: tests/cluster (ran beside the others):"
cat "$log"
echo "make test-all: both lanes done in $(( $(date +%s) - start )) s (tests/cluster exit $cluster_code," \
     "the others exit $others_code)"
if [ "$others_code" -ne 0 ] || [ "$cluster_code" -ne 0 ]; then
    echo "make test-all: the tests' temporary folders are kept for a look: $base"
    [ "$others_code" -ne 0 ] && exit "$others_code"
    exit "$cluster_code"
fi
rm -rf "$base"
