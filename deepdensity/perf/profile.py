"""Where a training step's time goes, for `make bench`: TensorFlow's profiler over steps run as
model.fit runs them, its trace written beside the bench's figures (a Chrome trace, for
chrome://tracing or https://ui.perfetto.dev), and the step taken three ways without the
profiler:

  train_on_batch   Keras' one-batch call, which builds a data adapter every time (what the
                   bench timed before; fit pays that once per epoch)
  fit loop         model.fit over a tf.data pipeline, no callbacks, per step
  train_function   the compiled step alone on an iterator (the bench's step)

The bound is the kernels' busy time: the part of the profiled steps during which at least one
op kernel runs on some thread (the union of their intervals). The step with these kernels, as
they are, cannot take less; what it takes above it is time when no kernel runs at all:
dispatch (Keras, the tf.function call, TensorFlow's executor, the data iterator), split by
where in the step it falls (step_gaps: before the first kernel, between kernels, after the
last). Each kernel's own time (an op's event lasts as long as the op, its intra-op shards
included) is also summed per group of ops; that sum exceeds the busy time where ops overlap.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

GROUPS = ("Conv3D forward", "Conv3D backward", "Adam update", "rendering", "dense layers", "other ops")


def op_group(op_type: str) -> str:
    """The row of the profile table an op type belongs to."""
    if "Conv3DBackprop" in op_type:
        return "Conv3D backward"
    if "Conv3D" in op_type:
        return "Conv3D forward"
    if "ApplyAdam" in op_type:
        return "Adam update"
    if op_type.startswith("DeepDensityRender"):
        return "rendering"
    if "MatMul" in op_type or op_type.startswith("BiasAdd"):
        return "dense layers"
    return "other ops"


def op_type_of(event_name: str):
    """The op type of a profiler event named 'scope/op_name:OpType', else None (the executor's,
    Python's and tf.data's own events are named 'Class::method' or carry no colon)."""
    if "::" in event_name or event_name.count(":") != 1 or event_name.startswith("EagerLocalExecute"):
        return None
    return event_name.split(":")[1] or None


def kernel_seconds(space) -> dict:
    """{op type: [seconds, calls]} of the op kernels in a profiler XSpace, over all threads."""
    found = collections.defaultdict(lambda: [0.0, 0])
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                op_type = op_type_of(plane.event_metadata[event.metadata_id].name)
                if op_type:
                    found[op_type][0] += event.duration_ps * 1e-12
                    found[op_type][1] += 1
    return dict(found)


def op_intervals(space) -> list:
    """(start, end) in picoseconds of every op kernel event in a profiler XSpace."""
    found = []
    for plane in space.planes:
        for line in plane.lines:
            origin = line.timestamp_ns * 1000
            found += [
                (origin + e.offset_ps, origin + e.offset_ps + e.duration_ps)
                for e in line.events
                if op_type_of(plane.event_metadata[e.metadata_id].name)
            ]
    return found


def busy_length(intervals) -> float:
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total, reach = total + (end - start), end
        elif end > reach:
            total, reach = total + (end - reach), end
    return total


STEP_EVENT = "train_function"  # Keras' compiled step, as the Python thread calls it


def step_spans(space) -> list:
    """(start, end) in picoseconds of every call of Keras' train function in a profiler XSpace
    (the Python thread's event, from the call until its result is back)."""
    found = []
    for plane in space.planes:
        for line in plane.lines:
            origin = line.timestamp_ns * 1000
            found += [
                (origin + e.offset_ps, origin + e.offset_ps + e.duration_ps)
                for e in line.events
                if plane.event_metadata[e.metadata_id].name == STEP_EVENT
            ]
    return sorted(found)


def step_gaps(spans, intervals) -> dict:
    """Where each step's time goes apart from its kernels, in seconds per step (the mean over
    the steps): before its first kernel starts (the Python call of the compiled function, its
    arguments, the executor's start), between its kernels when none runs (the executor
    scheduling the next op), after its last kernel ends (the result handed back to Python),
    and the whole call. `spans`: the steps' (start, end); `intervals`: every kernel's
    (start, end); both in picoseconds, as the profiler records them."""
    before = between = after = called = 0
    for start, end in spans:
        inside = [(max(a, start), min(b, end)) for a, b in intervals if b > start and a < end]
        called += end - start
        if not inside:
            before += end - start
            continue
        first, last = min(a for a, _ in inside), max(b for _, b in inside)
        before += first - start
        after += end - last
        between += (last - first) - busy_length(inside)
    n = max(1, len(spans)) * 1e12
    return {
        "before_first_kernel": before / n,
        "between_kernels": between / n,
        "after_last_kernel": after / n,
        "step_call": called / n,
    }


def chrome_trace(space) -> dict:
    """The XSpace as Chrome's trace-event JSON: one process per plane, one thread per line."""
    events = []
    for pid, plane in enumerate(space.planes):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": plane.name}})
        for tid, line in enumerate(plane.lines):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": line.name}})
            start_us = line.timestamp_ns / 1e3
            events += [
                {
                    "name": plane.event_metadata[e.metadata_id].name,
                    "ph": "X",
                    "pid": pid,
                    "tid": tid,
                    "ts": start_us + e.offset_ps / 1e6,
                    "dur": e.duration_ps / 1e6,
                }
                for e in line.events
            ]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def profiled(step, steps: int, trace: Path):
    """Run `step` `steps` times under TensorFlow's profiler; write its Chrome trace to `trace`
    (gzip) and return (the XSpace, profiled seconds per step)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        t = time.perf_counter()
        for _ in range(steps):
            step()
        seconds = (time.perf_counter() - t) / steps
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(Path(sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]).read_bytes())
    trace.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(trace, "wt") as f:
        json.dump(chrome_trace(space), f)
    return space, seconds


def random_cubes(batch: int, seed: int = 0) -> np.ndarray:
    """`batch` random 16^3 cubes in the data's range, as the model takes them."""
    return np.random.default_rng(seed).uniform(size=(batch, 16, 16, 16, 1)).astype("f4") / 64


def fit_loop(model, batch: int, steps: int):
    """A callable running `steps` steps of model.fit (no callbacks) over a repeated batch."""
    x = random_cubes(batch)
    data = tf.data.Dataset.from_tensors((x, x)).repeat()
    return lambda: model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)


