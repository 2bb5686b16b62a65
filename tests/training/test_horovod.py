"""Real `horovodrun -np 2` runs against one process on the same global batches.

Strong scaling on N workers must follow the sequential optimisation path (paper eq. 2
with B' = B); weak/warmup on 2 workers must follow `--emulate-workers 2`. These equivalence
tests run under each controller this Horovod was built with (`np2`: MPI and Gloo).
"""

import json
import sys

import pytest

from deepdensity.launch import controllers
from tests.support import ROOT, SMOKE, assert_keras2, horovodrun, launch, losses, run  # noqa: F401 (launch, losses: other modules import them from here)

# Every test here launches horovodrun or trains in a subprocess.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(horovodrun() is None, reason="horovodrun not installed")]


# Where the controller is not the test's subject (the epoch definition, the warmup schedule),
# one controller: Gloo, which every build of the project has. The equivalence of two real
# workers with one process, under strong and weak scaling, runs under each controller.
ONE_CONTROLLER = ["gloo"]


def controller_cases(every: list, one: list) -> list:
    """(value, controller) cases for an indirect `np2`: each of `every` under each controller,
    each of `one` under ONE_CONTROLLER."""
    return [(v, c) for v in every for c in controllers.CONTROLLERS] + [(v, c) for v in one for c in ONE_CONTROLLER]


@pytest.fixture(params=controllers.CONTROLLERS)
def np2(request, monkeypatch):
    """`horovodrun --mpi -np 2`, then `--gloo` (or the controllers a test names, indirect): each
    controller horovodrun --check-build lists, the other skipped with its reason. Run as root
    (CI), without OpenMPI's root variables, which Horovod's mpirun does without; MPI's ranks yield their core
    while waiting, as `deepdensity
    launch` has them."""
    name = request.param
    if name not in controllers.built(horovodrun()):
        pytest.skip(f"this Horovod was built without {name.upper()} (horovodrun --check-build)")
    for var in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        monkeypatch.delenv(var, raising=False)
    for var, value in controllers.MPI_ENV.items():
        monkeypatch.setenv(var, value)
    return [horovodrun(), controllers.FLAGS[name], "-np", "2"]


# Real and emulated workers (and N workers against the sequential run) differ only in float32
# rounding: another thread count per process, and on another CPU other oneDNN kernels. The
# largest relative difference of a loss over these 3-epoch runs (local, weak, warmup; real
# against emulated) measured 7e-8 on a 2-core AVX2 AMD EPYC, the same with
# ONEDNN_MAX_CPU_ISA=SSE41, and 4.6e-5 on an AVX-512/AMX Intel Xeon (where the former 1e-5
# failed). The bound is ten times the largest and still a hundred times below what one epoch
# changes the loss by on the smoke data (about 5 %), so a path that really differs fails.
LOSS_REL = 5e-4
# The weights are compared tensor by tensor: ||w_b - w_a|| <= WEIGHT_REL ||w_a||. Element by
# element they cannot be: Adam moves a weight whose gradient is near zero by up to about lr a
# step whichever way rounding tips the gradient's sign, so single elements of the same path
# differ by a third of lr (3.4e-4, conv1) after 12 steps. Measured on the smoke runs (local
# real against emulated, strong on 2 against 1; 2-core Intel Xeon, AVX-512, the same with
# ONEDNN_MAX_CPU_ISA=AVX2): at most 3.8e-3 (local, conv1 bias) and 3.8e-7 (strong). A path
# that really differs gives 0.18 (lr x 1.1) and 0.43 (local_steps 2 against 3). The bound is
# five times the largest rounding and a ninth of a 10 % change of the lr.
WEIGHT_REL = 2e-2


def assert_same_path(a, b):
    assert len(a) == len(b) == 3
    for (la, va, ra), (lb, vb, rb) in zip(a, b):
        # float32 rounding: the sum of two half-batch means is not bitwise the full mean
        assert lb == pytest.approx(la, rel=LOSS_REL) and vb == pytest.approx(va, rel=LOSS_REL)
        assert rb == pytest.approx(ra, rel=1e-7)


def assert_same_weights(a, b):
    import numpy as np

    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        gap = np.linalg.norm(b[name].astype(np.float64) - a[name]) / np.linalg.norm(a[name])
        assert gap <= WEIGHT_REL, f"{name}: ||difference|| / ||weights|| = {gap:.3g}"


