#!/usr/bin/env bash
# GPU collectives for `make install TF=gpu`: prints on stdout the variables that build Horovod's
# GPU allreduce on NCCL (HOROVOD_GPU_OPERATIONS=NCCL, and where CUDA and NCCL are) when the CUDA
# toolkit's compiler (nvcc) and NCCL's header and library are there; else nothing, and one line
# on stderr saying that Horovod's allreduce goes through host memory and what to install.
# Never fails: TF=gpu without the toolkit still installs. Prints nothing for TF=cpu.
# Untested on a GPU (the project's machines have none); its branches are tested with stand-ins.
#
#   scripts/gpu_ops.sh TF [VENV]
#   CUDA_SEARCH, NCCL_SEARCH: where else to look (default /usr/local/cuda, and /usr)
set -uo pipefail
tf=${1:-cpu}
venv=${2:-.venv}
[ "$tf" = gpu ] || exit 0
# a GPU build the user set up by hand is theirs
[ -n "${HOROVOD_GPU_OPERATIONS:-}${HOROVOD_GPU_ALLREDUCE:-}" ] && exit 0
# absolute: pip builds Horovod in a folder of its own, where a relative path leads nowhere
venv=$(cd "$venv" 2>/dev/null && pwd || echo "$venv")
again="then: rm $venv/.installed && make install TF=gpu"
without() {
    echo "note: Horovod is built without NCCL ($1); its allreduce copies GPU tensors through host memory. For NCCL $2" >&2
    exit 0
}
# The toolkit: the first of these with nvcc and the runtime's header (an nvcc on PATH may be a
# wrapper script elsewhere, so its own folder is tried last)
cuda=
nvcc=$(command -v nvcc || true)
for home in ${HOROVOD_CUDA_HOME:-} ${CUDA_HOME:-} ${CUDA_SEARCH-/usr/local/cuda} ${nvcc:+$(dirname "$(dirname "$(readlink -f "$nvcc")")")}; do
    if [ -x "$home/bin/nvcc" ] && [ -f "$home/include/cuda_runtime.h" ]; then
        cuda=$home
        break
    fi
done
[ -n "$cuda" ] || without "no CUDA toolkit: nvcc not found" "install the CUDA toolkit (nvcc) or set HOROVOD_CUDA_HOME, $again"
# NCCL: HOROVOD_NCCL_HOME if set; else the one tensorflow[and-cuda] put in the venv (the
# nvidia-nccl-cu12 wheel), else the toolkit's or the system's
nccl=
for home in ${HOROVOD_NCCL_HOME:-} "$venv"/lib/python3*/site-packages/nvidia/nccl "$cuda" ${NCCL_SEARCH-/usr}; do
    if [ -f "$home/include/nccl.h" ]; then
        nccl=$home
        break
    fi
done
[ -n "$nccl" ] || without "nccl.h not found" "install NCCL (Debian/Ubuntu: libnccl-dev) or set HOROVOD_NCCL_HOME, $again"
include=$nccl/include
lib=
for dir in "$nccl/lib" "$nccl/lib64" "$nccl/lib/$(uname -m)-linux-gnu"; do
    if [ -e "$dir/libnccl.so" ] || [ -e "$dir/libnccl.so.2" ]; then
        lib=$dir
        break
    fi
done
[ -n "$lib" ] || without "no libnccl.so under $nccl" "install NCCL or set HOROVOD_NCCL_HOME, $again"
# Horovod's CMake (FindNCCL) links libnccl.so; the venv's wheel ships libnccl.so.2 alone, so
# the venv gets the link; elsewhere that is the development package's to provide
if [ ! -e "$lib/libnccl.so" ]; then
    case "$lib" in
        "$venv"/*) ln -s libnccl.so.2 "$lib/libnccl.so" ;;
        *) without "$lib has libnccl.so.2 but no libnccl.so" "install NCCL's development files (libnccl-dev), $again" ;;
    esac
fi
echo "Horovod's GPU allreduce: NCCL ($lib), CUDA ($cuda)" >&2
echo "HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME=$cuda HOROVOD_NCCL_INCLUDE=$include HOROVOD_NCCL_LIB=$lib HOROVOD_NCCL_LINK=SHARED"
