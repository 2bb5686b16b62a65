"""Build the rendering kernel (render.cc) against the installed TensorFlow: `make install` runs

    python -m deepdensity.model.kernels.build

which writes lib/render-tf<version>.so beside this file (one per TensorFlow, so that two
venvs of one checkout, the current stack's and the paper-era one's, each keep their own): a folder with no
__init__.py, so that tools that
import every module of the package (pkgutil.walk_packages: documentation builders, coverage,
plugin scanners) do not dlopen it as a Python extension, after which a tf.load_op_library in
that process no longer registers the op. The kernel is optional: without it (no C++
compiler, another TensorFlow, a GPU) the layer renders with TensorFlow ops, which the tests
compare it against. CXX picks the compiler (g++ by default).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from deepdensity.model.kernels import library_for

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "render.cc"
FORMER_LIBRARIES = (HERE / "_render.so", HERE / "lib" / "render.so")  # where builds before put it

# -O3 vectorises the row loops, -fopenmp-simd honours their `omp simd` (no OpenMP runtime),
# -ffp-contract=fast lets a*b+c become one FMA where the variant has FMA (ISO C++17, which
# TensorFlow's flags select, turns contraction off). No -ffast-math: exp_f32's rounding
# trick relies on (a + c) - c not being simplified.
OPTIMISE = ["-O3", "-fopenmp-simd", "-ffp-contract=fast", "-fno-trapping-math", "-fPIC", "-shared"]


def command(tf_compile: list, tf_link: list, out: Path) -> list:
    cxx = shlex.split(os.environ.get("CXX", "g++"))
    return [*cxx, *OPTIMISE, *tf_compile, str(SOURCE), "-o", str(out), *tf_link]


def build(out: Path = None) -> Path:
    """Compiles the kernel to `out`, by default the one for the TensorFlow installed (via a
    temporary file, so a failed build leaves no library)."""
    import tensorflow as tf

    out = out or library_for(tf.__version__)
    out.parent.mkdir(parents=True, exist_ok=True)
    for former in FORMER_LIBRARIES:
        former.unlink(missing_ok=True)
    tmp = out.with_suffix(".so.tmp")
    cmd = command(tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), tmp)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    os.replace(tmp, out)
    return out


def main() -> int:
    try:
        path = build()
    except (OSError, RuntimeError) as e:
        print(
            f"warning: the rendering kernel was not built, the layer will use TensorFlow ops (slower): {e}",
            file=sys.stderr,
        )
        return 0
    print(f"rendering kernel built: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