def on_batch(model, batch: int):
    """A callable running one train_on_batch."""
    x = tf.constant(random_cubes(batch))
    return lambda: model.train_on_batch(x, x)


def print_profiles(profiles: list) -> None:
    print("\nwhere a step goes (ms; kernels summed over threads, from TensorFlow's profiler):")
    print(f"{'':<34}" + "".join(f"{'batch ' + str(p['batch']):>12}" for p in profiles))
    rows = [(f"step: {k}", [p["step_ms"][k] for p in profiles]) for k in profiles[0]["step_ms"]]
    rows += [("step under the profiler", [p["profiled_step_ms"] for p in profiles])]
    rows += [(f"kernels: {g}", [p["kernels_ms"][g] for p in profiles]) for g in GROUPS]
    rows += [
        ("kernels: all, summed", [sum(p["kernels_ms"].values()) for p in profiles]),
        ("bound: kernels' busy time", [p["busy_ms"] for p in profiles]),
        ("profiled step / bound", [p["profiled_over_busy"] for p in profiles]),
    ]
    if all("step_gaps_ms" in p for p in profiles):
        rows += [
            (f"profiled: {name.replace('_', ' ')}", [p["step_gaps_ms"][name] for p in profiles])
            for name in profiles[0]["step_gaps_ms"]
        ]
    for name, values in rows:
        print(f"{name:<34}" + "".join(f"{v:>12.2f}" for v in values))
    print("traces: " + ", ".join(p["trace"] for p in profiles) + " (chrome://tracing or ui.perfetto.dev)")