def weights(out):
    import h5py
    import numpy as np

    arrays = []
    with h5py.File(out / "weights.h5", "r") as f:
        f.visititems(lambda name, obj: arrays.append((name, np.array(obj))) if hasattr(obj, "shape") else None)
    return dict(arrays)


def smoke_under_mpi(cases: list) -> list:
    """The cases, the first under MPI (the paper's controller) in the smoke tier."""
    first = next((c for c in cases if c[1] == "mpi"), None)
    return [pytest.param(*c, marks=[pytest.mark.smoke] if c == first else []) for c in cases]


@pytest.mark.parametrize(
    "definition, np2", smoke_under_mpi(controller_cases(["per_worker"], ["global"])), indirect=["np2"]
)
def test_strong_on_two_workers_follows_the_sequential_path(tmp_path, smoke_data, definition, np2, one_process):
    """per_worker: epoch e on 2 workers is sequential passes 2e and 2e+1, so its epoch 1
    ends with the sequential epoch 2's validation loss and weights; global: epoch for epoch."""
    per_worker = definition == "per_worker"
    # under the default xla (the smoke settings turn it off to start faster): the coefficients
    # XLA compiles, on real workers, on every stack the smoke tier runs on
    d = ["--set", f"epoch_definition={definition}", "--set", "xla=coefficients"]
    one, one_out = one_process("strong", *d, "--set", f"max_epochs={4 if per_worker else 3}")
    two = launch(np2, "strong", tmp_path / "two", smoke_data, *d, "--set", f"max_epochs={2 if per_worker else 3}")
    if per_worker:
        assert len(one) == 4 and len(two) == 2
        for (_, v2, r2), (_, v1, r1) in zip(two, one[1::2]):
            assert v2 == pytest.approx(v1, rel=LOSS_REL) and r2 == pytest.approx(r1, rel=1e-7)
    else:
        assert_same_path(one, two)
    assert_same_weights(weights(one_out), weights(tmp_path / "two"))
    cfg = json.loads((tmp_path / "two" / "config.json").read_text())
    assert (cfg["world_size"], cfg["global_batch"], cfg["per_worker_batch"]) == (2, 32, 16)
    assert cfg["steps_per_epoch"] == (8 if per_worker else 4), "128 cubes: 4 steps a pass"
    assert not (tmp_path / "two" / "rank1").exists()
    controller = "mpi" if controllers.FLAGS["mpi"] in np2 else "gloo"
    assert cfg["launch"]["controller"] == controller, "the run names the controller it ran under"
    assert_keras2(cfg)  # horovodrun's ranks set TF_USE_LEGACY_KERAS themselves
    assert json.loads((one_out / "config.json").read_text())["launch"]["controller"] is None


@pytest.mark.parametrize("mode, np2", controller_cases(["weak"], ["warmup"]), indirect=["np2"])
def test_two_real_workers_match_two_emulated_workers(tmp_path, smoke_data, mode, np2, one_process):
    extra = ["--set", "warmup_epochs=2"]
    emulated, _ = one_process(mode, "--emulate-workers", "2", *extra)
    real = launch(np2, mode, tmp_path / "real", smoke_data, *extra)
    assert_same_path(emulated, real)
    if mode == "weak":
        # the emulated global batch of 64 cut into two slices of 32, gradients averaged:
        # what the two real workers do with their allreduce
        sliced, _ = one_process(mode, "--emulate-workers", "2", "--set", "max_pass_batch=32", *extra)
        assert_same_path(sliced, real)
        # the gradients in one fused allreduce (allreduce_groups=1, the default) or one each:
        # the same sums, so the same losses to the bit
        ungrouped = launch(np2, mode, tmp_path / "ungrouped", smoke_data, "--set", "allreduce_groups=0", *extra)
        assert ungrouped == real
    if mode == "warmup":
        assert real[0][2] < real[-1][2] == pytest.approx(2 * 0.00105)
    # Horovod: rank 0 alone writes TensorBoard logs: one event file in the run's tb/, none elsewhere
    events = list((tmp_path / "real").rglob("events.out.tfevents.*"))
    assert [e.parent for e in events] == [tmp_path / "real" / "tb"], events


