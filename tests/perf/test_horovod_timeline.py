"""Horovod's timeline, parsed: spans paired per tensor, medians per allreduce, against a trace
written out here in Horovod 0.28.1's format (B/E pairs per tensor pid, microsecond ts, the
array left open until shutdown). Exact arithmetic on integers of microseconds: no tolerance
beyond float rounding."""

import json

import pytest

from deepdensity.perf.horovod_timeline import allreduce_phases_ms, read_timeline, spans


def one_allreduce(pid: int, t0: int, negotiate: int, copy_in: int, transfer: int, copy_out: int) -> list:
    t1 = t0 + negotiate
    ev = [
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": t0, "pid": pid},
        {"ph": "X", "name": "1", "ts": t0 + 1, "pid": pid, "dur": 0},
        {"ph": "E", "ts": t1, "pid": pid},
        {"ph": "B", "name": "ALLREDUCE", "ts": t1 + 10, "pid": pid},
        {"ph": "B", "name": "MEMCPY_IN_FUSION_BUFFER", "ts": t1 + 20, "pid": pid},
        {"ph": "E", "ts": t1 + 20 + copy_in, "pid": pid},
    ]
    t2 = t1 + 20 + copy_in
    ev += [
        {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": t2, "pid": pid},
        {"ph": "E", "ts": t2 + transfer, "pid": pid},
        {"ph": "B", "name": "MEMCPY_OUT_FUSION_BUFFER", "ts": t2 + transfer, "pid": pid},
        {"ph": "E", "ts": t2 + transfer + copy_out, "pid": pid},
        {"ph": "E", "ts": t2 + transfer + copy_out + 5, "pid": pid, "args": {"dtype": "float32"}},
    ]
    return ev


def test_spans_pair_each_end_with_the_innermost_open_span_of_its_tensor():
    # two tensors interleaved: an E of pid 2 must not close pid 1's span
    ev = [
        {"ph": "B", "name": "ALLREDUCE", "ts": 0, "pid": 1},
        {"ph": "B", "name": "ALLREDUCE", "ts": 100, "pid": 2},
        {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 200, "pid": 1},
        {"ph": "E", "ts": 300, "pid": 2},
        {"ph": "E", "ts": 1200, "pid": 1},
        {"ph": "E", "ts": 2000, "pid": 1},
    ]
    found = spans(ev)
    assert sorted(found["ALLREDUCE"]) == pytest.approx([200e-6, 2000e-6])
    assert found["GLOO_ALLREDUCE"] == pytest.approx([1000e-6])


def test_phases_are_medians_over_allreduces_so_the_first_steps_wait_does_not_count(tmp_path):
    # three steps of two fused tensors; step 1 waits 2.5 s for the slower rank's start-up
    ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {}}]
    for step, (negotiate, transfer) in enumerate([(2_500_000, 5000), (300, 4000), (500, 4200)]):
        for pid in (1, 2):
            ev += one_allreduce(pid, 10_000_000 * step, negotiate, 100, transfer, 60)
    path = tmp_path / "timeline.json"
    # as Horovod leaves it while the job runs: no closing bracket, a trailing comma
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in ev) + ",\n")
    got = allreduce_phases_ms(read_timeline(path))
    assert got["negotiation_ms"] == pytest.approx(0.5)  # median of 2500, 0.3, 0.3, 0.5, 0.5, 2500 ms
    assert got["transfer_ms"] == pytest.approx(4.2)  # median of 5, 4, 4.2 (each twice)
    assert got["fusion_copies_ms"] == pytest.approx(0.16)  # 0.1 in + 0.06 out
    assert got["transfer_activity"] == "GLOO_ALLREDUCE"
    assert (got["tensors"], got["allreduces"]) == (2, 6)
    # the ALLREDUCE span opens 10 us after the negotiation, the copy in 10 us later; it closes
    # 5 us after the copy out
    assert got["allreduce_ms"] == pytest.approx((10 + 100 + 4200 + 60 + 5) / 1e3)


def test_a_closed_timeline_and_an_empty_one(tmp_path):
    closed = tmp_path / "closed.json"
    closed.write_text(json.dumps(one_allreduce(1, 0, 300, 100, 4000, 60)))
    assert allreduce_phases_ms(read_timeline(closed))["transfer_ms"] == pytest.approx(4.0)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert read_timeline(empty) == [] and allreduce_phases_ms([]) == {}
