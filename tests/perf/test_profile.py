"""The profile's bookkeeping: which profiler events are op kernels, their busy time, the trace
written for a browser, and the fixed cost's arithmetic. (Its timings are figures printed by
`make bench`, not tested.)"""

import numpy as np
import pytest

from deepdensity.perf.profile import busy_length, chrome_trace, kernel_seconds, op_group, op_intervals, op_type_of
from deepdensity.perf.step_figures import fixed_cost


@pytest.mark.parametrize(
    "name, op_type",
    [
        ("deepdensity_autoencoder/conv1/Relu:_MklNativeFusedConv3D", "_MklNativeFusedConv3D"),
        ("Adam/Adam/update_2/ResourceApplyAdam:ResourceApplyAdam", "ResourceApplyAdam"),
        ("ExecutorState::Process", None),  # TensorFlow's executor
        ("Iterator::Root::Prefetch::ForeverRepeat", None),  # tf.data
        ("EagerLocalExecute: __inference_train_function_2290", None),  # the Python side's call
        ("train_function", None),
    ],
)
def test_only_op_kernels_are_counted(name, op_type):
    assert op_type_of(name) == op_type


@pytest.mark.parametrize(
    "op_type, group",
    [
        ("_MklNativeFusedConv3D", "Conv3D forward"),
        ("_MklNativeConv3DBackpropFilterV2", "Conv3D backward"),
        ("_MklNativeConv3DBackpropInputV2", "Conv3D backward"),
        ("ResourceApplyAdam", "Adam update"),
        ("DeepDensityRender", "rendering"),
        ("DeepDensityRenderGrad", "rendering"),
        ("_MklNativeFusedMatMul", "dense layers"),
        ("BiasAddGrad", "dense layers"),
        ("Log1p", "other ops"),
    ],
)
def test_op_groups(op_type, group):
    assert op_group(op_type) == group


def test_busy_time_is_the_union_of_the_intervals():
    assert busy_length([(0, 10), (5, 15), (20, 25)]) == 20  # overlap counted once, gap not at all
    assert busy_length([(0, 10), (2, 3)]) == 10  # nested
    assert busy_length([]) == 0


def test_busy_time_against_counting_covered_cells():
    # reference: mark every unit cell [t, t + 1) an integer interval covers, count them
    rng = np.random.default_rng(0)
    for _ in range(200):
        starts = rng.integers(0, 100, size=rng.integers(1, 12))
        intervals = [(int(s), int(s + d)) for s, d in zip(starts, rng.integers(0, 30, size=len(starts)))]
        covered = np.zeros(140, bool)
        for s, e in intervals:
            covered[s:e] = True
        assert busy_length(intervals) == covered.sum()


def _space():
    """One plane, one thread: a Conv3D kernel inside the executor's event, then an Adam kernel."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    plane.event_metadata[1].name = "conv1/Relu:_MklNativeFusedConv3D"
    plane.event_metadata[2].name = "ExecutorState::Process"
    plane.event_metadata[3].name = "update/ResourceApplyAdam:ResourceApplyAdam"
    line = plane.lines.add(name="tf_Compute/1", timestamp_ns=2000)
    for metadata_id, offset_us, duration_us in ((2, 0, 10), (1, 1, 6), (3, 8, 4)):
        line.events.add(metadata_id=metadata_id, offset_ps=offset_us * 10**6, duration_ps=duration_us * 10**6)
    return space


def test_kernels_and_their_intervals_from_a_profile():
    space = _space()
    assert kernel_seconds(space) == {
        "_MklNativeFusedConv3D": [pytest.approx(6e-6), 1],
        "ResourceApplyAdam": [pytest.approx(4e-6), 1],
    }
    # the line starts at 2000 ns = 2e6 ps; the executor's event is not a kernel
    assert sorted(op_intervals(space)) == [(3 * 10**6, 9 * 10**6), (10 * 10**6, 14 * 10**6)]
    assert busy_length(op_intervals(space)) == 10 * 10**6  # 6 us + 4 us, no overlap


def test_the_trace_is_chrome_trace_events_in_microseconds():
    events = chrome_trace(_space())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in spans] == [
        ("ExecutorState::Process", 2.0, 10.0),
        ("conv1/Relu:_MklNativeFusedConv3D", 3.0, 6.0),
        ("update/ResourceApplyAdam:ResourceApplyAdam", 10.0, 4.0),
    ]
    assert {e["args"]["name"] for e in events if e["ph"] == "M"} == {"/host:CPU", "tf_Compute/1"}


def test_the_fixed_cost_compares_batch_one_with_a_samples_share_of_batch_32():
    rows = [{"batch": 1, "step_ms": 3.0, "gflops": 10.0}, {"batch": 32, "step_ms": 16.0, "gflops": 150.0}]
    found = fixed_cost(rows, {"conv3d_7x7x7_stride2_b32": 200.0})
    assert found == {
        "step_b1_ms": 3.0,
        "step_b32_per_sample_ms": 0.5,
        "b1_over_b32_per_sample": 6.0,
        "gflops_b32_over_conv_roof": 0.75,
    }


def test_a_steps_time_without_kernels_splits_before_between_and_after_them():
    # in picoseconds; step 1 [0, 100]: kernels [10, 40] and [30, 60] overlap (busy 50), then
    # [70, 80]: 10 before, 10 between (60..70), 20 after. Step 2 [200, 260]: one kernel
    # [190, 220] that began before the call (clipped to 200), none after 220: 0 before, 0
    # between, 40 after. A kernel outside both steps (150-160) counts nowhere.
    from deepdensity.perf.profile import step_gaps

    spans = [(0, 100), (200, 260)]
    kernels = [(10, 40), (30, 60), (70, 80), (150, 160), (190, 220)]
    found = step_gaps(spans, kernels)
    per_step = {k: v * 1e12 for k, v in found.items()}  # back to picoseconds per step
    assert per_step == pytest.approx(
        {"before_first_kernel": 5.0, "between_kernels": 5.0, "after_last_kernel": 30.0, "step_call": 80.0}
    )


def test_a_step_with_no_kernel_is_all_before():
    from deepdensity.perf.profile import step_gaps

    assert step_gaps([(0, 50)], [(60, 70)]) == pytest.approx(
        {"before_first_kernel": 50e-12, "between_kernels": 0.0, "after_last_kernel": 0.0, "step_call": 50e-12}
    )


def test_the_steps_are_keras_train_function_calls_on_any_line():
    from deepdensity.perf.profile import step_spans

    space = _space()
    plane = space.planes[0]
    plane.event_metadata[4].name = "train_function"
    line = plane.lines.add(name="python", timestamp_ns=1000)
    line.events.add(metadata_id=4, offset_ps=5 * 10**6, duration_ps=20 * 10**6)
    # the python line starts at 1000 ns = 1e6 ps; the kernels' line's events are not steps
    assert step_spans(space) == [(6 * 10**6, 26 * 10**6)]
