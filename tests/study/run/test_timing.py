"""The study's clock for N workers sharing this host (clocks.shared_host_epoch), against the
arithmetic written out here, and the claim text of the real strong-scaling runs."""

import json
import math

import pytest

from deepdensity.study.core.clocks import shared_host_epoch
from deepdensity.study.core.protocol_text import real_strong_summary

PARTS = {
    "compute_scale": 0.9,
    "step_fixed_s": 0.010,
    "per_sample_s": 0.0008,
    "eval_per_sample_s": 0.0004,
    "allreduce_per_doubling_s": 0.0047,
    "allreduce_latency_s": 0.003,
    "epoch_overhead_s": 0.05,
    "shared_step_seconds": {"1": 0.027, "2": 0.026, "4": 0.034},
}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_a_shared_host_epoch_is_its_measured_steps_and_allreduces_plus_one_evaluation(n):
    # per_worker epochs: an epoch at N is N passes of floor(1844 / 32) = 57 global batches of
    # 32, each step a rank's contended step (scaled by k = 0.9 at N = 1 only, where k was fitted)
    # plus an allreduce over N processes, a latency and 4.7 ms per doubling (none at N = 1); the
    # validation set once (k x 0.4 ms x 256) and the epoch's own work once
    steps = 57 * n
    step = 0.9 * 0.027 if n == 1 else {2: 0.026, 4: 0.034}[n] + 0.003 + 0.0047 * math.log2(n)
    want = steps * step + 0.9 * 0.0004 * 256 + 0.05
    assert shared_host_epoch(PARTS, n, 1844, 256, 32, "per_worker") == pytest.approx(want, rel=1e-12)


def test_the_clocks_allreduce_in_words_names_its_latency_only_where_the_fit_gave_one():
    from deepdensity.study.core.clocks import describe_allreduce

    assert (
        describe_allreduce({**PARTS, "allreduce_latency_s": 0.00544})
        == "5.44 ms + 4.70 ms per doubling of N (none at N = 1)"
    )
    assert describe_allreduce({**PARTS, "allreduce_latency_s": 0.0}) == "4.70 ms per doubling of N"


def test_the_real_strong_runs_are_described_beside_the_sequential_run():
    rows = [
        {"n": 2, "seed": 0, "status": "target", "epochs": 9, "passes_to_target": 17, "sequential_passes": 17},
        {"n": 4, "seed": 0, "status": "stalled", "epochs": 7, "passes_to_target": None, "sequential_passes": 17},
    ]
    assert real_strong_summary(rows) == (
        "run for real on seed 0: horovodrun -np 2 reached it after 17 passes (the sequential run: 17); "
        "horovodrun -np 4 did not reach the target (stalled, 7 epochs)"
    )
    assert real_strong_summary([]) == "not run for real in this study"


ROUND = {
    "steps": {"1": 0.003, "32": 0.021},
    "eval": 0.00037,
    "shared": {"2": 0.025, "4": 0.034},
    "allreduce": {"2": 0.004, "4": 0.006},
    "real": {"1": 1.5, "2": 3.9, "4": 9.9},
    "real_steps": {"1": 1.2, "2": 3.6, "4": 9.5},
}


