"""Where an allreduce's time goes inside a training step, from Horovod's timeline
(`horovodrun --timeline-filename F`, a Chrome trace written by rank 0).

For every tensor Horovod records a NEGOTIATE_ALLREDUCE span, from the first rank asking to
reduce it until every rank has (so: the wait for the slowest rank, plus the cycles the
background thread takes to see the requests), and then an ALLREDUCE span with its activities:
INIT_FUSION_BUFFER (once), MEMCPY_IN_FUSION_BUFFER and MEMCPY_OUT_FUSION_BUFFER (the fused
tensors copied in and out), and the transfer itself (GLOO_ALLREDUCE with Gloo, MPI_ALLREDUCE,
NCCL_ALLREDUCE, ...). Pure Python, no Horovod or TensorFlow: the bench parses a file.
"""

from __future__ import annotations

import collections
import json
import statistics
from pathlib import Path

NEGOTIATION = "NEGOTIATE_ALLREDUCE"
COPIES = ("MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER")  # every allreduce
NOT_TRANSFER = (NEGOTIATION, "ALLREDUCE", "INIT_FUSION_BUFFER", *COPIES)  # INIT: once, at the first


def read_timeline(path: Path) -> list:
    """The timeline's events. Horovod writes a JSON array it closes only at shutdown, its
    events separated by commas, so a file from a killed job ends in ',' with no ']'."""
    text = Path(path).read_text().strip().rstrip(",")
    if not text:
        return []
    return json.loads(text if text.endswith("]") else text + "]")


def spans(events: list) -> dict:
    """{activity name: [seconds of each span]}: Horovod's 'B'/'E' pairs, nested per tensor
    (an 'E' closes the innermost open 'B' of its tensor, whose events share a pid)."""
    open_spans, found = collections.defaultdict(list), collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "B":
            open_spans[e["pid"]].append((e["name"], e["ts"]))
        elif e.get("ph") == "E" and open_spans[e["pid"]]:
            name, start = open_spans[e["pid"]].pop()
            found[name].append((e["ts"] - start) * 1e-6)  # the timeline's ts are microseconds
    return dict(found)


def allreduce_phases_ms(events: list) -> dict:
    """Median milliseconds per allreduce of a tensor: the negotiation (waiting for every rank),
    the fusion buffer's copies, and the transfer (every other activity inside ALLREDUCE).
    Medians, so that the first step's negotiation, which waits for the slower rank's start-up
    and tracing, does not count."""
    found = spans(events)
    if NEGOTIATION not in found:
        return {}
    transfer = [name for name in found if name not in NOT_TRANSFER]
    return {
        "negotiation_ms": statistics.median(found[NEGOTIATION]) * 1e3,
        "fusion_copies_ms": sum(statistics.median(found[name]) for name in COPIES if name in found) * 1e3,
        "transfer_ms": sum(statistics.median(found[name]) for name in transfer) * 1e3,
        "transfer_activity": ",".join(sorted(transfer)),
        "allreduce_ms": statistics.median(found["ALLREDUCE"]) * 1e3 if "ALLREDUCE" in found else None,
        "tensors": len({e["pid"] for e in events if e.get("name") == NEGOTIATION}),
        "allreduces": len(found[NEGOTIATION]),
    }