@pytest.mark.parametrize("np2", ONE_CONTROLLER, indirect=True)
def test_our_warmup_matches_horovods_own_callback(tmp_path, np2):
    """Horovod's LearningRateWarmupCallback on 2 workers is the reference for the warmup policy's lr_at."""
    script = tmp_path / "warm.py"
    # Horovod's own example, as a user writes it on TensorFlow 2.16 or later: Keras 2 by the variable
    script.write_text("""
import importlib.util, os
if importlib.util.find_spec("tf_keras"):      # TensorFlow 2.15's tf.keras is Keras 2 without it
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
import json, numpy as np, tensorflow as tf, horovod.tensorflow.keras as hvd
from deepdensity.scaling import policies
hvd.init()
steps, W, eta = 3, 2, 0.00105
seen = []
class Record(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None): self.e = epoch
    def on_train_batch_begin(self, batch, logs=None):
        seen.append((self.e, batch, float(tf.keras.backend.get_value(self.model.optimizer.lr))))
m = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
m.compile(hvd.DistributedOptimizer(tf.keras.optimizers.legacy.Adam(eta * hvd.size())), "mse")
cb = [hvd.callbacks.LearningRateWarmupCallback(initial_lr=eta * hvd.size(), warmup_epochs=W,
      steps_per_epoch=steps), Record()]
m.fit(np.zeros((steps * 4, 2)), np.zeros(steps * 4), batch_size=4, epochs=4, callbacks=cb, verbose=0)
p = policies.plan("warmup", hvd.size(), 32, eta, warmup_epochs=W)
ours = [p.lr_at(e, b, steps) for e, b, _ in seen]
if hvd.rank() == 0:
    print("JSON" + json.dumps({"horovod": [s[2] for s in seen], "ours": ours, "mpi": hvd.mpi_enabled()}))
""")
    proc = run(np2 + [sys.executable, str(script)])
    line = next(x for x in proc.stdout.splitlines() if "JSON" in x)
    got = json.loads(line.split("JSON", 1)[1])
    assert got["mpi"] == ("--mpi" in np2), "the ranks ran under the controller asked for"
    assert len(got["horovod"]) == 12
    assert got["ours"] == [pytest.approx(h, rel=1e-6) for h in got["horovod"]]


def rows(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_adaptive_takes_the_same_decisions_on_two_real_and_two_emulated_workers(tmp_path, smoke_data):
    """The spread of the two workers' gradients comes from an allreduce under horovodrun and
    from two slices in one process: the same statistics, the same batch every epoch."""
    extra = ["--set", "adaptive_theta=0.5"]
    launch([], "adaptive", tmp_path / "emu", smoke_data, "--emulate-workers", "2", *extra)
    launch([horovodrun(), "-np", "2"], "adaptive", tmp_path / "real", smoke_data, *extra)
    emu, real = rows(tmp_path / "emu"), rows(tmp_path / "real")
    assert [r["global_batch"] for r in real] == [r["global_batch"] for r in emu]
    assert [r["next_global_batch"] for r in real] == [r["next_global_batch"] for r in emu]
    assert emu[-1]["global_batch"] > 32, "theta 0.5 grows the batch on the smoke data"
    for a, b in zip(emu, real):
        assert b["grad_noise"] == pytest.approx(a["grad_noise"], rel=1e-3)
        assert b["grad_sq"] == pytest.approx(a["grad_sq"], rel=1e-4)
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=LOSS_REL)


def test_local_on_two_real_workers_matches_two_emulated_workers(tmp_path, smoke_data):
    extra = ["--set", "local_steps=3"]
    emulated = launch([], "local", tmp_path / "emu", smoke_data, "--emulate-workers", "2", *extra)
    real = launch([horovodrun(), "-np", "2"], "local", tmp_path / "real", smoke_data, *extra)
    assert_same_path(emulated, real)
    assert [r["allreduces"] for r in rows(tmp_path / "real")] == [3, 3, 3]
    assert_same_weights(weights(tmp_path / "emu"), weights(tmp_path / "real"))


CYCLES = """
import sys, time
from deepdensity.training import dist
dist.setup(0, float(sys.argv[1]))
time.sleep(1.5)  # idle: Horovod's background thread just cycles
"""