def test_the_step_scale_meets_the_real_steps_and_the_rest_of_the_epoch_is_its_overhead():
    # one process, 1844 cubes: 57 steps of 32 a per_worker epoch; the probe's step 3.8 + 0.627 x 32
    # = 23.864 ms, so 57 steps = 1.360248 s against 1.351 s real: k = 1.351 / 1.360248; the
    # epoch's remaining 1.5865 - 1.351 s less k x 0.384 ms x 256 of evaluation is the overhead
    from deepdensity.study.core.clocks import model_epoch, shared_host_epoch, step_scale_and_overhead

    parts = {
        "step_fixed_s": 0.0038,
        "per_sample_s": 0.000627,
        "eval_per_sample_s": 0.000384,
        "allreduce_per_doubling_s": 0.0,
        "allreduce_latency_s": 0.0059,
    }
    k, overhead = step_scale_and_overhead(parts, 1844, 256, 32, "per_worker", 1.5865, 1.351)
    assert k == pytest.approx(1.351 / 1.360248, rel=1e-9)
    assert overhead == pytest.approx(1.5865 - 1.351 - k * 0.000384 * 256, rel=1e-9)
    timing = {
        **parts,
        "compute_scale": k,
        "epoch_overhead_s": overhead,
        "shared_step_seconds": {"1": 0.023864, "2": 0.0254},
    }
    # the model's one-process epoch is the real one, on both models
    assert model_epoch(timing, "strong", 1, 1844, 256, 32, "per_worker") == pytest.approx(1.5865, rel=1e-9)
    assert shared_host_epoch(timing, 1, 1844, 256, 32, "per_worker") == pytest.approx(1.5865, rel=1e-9)
    # at N = 2 the overhead is paid once an epoch, not per step, and a rank's shared step is as
    # measured in the ranks' configuration, not scaled by the one-process k: 114 x (25.4 + 5.9) ms
    want = 114 * (0.0254 + 0.0059) + k * 0.000384 * 256 + overhead
    assert shared_host_epoch(timing, 2, 1844, 256, 32, "per_worker") == pytest.approx(want, rel=1e-12)
    # a real epoch whose steps leave nothing for the evaluation: no negative overhead
    assert step_scale_and_overhead(parts, 1844, 256, 32, "per_worker", 1.36, 1.36)[1] == 0.0


def test_the_rounds_are_combined_figure_by_figure_by_their_medians_then_fitted():
    # three rounds, the second disturbed: each figure is its median over the rounds, and the
    # fits go through the medians (worked by hand below)
    from deepdensity.study.core.clocks import combine_rounds

    slow = {
        "steps": {"1": 0.009, "32": 0.040},
        "eval": 0.001,
        "shared": {"2": 0.050, "4": 0.070},
        "allreduce": {"2": 0.020, "4": 0.001},
        "real": {"1": 3.0, "2": 8.0, "4": 20.0},
        "real_steps": {"1": 2.0, "2": 7.0, "4": 19.0},
    }
    fast = {
        "steps": {"1": 0.002, "32": 0.019},
        "eval": 0.0003,
        "shared": {"2": 0.024, "4": 0.033},
        "allreduce": {"2": 0.003, "4": 0.008},
        "real": {"1": 1.4, "2": 3.8, "4": 9.8},
        "real_steps": {"1": 1.1, "2": 3.5, "4": 9.4},
    }
    t = combine_rounds([ROUND, slow, fast], 32)
    assert t["step_seconds"] == {"1": 0.003, "32": 0.021}
    # the line through (1, 3 ms) and (32, 21 ms): 18 / 31 ms per sample, 3 - 18 / 31 ms fixed
    assert t["per_sample_s"] == pytest.approx(0.018 / 31) and t["step_fixed_s"] == pytest.approx(0.003 - 0.018 / 31)
    assert t["shared_step_seconds"] == {"1": 0.021, "2": 0.025, "4": 0.034}
    assert t["allreduce_seconds"] == {"1": 0.0, "2": 0.004, "4": 0.006}
    # medians 4 and 6 ms at N = 2 and 4: a + c = 4, a + 2c = 6 -> a = 2, c = 2 ms
    assert t["allreduce_latency_s"] == pytest.approx(0.002) and t["allreduce_per_doubling_s"] == pytest.approx(0.002)
    assert t["eval_per_sample_s"] == 0.00037 and t["real_epoch_seconds"] == {"1": 1.5, "2": 3.9, "4": 9.9}
    assert t["real_steps_seconds"] == {"1": 1.2, "2": 3.6, "4": 9.5}
    assert t["rounds"] == [ROUND, slow, fast]


CFG = type("Cfg", (), {"base_lr": 1e-3, "batch_size": 32, "epoch_definition": "per_worker", "horovod_cycle_ms": 5.0})()


