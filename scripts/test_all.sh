#!/usr/bin/env bash
# make test-all: every test once, in three pytest processes side by side:
#   cluster   tests/cluster: the two-host, elastic and Slurm tests, which spend much of their
#             time waiting on daemons, the scheduler and launchers;
#   training  tests/training: runs, horovodrun and the interrupt chains;
#   others    the rest (the study, tools, model, data, ...), whose output is shown as it comes.
# The split is by folder, so that each folder's session fixtures (the tiny study in
# tests/study, ...) are made once. A fourth lane for the interrupt chains ended make test-all
# 260-300 s sooner here, but put plain horovodrun's MPI chain beside more load, and its first
# interrupt then met a limit since mended (rank 0 held in a GIL-held stretch of TensorFlow's
# import past mpirun's kill: training/line_watcher.py) in 2 runs of 3; the four lanes have not
# been run again since (docs/performance.md#tests). The other
# lanes' output follows; the exit status is the first failing lane's, in the order of LANES.
# Each lane has its own temporary folder, new for each run (removed when all pass), so that no
# lane's processes or files are another's or another run's.
#   scripts/test_all.sh PYTEST        (JUNIT_DIR=D: D/LANE.xml for each lane)
#   scripts/test_all.sh --lanes       each lane's name and pytest arguments, a line each
set -uo pipefail

# NAME, then its pytest arguments; the first is the lane whose output is shown as it comes
LANES=(others cluster training)
declare -A ARGS=(
    [others]="--durations=20 --ignore=tests/cluster --ignore=tests/training tests"
    [cluster]="--durations=10 tests/cluster"
    [training]="--durations=20 tests/training"
)
if [ "${1:-}" = --lanes ]; then
    for name in "${LANES[@]}"; do echo "$name ${ARGS[$name]}"; done
    exit 0
fi
pytest=${1:?usage: scripts/test_all.sh PYTEST, or --lanes}
base=$(mktemp -d "${TMPDIR:-/tmp}/test-all.XXXXXX")
start=$(date +%s)

# A lane in the background. A script's background job starts with Ctrl-C ignored; the lane gets
# it back, so that one Ctrl-C stops every lane and each takes its daemons and namespaces down.
declare -A pid code
lane() {
    local name=$1 junit=()
    [ -z "${JUNIT_DIR:-}" ] || junit=("--junitxml=$JUNIT_DIR/$name.xml")
    # shellcheck disable=SC2086  # ARGS holds words
    "$(dirname "$pytest")/python" -c \
        'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
        "$pytest" -q -rs --basetemp="$base/$name" -o cache_dir="$base/$name-cache" "${junit[@]}" ${ARGS[$name]} &
    pid[$name]=$!
}

# code[$1]=the exit status of lane $1, waiting through the signals trapped below (a trapped
# signal ends `wait` early; a lane still tearing down is waited for again). Not in $(...): a
# subshell cannot wait for this shell's jobs.
reap() {
    while :; do
        wait "${pid[$1]}"
        code[$1]=$?
        kill -0 "${pid[$1]}" 2>/dev/null || break
    done
}

echo "make test-all: ${LANES[*]:1} in lanes of their own beside the others (their output:" \
     "$base/LANE.log, printed at the end)"
for name in "${LANES[@]:1}"; do
    lane "$name" > "$base/$name.log" 2>&1
done
lane "${LANES[0]}"
trap ':' INT                                   # a Ctrl-C reaches every lane; wait for all to end
trap 'kill -TERM "${pid[@]}" 2>/dev/null' TERM
trap 'kill -HUP "${pid[@]}" 2>/dev/null' HUP
for name in "${LANES[@]}"; do reap "$name"; done
for name in "${LANES[@]:1}"; do
    echo
    echo "make test-all: lane $name (ran beside the others):"
    cat "$base/$name.log"
done
codes=$(for name in "${LANES[@]}"; do echo -n "$name exit ${code[$name]}, "; done)
echo "make test-all: every lane done in $(( $(date +%s) - start )) s (${codes%, }; each lane's own time: its last line)"
for name in "${LANES[@]}"; do
    if [ "${code[$name]}" -ne 0 ]; then
        echo "make test-all: the tests' temporary folders are kept for a look: $base"
        exit "${code[$name]}"
    fi
done
rm -rf "$base"