@pytest.mark.parametrize(
    "configured, user_env, expected_ms",
    [
        (20.0, None, 20.0),  # config.horovod_cycle_ms reaches Horovod
        (20.0, "3", 3.0),  # a user's own HOROVOD_CYCLE_TIME wins
        (0.0, None, 1.0),  # 0 leaves Horovod 0.28's default, 1 ms
    ],
)
def test_the_cycle_time_horovod_runs_is_the_one_configured(tmp_path, monkeypatch, configured, user_env, expected_ms):
    import re
    import statistics

    # Horovod's own timeline marks the start of each background cycle: the spacing of those
    # marks is the cycle time Horovod actually runs, whatever our code believes it set.
    timeline = tmp_path / "timeline.json"
    monkeypatch.setenv("HOROVOD_TIMELINE", str(timeline))
    monkeypatch.setenv("HOROVOD_TIMELINE_MARK_CYCLES", "1")
    if user_env is None:
        monkeypatch.delenv("HOROVOD_CYCLE_TIME", raising=False)
    else:
        monkeypatch.setenv("HOROVOD_CYCLE_TIME", user_env)
    run([sys.executable, "-c", CYCLES, str(configured)])
    starts = [int(t) for t in re.findall(r'"CYCLE_START", "ts": (\d+)', timeline.read_text())]
    assert len(starts) > 10
    gap_ms = statistics.median(b - a for a, b in zip(starts, starts[1:])) / 1e3
    # a cycle sleeps out the rest of its time, so it lasts its setting plus a little work
    # (the 5 % below: the timeline's microsecond stamps, not a cycle cut short)
    assert 0.95 * expected_ms <= gap_ms < expected_ms * 1.5 + 1


def test_the_default_data_set_is_made_once_by_rank_0_on_first_use(tmp_path, smoke_data):
    """A fresh clone has no data/: configs/smoke.yaml names data/smoke.h5, which the first
    run makes (rank 0 writes, rank 1 waits) and which equals `data synth`'s file."""
    import h5py
    import numpy as np

    proc = run(
        [
            horovodrun(),
            "-np",
            "2",
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "weak",
            "--config",
            SMOKE,
            "--set",
            "max_epochs=1",
            "--quiet",
        ],
        cwd=tmp_path,
    )
    made = [line for line in proc.stdout.splitlines() if "making the default data set data/smoke.h5" in line]
    assert len(made) == 1, proc.stdout
    assert "stopped at the epoch cap (1) after 1 epoch" in proc.stdout
    with h5py.File(tmp_path / "data" / "smoke.h5") as a, h5py.File(smoke_data) as b:
        for split in ("train", "val"):
            np.testing.assert_array_equal(a[f"{split}/cubes"][...], b[f"{split}/cubes"][...])
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["smoke.h5"], "no temporary file left"


def test_bad_input_under_horovodrun_is_said_once_by_rank_0(tmp_path):
    proc = run(
        [horovodrun(), "-np", "2", sys.executable, str(ROOT / "train.py"), "--mode", "weak", "--set", "base_lr=-1"],
        cwd=tmp_path,
        check=False,
    )
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "error: base_lr must be" in line]
    assert proc.returncode != 0 and len(said) == 1, proc.stdout + proc.stderr


@pytest.mark.parametrize("setting, per_rank", [("seed", "$RANK"), ("n_components", "$((4 + RANK))")])
def test_ranks_started_with_other_settings_stop_together_with_one_line(tmp_path, smoke_data, setting, per_rank):
    """A wrapper that gives each rank its own value: before, other seeds trained silently apart
    and another K ended in a TensorFlow traceback; now every rank stops before training."""
    wrapper = tmp_path / "per_rank.sh"
    # the rank as Gloo's driver (HOROVOD_RANK) or mpirun (OMPI_COMM_WORLD_RANK) names it
    wrapper.write_text(f'RANK=${{HOROVOD_RANK:-$OMPI_COMM_WORLD_RANK}}\nexec "$@" --set {setting}={per_rank}\n')
    proc = run(
        [
            horovodrun(),
            "-np",
            "2",
            "sh",
            str(wrapper),
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--set",
            f"data_path={smoke_data}",
            "--set",
            "max_epochs=1",
            "--out",
            str(tmp_path / "run"),
        ],
        check=False,
        timeout=300,
    )
    text = proc.stdout + proc.stderr
    said = [line for line in text.splitlines() if "error: the 2 ranks were started with different settings" in line]
    assert proc.returncode != 0 and len(said) == 1, text
    assert f"{setting}: rank 0" in said[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists(), "nothing trained"