@pytest.fixture
def timed(tmp_path, monkeypatch):
    """measure_timing with everything but its own bookkeeping faked: the host (an AMD EPYC with
    AVX2), the model's size, the allreduce alone (under MPI) and the fitted scale; a study's settings file in
    tmp_path. The rounds are for each test to fake."""
    from deepdensity.model import autoencoder
    from deepdensity.study.core import clocks
    from deepdensity.study.run import timing
    from deepdensity.utils import machine

    monkeypatch.setattr(autoencoder, "build_model", lambda *a: type("M", (), {"count_params": lambda self: 7})())
    monkeypatch.setattr(machine, "cpu_model", lambda: "AMD EPYC 7B13")
    monkeypatch.setattr(machine, "onednn_isa", lambda: "AVX2")
    monkeypatch.setattr(timing, "allreduce_alone", lambda *a, **k: {"2": 0.005, "4": 0.009})
    monkeypatch.setattr(timing, "probes_controller", lambda: "mpi")
    monkeypatch.setattr(clocks, "step_scale_and_overhead", lambda *a: (1.25, 0.1))
    (tmp_path / "train.yaml").write_text("batch_size: 32\n")
    return timing


def test_a_clock_measured_by_an_older_probe_is_measured_again_and_kept_beside(tmp_path, monkeypatch, timed):
    # timing.json files of version 1 (no clock_version) priced train_on_batch's 5-6 ms a step:
    # reusing one beside new runs would mix two clocks in one report.
    measured = []
    monkeypatch.setattr(timed, "measure_round", lambda *a, **k: measured.append("round") or ROUND)
    (tmp_path / "timing.json").write_text('{"compute_scale": 0.67}')
    said = []
    got = timed.measure_timing(tmp_path, tmp_path / "train.yaml", CFG, 1844, 256, say=said.append)
    assert measured == ["round"] * 3 and got["clock_version"] == 5
    assert got["compute_scale"] == 1.25 and got["epoch_overhead_s"] == 0.1
    assert got["n_weights"] == 7 and got["allreduce_alone_seconds"]["4"] == 0.009
    assert got["controller"] == "mpi", "the clock names the controller its horovodrun ran under"
    assert (tmp_path / "timing-v1.json").read_text() == '{"compute_scale": 0.67}'
    assert any("measured again" in line for line in said)
    # the file it wrote is this version's: read back, not measured a second time
    assert timed.measure_timing(tmp_path, tmp_path / "train.yaml", CFG, 1844, 256, say=said.append) == json.loads(
        json.dumps(got)
    )
    assert measured == ["round"] * 3


def scripted_rounds(monkeypatch, timing, rounds: list, stop_after: int = None, signal=KeyboardInterrupt):
    """Fake measure_round: the given rounds in order, and after `stop_after` of them the
    interrupt (Ctrl-C, or SIGTERM as utils.errors raises it) in the middle of the next one.
    Returns the list of rounds it measured."""
    measured = []

    def measure_round(*a, **k):
        if stop_after is not None and len(measured) == stop_after:
            raise signal()
        measured.append(rounds[len(measured)])
        return measured[-1]

    monkeypatch.setattr(timing, "measure_round", measure_round)
    return measured


R1, R2, R3 = ({**ROUND, "eval": e} for e in (0.00037, 0.00041, 0.00039))


@pytest.mark.parametrize("interrupt", ["ctrl-c", "sigterm"])
def test_an_interrupted_clock_keeps_its_finished_rounds_and_resumes_at_the_first_unfinished(
    tmp_path, monkeypatch, timed, interrupt
):
    from deepdensity.utils.errors import EXIT_SIGTERM, Interrupted

    signal = KeyboardInterrupt if interrupt == "ctrl-c" else (lambda: Interrupted(EXIT_SIGTERM))
    scripted_rounds(monkeypatch, timed, [R1, R2], stop_after=2, signal=signal)
    said = []
    with pytest.raises(KeyboardInterrupt):
        timed.measure_timing(tmp_path, tmp_path / "train.yaml", CFG, 1844, 256, say=said.append)
    assert said == ["timing: round 1 of 3", "timing: round 2 of 3", "timing: round 3 of 3"]
    assert not (tmp_path / "timing.json").exists()
    assert json.loads((tmp_path / "timing-rounds.json").read_text())["rounds"] == [R1, R2]
    # the study run again: rounds 1 and 2 are read back, round 3 alone is measured
    measured, said = scripted_rounds(monkeypatch, timed, [R3]), []
    got = timed.measure_timing(tmp_path, tmp_path / "train.yaml", CFG, 1844, 256, say=said.append)
    assert measured == [R3]
    assert said[0] == f"timing: rounds 1-2 of 3 kept from an interrupted invocation ({tmp_path / 'timing-rounds.json'})"
    assert said[1] == "timing: round 3 of 3" and "timing: round 1 of 3" not in said
    assert got["rounds"] == [R1, R2, R3] and got["eval_per_sample_s"] == 0.00039  # median of 0.37, 0.41, 0.39
    assert json.loads((tmp_path / "timing.json").read_text())["rounds"] == [R1, R2, R3]
    assert not (tmp_path / "timing-rounds.json").exists()  # timing.json holds them now


