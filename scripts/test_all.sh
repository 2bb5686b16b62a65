#!/usr/bin/env bash
# make test-all: every test once, in three pytest processes side by side:
#   cluster   tests/cluster: the two-host, elastic and Slurm tests, which spend much of their
#             time waiting on daemons, the scheduler and launchers;
#   training  tests/training: runs, horovodrun and the interrupt chains;
#   others    the rest (the study, tools, model, data, ...), whose output is shown as it comes.
# One pytest used about one core of two (tests/training/test_train.py alone: 330 s of CPU in
# 332 s), so two lanes of the CPU's tests and the cluster lane's waits keep both cores busy
# (docs/performance.md#tests). The split is by folder, so that each folder's session fixtures
# (the tiny study in tests/study, ...) are made once. The other lanes' output follows; the exit
# status is the first failing lane's, in the order others, training, cluster. Each lane has its
# own temporary folder, new for each run (removed when all pass), so that no lane's processes or
# files are another's or another run's.
#   scripts/test_all.sh PYTEST        (JUNIT_DIR=D: D/LANE.xml for each lane)
set -uo pipefail
pytest=${1:?usage: scripts/test_all.sh PYTEST}
base=$(mktemp -d "${TMPDIR:-/tmp}/test-all.XXXXXX")
junit() { [ -z "${JUNIT_DIR:-}" ] || echo "--junitxml=$JUNIT_DIR/$1.xml"; }
start=$(date +%s)

# A lane in the background. A script's background job starts with Ctrl-C ignored; the lane gets
# it back, so that one Ctrl-C stops every lane and each takes its daemons and namespaces down.
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

echo "make test-all: tests/cluster and tests/training in lanes of their own beside the others" \
     "(their output: $base/cluster.log and training.log, printed at the end)"
lane -q -rs --durations=10 --basetemp="$base/cluster" -o cache_dir="$base/cluster-cache" $(junit cluster) \
    tests/cluster > "$base/cluster.log" 2>&1
cluster=$!
lane -q -rs --durations=20 --basetemp="$base/training" -o cache_dir="$base/training-cache" $(junit training) \
    tests/training > "$base/training.log" 2>&1
training=$!
lane -q -rs --durations=20 --basetemp="$base/others" $(junit others) \
    --ignore=tests/cluster --ignore=tests/training tests
others=$!
trap ':' INT                                   # a Ctrl-C reaches every lane; wait for all to end
trap 'kill -TERM "$cluster" "$training" "$others" 2>/dev/null' TERM
trap 'kill -HUP "$cluster" "$training" "$others" 2>/dev/null' HUP
reap "$others"
others_code=$reaped
reap "$training"
training_code=$reaped
reap "$cluster"
cluster_code=$reaped
for name in training cluster; do
    echo
    echo "make test-all: tests/$name (ran beside the others):"
    cat "$base/$name.log"
done
echo "make test-all: every lane done in $(( $(date +%s) - start )) s (the others exit $others_code," \
     "tests/training exit $training_code, tests/cluster exit $cluster_code)"
for code in "$others_code" "$training_code" "$cluster_code"; do
    if [ "$code" -ne 0 ]; then
        echo "make test-all: the tests' temporary folders are kept for a look: $base"
        exit "$code"
    fi
done
rm -rf "$base"
