#!/usr/bin/env bash
# Horovod 0.28.1, its last release, built from its source distribution against the TensorFlow
# already in VENV (hence --no-build-isolation: pip cannot order it after TensorFlow), with the
# project's patches, which docs/install.md#horovods-patches lists change by change with the
# compiler or TensorFlow behind each:
#   scripts/horovod/horovod-0.28.1-gcc13+.patch   on every stack: standard includes gcc 13 and 14
#       no longer bring in for it, and flatbuffers' own fix for gcc 14; nothing Horovod does changes
#   scripts/horovod/horovod-0.28.1-launcher.patch  on every stack: horovodrun asks the extension's
#       library what was built in (MPI, Gloo) without importing TensorFlow, and mutes its checks
#   scripts/horovod/horovod-0.28.1-build.patch     on every stack: no debug information, and no
#       copy of Gloo that nothing links: a third less of the compiler's time
#   scripts/horovod/horovod-0.28.1-tf2.16+.patch  against TensorFlow 2.16 or later (the current
#       stack); against 2.15, the paper-era stack, Horovod's code is built as released.
# Before the build, three of Horovod's sources are compiled (syntax only, a few seconds) with the
# compiler the build will use ($CXX, else c++): a compiler that cannot build Horovod stops here in
# one line that says what to do, instead of minutes later in cmake's output.
# The build's controllers come from the environment, as make install sets it (HOROVOD_WITH_GLOO,
# HOROVOD_WITH_MPI or _WITHOUT_MPI, the GPU's variables).
#
#   scripts/horovod.sh VENV
set -euo pipefail
venv=${1:?usage: scripts/horovod.sh VENV}
here=$(cd "$(dirname "$0")" && pwd)
py="$venv/bin/python"
compilers_patch="$here/horovod/horovod-0.28.1-gcc13+.patch"
tf_patch="$here/horovod/horovod-0.28.1-tf2.16+.patch"
launcher_patch="$here/horovod/horovod-0.28.1-launcher.patch"
build_patch="$here/horovod/horovod-0.28.1-build.patch"
# the installed TensorFlow's version, read without importing it (tensorflow, tensorflow-cpu, ...)
tf=$("$py" -c 'from deepdensity.utils.stack import found; print(found().tensorflow or "")')
[ -n "$tf" ] || { echo "error: no TensorFlow in $venv to build Horovod against" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m pip download --quiet --no-deps --no-binary horovod --dest "$work" "horovod==0.28.1"
tar xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
src="$work/horovod-0.28.1"
# git apply works outside a repository too, and git is there wherever this checkout is
apply() { (cd "$src" && git apply --verbose "$1" 2>&1 | sed 's/^/  /' >&2); }
echo "Horovod 0.28.1: the project's patch for current compilers" >&2
apply "$compilers_patch"
echo "Horovod 0.28.1: the project's patch for horovodrun's build checks" >&2
apply "$launcher_patch"
echo "Horovod 0.28.1: the project's patch for a shorter build" >&2
apply "$build_patch"
if "$py" -c "import sys; from deepdensity.utils.stack import release; sys.exit(release('$tf') < (2, 16))"; then
    echo "Horovod 0.28.1: the project's patch for TensorFlow $tf" >&2
    apply "$tf_patch"
else
    echo "Horovod 0.28.1's code as released, for TensorFlow $tf" >&2
fi
cxx=${CXX:-c++}
probe="$work/probe.log"
if ! "$cxx" -std=c++17 -fsyntax-only -I"$src/third_party/flatbuffers/include" \
        "$src"/horovod/common/{group_table,message,common}.cc > "$probe" 2>&1; then
    first=$(grep -m1 -E 'error' "$probe" || head -1 "$probe")
    echo "error: Horovod 0.28.1 does not compile with $("$cxx" --version 2>/dev/null | head -1 || echo "$cxx")," \
         "even with the project's patch (${first:-no compiler output}); install g++ 12 to 14 (Debian/Ubuntu:" \
         "apt-get install g++-12) and run: make install CC=gcc-12 CXX=g++-12" >&2
    exit 2
fi
# Horovod's build looks for cmake on PATH and, failing that, runs a `pip` that a venv's bin is
# not on PATH to give: the venv's own cmake (make install puts it there from PyPI) is named to it,
# so that a machine without a system cmake builds too (Debian 13's lane has none)
if [ -z "${HOROVOD_CMAKE:-}" ] && [ -x "$venv/bin/cmake" ]; then
    export HOROVOD_CMAKE="$(cd "$venv/bin" && pwd)/cmake"
fi
# a stale horovod (another TensorFlow, another controller) would be kept by pip as it is
"$py" -m pip uninstall --quiet --yes horovod 2>/dev/null || true
"$py" -m pip install --no-build-isolation --no-cache-dir "$src"
