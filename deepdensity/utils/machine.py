"""The machine a result came from, named: CPU model, cores, and the instruction set oneDNN
picks at run time (float results differ in the last bits between instruction sets, and
converging runs drift by up to a few per cent; see docs/performance.md)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

# A convolution makes oneDNN print the instruction set it dispatches to ("isa:Intel AVX2").
_PROBE = ("import tensorflow as tf; tf.nn.conv3d(tf.ones((1, 4, 4, 4, 1)), tf.ones((2, 2, 2, 1, 1)), "
          "[1, 1, 1, 1, 1], 'SAME')")


def cpu_model() -> str:
    """The CPU's model name as the platform reports it (Linux: /proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def onednn_isa() -> str:
    """The instruction set oneDNN uses in a fresh TensorFlow process here (it honours
    ONEDNN_MAX_CPU_ISA), or 'unknown' where oneDNN does not say (GPU builds, other CPUs)."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "ONEDNN_VERBOSE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
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
START_UP_NOISE = ("All log messages before absl::InitializeLog() is called are written to STDERR",
                  "Compiled cluster using XLA!", "SetPriority unimplemented for this stream")
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
    _noise_filter = subprocess.Popen([grep, "--line-buffered", "-v", "-F", *patterns], stdin=subprocess.PIPE,
                                     stdout=target, start_new_session=True)
    os.close(target)
    os.dup2(_noise_filter.stdin.fileno(), 2)
    _noise_filter.stdin.close()