@pytest.mark.parametrize(
    "change, named",
    [
        ("isa", "onednn_isa"),  # ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 host, or another host
        ("batches", "step_batches"),  # the probe's batch list changed in the code
        ("settings", "train_settings_sha256"),  # the study's settings file changed
        ("controller", "controller"),  # Horovod rebuilt with MPI between the two invocations
    ],
)
def test_rounds_kept_under_other_settings_are_measured_again(tmp_path, monkeypatch, timed, change, named):
    from deepdensity.utils import machine

    scripted_rounds(monkeypatch, timed, [R1, R2], stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        timed.measure_timing(tmp_path, tmp_path / "train.yaml", CFG, 1844, 256, say=lambda line: None)
    if change == "isa":
        monkeypatch.setattr(machine, "onednn_isa", lambda: "AVX-512")
    elif change == "batches":
        monkeypatch.setattr(timed, "STEP_BATCHES", [1, 32])
    elif change == "controller":
        monkeypatch.setattr(timed, "probes_controller", lambda: "gloo")
    else:
        (tmp_path / "train.yaml").write_text("batch_size: 64\n")
    measured, said = scripted_rounds(monkeypatch, timed, [R3, R3, R3]), []
    got = timed.measure_timing(tmp_path, tmp_path / "train.yaml", CFG, 1844, 256, say=said.append)
    assert measured == [R3, R3, R3] and got["rounds"] == [R3, R3, R3]
    assert said[0] == (
        f"timing: the 2 round(s) in {tmp_path / 'timing-rounds.json'} were measured under other "
        f"settings ({named}): measured again"
    )
    assert "timing: round 1 of 3" in said


def test_a_damaged_rounds_file_is_measured_again(tmp_path, monkeypatch, timed):
    (tmp_path / "timing-rounds.json").write_text('{"settings": {}, "rounds": [{"steps": 1}]}')
    measured = scripted_rounds(monkeypatch, timed, [R1, R2, R3])
    got = timed.measure_timing(tmp_path, tmp_path / "train.yaml", CFG, 1844, 256, say=lambda line: None)
    assert measured == [R1, R2, R3] and got["rounds"] == [R1, R2, R3]


def test_the_allreduce_is_the_median_of_paired_differences(monkeypatch):
    """One launch of n ranks times blocks without and with the allreduce in turn; rank 0 prints
    them. Scripted blocks (seconds), one pair disturbed (the second): the medians are read off
    by hand, and a block with the allreduce faster than its pair counts as 0, not below."""
    import subprocess

    from deepdensity.perf import probes

    printed = '{"without": [0.024, 0.030, 0.023, 0.025], "with": [0.034, 0.055, 0.035, 0.021]}'
    launched = []

    def run_child(args, env=None, timeout=None):
        launched.append(args)
        return subprocess.CompletedProcess(args, 0, f"[0]<stdout>:PAIRED_STEP_SECONDS {printed}\n", "")

    monkeypatch.setattr(probes, "run_child", run_child)
    monkeypatch.setattr(probes, "horovodrun_path", lambda: "horovodrun")  # the fast tier needs no Horovod
    without, paid = probes.paired_allreduce("train.yaml", 4, 8, 4)
    assert len(launched) == 1 and launched[0][1:3] == ["-np", "4"] and "paired-step" in launched[0]
    assert launched[0][launched[0].index("--pairs") + 1] == "4" and launched[0][launched[0].index("--batch") + 1] == "8"
    assert without == pytest.approx(0.0245)  # median of 24, 30, 23, 25 ms
    assert paid == pytest.approx(0.0110)  # median of 10, 25, 12, 0 (-4) ms
    with pytest.raises(ValueError):
        probes.paired_medians([0.02], [])
