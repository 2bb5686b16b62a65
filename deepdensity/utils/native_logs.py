"""TensorFlow's C++ log lines (absl's format), as a pattern that both a training process
(training/console.py) and `deepdensity launch` (launch/horovodrun.py) filter by."""

from __future__ import annotations

from typing import Optional

# absl's prefix: severity, MMDD, time, thread, file:line]; the first line absl writes unasked
ABSL_LINE = r"^[{severities}][0-9]{{4}} [0-9:.]+ +[0-9]+ [^ ]+:[0-9]+] "
ABSL_UNINITIALIZED = "WARNING: All log messages before absl::InitializeLog"


def native_log_pattern(level: Optional[str]) -> Optional[str]:
    """The grep -E pattern of the absl lines TF_CPP_MIN_LOG_LEVEL=`level` silences (0: none,
    1: INFO, 2: and WARNING, 3: and ERROR, as for TensorFlow's own lines); None for none."""
    try:
        n = min(max(int(level or 0), 0), 3)
    except ValueError:
        n = 0
    if n == 0:
        return None
    return f"({ABSL_LINE.format(severities='IWE'[:n])}|^{ABSL_UNINITIALIZED})"
