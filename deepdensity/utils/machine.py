"""The machine a result came from, named: CPU model, cores, and the instruction set oneDNN
picks at run time (float results differ in the last bits between instruction sets, and
converging runs drift by up to a few per cent; see docs/performance.md); and its memory, which
what a command is asked to hold is checked against before anything is written."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Optional

from deepdensity.utils.errors import UserError

# A convolution makes oneDNN print the instruction set it dispatches to ("isa:Intel AVX2").
_PROBE = (
    "import tensorflow as tf; tf.nn.conv3d(tf.ones((1, 4, 4, 4, 1)), tf.ones((2, 2, 2, 1, 1)), [1, 1, 1, 1, 1], 'SAME')"
)


def cpu_model() -> str:
    """The CPU's model name as the platform reports it (Linux: /proc/cpuinfo)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The CPU's flags as the platform reports them (Linux: /proc/cpuinfo), '' where it does not."""
    return _cpuinfo("flags")


def _cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo; '' where there is none (another platform)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def onednn_isa(cap: str = "") -> str:
    """The instruction set oneDNN uses in a fresh TensorFlow process here (it honours
    ONEDNN_MAX_CPU_ISA; `cap`, when given, in its place), or 'unknown' where oneDNN does not say
    (GPU builds, other CPUs). Asked once per process and setting of oneDNN's and TensorFlow's
    variables (2 s each time, and a study's record, runner and ISA check all ask); an 'unknown'
    is asked again."""
    env = {**os.environ, **({"ONEDNN_MAX_CPU_ISA": cap} if cap else {})}
    settings = tuple(sorted((k, v) for k, v in env.items() if k.startswith(_ISA_SETTINGS)))
    if settings not in _ISA_SEEN:
        isa = _probe_onednn_isa(env)
        if isa == "unknown":  # a probe that timed out under load is not the answer for good
            return isa
        _ISA_SEEN[settings] = isa
    return _ISA_SEEN[settings]


_ISA_SETTINGS = ("ONEDNN_", "DNNL_", "TF_ENABLE_ONEDNN")
_ISA_SEEN: dict = {}

# ONEDNN_MAX_CPU_ISA's value for each instruction set as oneDNN names it (what oneDNN printed
# in TensorFlow 2.21 under each cap on an Intel Xeon with AMX, 2026-12-01): the cap that holds
# oneDNN to a set another machine used, where this one has that set too
ONEDNN_CAPS = {
    "Intel SSE4.1": "SSE41",
    "Intel AVX": "AVX",
    "Intel AVX2": "AVX2",
    "Intel AVX2 with Intel DL Boost": "AVX2_VNNI",
    "Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions": "AVX512_CORE",
    "Intel AVX-512 with Intel DL Boost": "AVX512_CORE_VNNI",
    "Intel AVX-512 with Intel DL Boost and bfloat16 support": "AVX512_CORE_BF16",
    "Intel AVX-512 with float16, Intel DL Boost and bfloat16 support": "AVX512_CORE_FP16",
}
# the CPU flag (Linux's /proc/cpuinfo) each cap's set needs beyond the one below it: a CPU
# without it cannot be held to that set (oneDNN falls back to a lower one)
CAP_FLAGS = {
    "SSE41": "sse4_1",
    "AVX": "avx",
    "AVX2": "avx2",
    "AVX2_VNNI": "avx_vnni",
    "AVX512_CORE": "avx512bw",
    "AVX512_CORE_VNNI": "avx512_vnni",
    "AVX512_CORE_BF16": "avx512_bf16",
    "AVX512_CORE_FP16": "avx512_fp16",
}


def _probe_onednn_isa(env: dict) -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "ONEDNN_VERBOSE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for line in proc.stdout.splitlines():
        if ",isa:" in line:
            return line.split(",isa:", 1)[1].strip()
    return "unknown"


def host() -> str:
    """One phrase naming the host, from the platform itself."""
    return f"{cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


# What TensorFlow's C++ side prints once per process at start-up; under horovodrun every rank
# printed them, N copies of noise around the lines that matter. Rank 0's copy is enough.
START_UP_NOISE = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "Compiled cluster using XLA!",
    "SetPriority unimplemented for this stream",
)
_noise_filter = None


def drop_start_up_noise() -> None:
    """Pass this process's stderr (C++ writes included: it works on file descriptor 2) through
    `grep -v` of START_UP_NOISE. grep is a process of its own, in its own session, so that what
    the process writes just before it crashes or is signalled still gets through; it ends when
    the process's last copy of fd 2 closes. Nothing happens where grep is missing."""
    import shutil

    global _noise_filter
    grep = shutil.which("grep")
    if grep is None or _noise_filter is not None:
        return
    sys.stderr.flush()
    patterns = [arg for line in START_UP_NOISE for arg in ("-e", line)]
    target = os.dup(2)
    # -a: a NUL byte in the stream would otherwise switch grep to "binary file matches" and drop the rest
    _noise_filter = subprocess.Popen(
        [grep, "-a", "--line-buffered", "-v", "-F", *patterns],
        stdin=subprocess.PIPE,
        stdout=target,
        start_new_session=True,
    )
    os.close(target)
    os.dup2(_noise_filter.stdin.fileno(), 2)
    _noise_filter.stdin.close()


def memory_bytes() -> Optional[int]:
    """This machine's physical memory in bytes (POSIX sysconf; psutil where sysconf cannot say
    and psutil happens to be installed), or None where neither can."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        if pages > 0 and page > 0:
            return pages * page
    except (AttributeError, ValueError, OSError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # not installed, or no answer on this platform
        return None


def size_text(n: float) -> str:
    """Bytes as a person reads them: 512 B, 16.0 MiB, 7.28 TiB, 3.6e+06 EiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} EiB"


def check_fits_in_memory(need: float, what: str, instead=None, error=None) -> None:
    """Refuse, before anything is written, work that needs more memory than this machine has
    (`need`: a lower bound, in bytes, of what `what` holds at once, so that what is refused could
    never have run here). `instead(memory)` says what would fit. Nothing is checked where the
    machine's memory is unknown."""
    have = memory_bytes()
    if have is not None and need > have:
        raise (error or UserError)(
            f"{what} needs at least {size_text(need)} of memory, more than this "
            f"machine's {size_text(have)}" + (f"; {instead(have)}" if instead else "")
        )
