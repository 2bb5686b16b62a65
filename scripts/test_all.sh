#!/usr/bin/env bash
# make test-all: every test once, in two pytest processes side by side. tests/cluster's two-host,
# elastic and Slurm tests spend most of their time waiting on daemons, the scheduler and launchers
# (docs/performance.md#tests has the measurement), so they run in a lane of their own while the
# other tests keep the CPU busy. The cluster lane's output follows the other's; the exit status
# is the worse of the two. Each lane has its own temporary folder, so neither's processes or
# files are the other's.
#   scripts/test_all.sh PYTEST        (JUNIT_DIR=D: D/cluster.xml and D/others.xml)
set -uo pipefail
pytest=${1:?usage: scripts/test_all.sh PYTEST}
base=${TMPDIR:-/tmp}/pytest-of-$(id -un)
mkdir -p "$base"
log="$base/test-all-cluster.log"
junit() { [ -z "${JUNIT_DIR:-}" ] || echo "--junitxml=$JUNIT_DIR/$1.xml"; }
start=$(date +%s)
# A script's background job starts with Ctrl-C ignored; the lane gets it back, so that one Ctrl-C
# stops both lanes and each takes its daemons and namespaces down.
"$(dirname "$pytest")/python" -c \
    'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    "$pytest" -q -rs --durations=10 --basetemp="$base/test-all-cluster" $(junit cluster) tests/cluster \
    > "$log" 2>&1 &
cluster=$!
trap ':' INT                       # on a Ctrl-C, wait below for both lanes to end
echo "make test-all: tests/cluster in a lane of its own beside the others (its output: $log, printed at the end)"
"$pytest" -q -rs --durations=30 --basetemp="$base/test-all-others" $(junit others) --ignore=tests/cluster tests
others=$?
wait "$cluster"
cluster_code=$?
echo
echo "make test-all: tests/cluster (ran beside the others):"
cat "$log"
echo "make test-all: both lanes done in $(( $(date +%s) - start )) s (tests/cluster exit $cluster_code, the others exit $others)"
[ "$others" -ne 0 ] && exit "$others"
exit "$cluster_code"
