#!/usr/bin/env bash
# Horovod 0.28.1, its last release, built from its source distribution against the TensorFlow
# already in VENV (hence --no-build-isolation: pip cannot order it after TensorFlow). Against
# TensorFlow 2.16 or later the project's patch is applied first (scripts/horovod/README.md has
# its three changes and the upstream issues behind them); against 2.15, the paper-era stack,
# Horovod is built as released. The build's controllers come from the environment, as make
# install sets it (HOROVOD_WITH_GLOO, HOROVOD_WITH_MPI or _WITHOUT_MPI, the GPU's variables).
#
#   scripts/horovod.sh VENV
set -euo pipefail
venv=${1:?usage: scripts/horovod.sh VENV}
here=$(cd "$(dirname "$0")" && pwd)
py="$venv/bin/python"
patch="$here/horovod/horovod-0.28.1-tf2.16+.patch"
# the installed TensorFlow's version, read without importing it (tensorflow, tensorflow-cpu, ...)
tf=$("$py" -c 'from deepdensity.utils.stack import found; print(found().tensorflow or "")')
[ -n "$tf" ] || { echo "error: no TensorFlow in $venv to build Horovod against" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m pip download --quiet --no-deps --no-binary horovod --dest "$work" "horovod==0.28.1"
tar xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
src="$work/horovod-0.28.1"
if "$py" -c "import sys; from deepdensity.utils.stack import release; sys.exit(release('$tf') < (2, 16))"; then
    echo "Horovod 0.28.1 with the project's patch for TensorFlow $tf (scripts/horovod/README.md)" >&2
    # git apply works outside a repository too, and git is there wherever this checkout is
    (cd "$src" && git apply --verbose "$patch" 2>&1 | sed 's/^/  /' >&2)
else
    echo "Horovod 0.28.1 as released, for TensorFlow $tf" >&2
fi
# a stale horovod (another TensorFlow, another controller) would be kept by pip as it is
"$py" -m pip uninstall --quiet --yes horovod 2>/dev/null || true
"$py" -m pip install --no-build-isolation --no-cache-dir "$src"
