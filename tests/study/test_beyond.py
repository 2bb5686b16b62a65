"""The two modes beyond the paper: adaptive batches (De et al. 2017) and local SGD.

Rules against NumPy and hand-made gradients; the training steps against plain Keras
steps on a tiny model (an independent path: per-part gradients from GradientTape, one
model per worker); the trainer's bookkeeping (batches, allreduces, resume) on smoke runs.
"""

import json
import math
import sys

import numpy as np
import pytest

from deepdensity.scaling import policies, rules
from deepdensity.study.core import speedup
from tests.support import ROOT, SMOKE, run


# ------------------------------------------------------------------------------------
# rules
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("parts", [2, 3, 8])
def test_gradient_noise_is_the_sample_variance_of_the_part_means_over_n(parts):
    rng = np.random.default_rng(parts)
    g = rng.normal(size=(parts, 50)) + 0.3  # N part means of a 50-weight model
    mean = g.mean(axis=0)
    by_definition = np.sum((g - mean) ** 2) / (parts - 1) / parts  # s^2 / N
    noise = rules.gradient_noise(float(np.mean(np.sum(g**2, axis=1))), float(mean @ mean), parts)
    assert noise == pytest.approx(by_definition, rel=1e-9)


def test_gradient_noise_estimates_the_error_of_the_batch_gradient():
    """Parts drawn around a known gradient with known per-sample covariance: the estimate
    averages to E||g - grad||^2 = tr(Sigma) / (N b)."""
    rng = np.random.default_rng(0)
    true, n, b, sigma = np.full(20, 0.1), 4, 8, 0.5
    estimates, errors = [], []
    for _ in range(4000):
        parts = true + rng.normal(scale=sigma, size=(n, b, 20)).mean(axis=1)
        g = parts.mean(axis=0)
        estimates.append(rules.gradient_noise(float(np.mean(np.sum(parts**2, axis=1))), float(g @ g), n))
        errors.append(float(np.sum((g - true) ** 2)))
    expected = 20 * sigma**2 / (n * b)
    assert np.mean(errors) == pytest.approx(expected, rel=0.05)
    assert np.mean(estimates) == pytest.approx(expected, rel=0.05)


def test_gradient_noise_needs_two_parts_and_is_never_negative():
    with pytest.raises(ValueError):
        rules.gradient_noise(1.0, 1.0, 1)
    assert rules.gradient_noise(1.0, 1.0 + 1e-7, 2) == 0.0  # float32 rounding of identical parts


@pytest.mark.parametrize(
    "b, noise, signal, theta, cap, expected",
    [
        (8, 1.0, 1.0, 1.0, 32, 8),  # noise = theta^2 signal: the test holds, keep
        (8, 0.5, 1.0, 1.0, 32, 8),
        (8, 2.0, 1.0, 1.0, 32, 16),  # twice too noisy: twice the batch
        (8, 1.1, 1.0, 1.0, 32, 9),  # 8.8 -> a whole sample more per worker
        (8, 1.0, 1.0, 0.5, 32, 32),  # theta^2 = 0.25: 4x
        (8, 100.0, 1.0, 1.0, 32, 32),  # never beyond the cap (weak's B)
        (32, 100.0, 1.0, 1.0, 32, 32),
        (8, 1.0, 0.0, 1.0, 32, 32),  # no signal at all: as big as allowed
        (8, math.nan, 1.0, 1.0, 32, 8),  # no estimate: keep
    ],
)
def test_adaptive_batch(b, noise, signal, theta, cap, expected):
    assert rules.adaptive_batch(b, noise, signal, theta, cap) == expected


def test_adaptive_batch_passes_its_own_test_after_growing():
    for noise in np.linspace(0.1, 5, 50):
        grown = rules.adaptive_batch(4, float(noise), 1.0, 1.0, 10**6)
        assert noise * 4 / grown <= 1.0 + 1e-12  # the noise falls as 1 / batch
        assert grown == 4 or noise * 4 / (grown - 1) > 1.0  # and no more than needed


@pytest.mark.parametrize("steps", [1, 5, 8, 57, 456])
@pytest.mark.parametrize("h", [1, 2, 3, 4, 8, 1000])
def test_local_syncs_count_the_sync_steps(steps, h):
    syncs = [s for s in range(steps) if rules.is_sync_step(s, steps, h)]
    assert len(syncs) == rules.local_syncs_per_epoch(steps, h)
    assert syncs[-1] == steps - 1  # every epoch ends averaged
    assert all(b - a <= h for a, b in zip([-1] + syncs, syncs))


def test_plans_of_the_beyond_modes():
    a = policies.plan("adaptive", 4, 32, 0.001)
    assert (a.global_batch, a.per_worker_batch, a.peak_lr) == (32, 8, 0.001)
    loc = policies.plan("local", 8, 32, 0.001, processes=1)
    assert (loc.global_batch, loc.per_worker_batch, loc.per_process_batch, loc.peak_lr) == (32, 4, 32, 0.001)
    with pytest.raises(rules.PlanError, match="N >= 2"):
        policies.plan("adaptive", 1)
    with pytest.raises(rules.PlanError, match="3 does not divide 32"):
        policies.plan("local", 3)


def test_an_adaptive_epoch_keeps_the_sample_stream_and_drops_only_the_remainder():
    p = policies.plan("adaptive", 4, 32)
    n_train = 1844  # 57 batches of 32: 1824 a pass
    base = rules.epoch_order(n_train, p, 3, seed=7)
    for gb in (32, 36, 88, 128):
        order = rules.epoch_order(n_train, p, 3, seed=7, global_batch=gb)
        steps = rules.steps_per_epoch(n_train, p, global_batch=gb)
        assert order.shape == (steps, gb) and steps == 4 * 1824 // gb
        np.testing.assert_array_equal(order.ravel(), base.ravel()[: steps * gb])


# ------------------------------------------------------------------------------------
# training steps, on a tiny model
# ------------------------------------------------------------------------------------
def _tiny(cls, **kwargs):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    x = tf.keras.Input((4,))
    y = tf.keras.layers.Dense(2)(tf.keras.layers.Dense(3, activation="tanh")(x))
    return cls(x, y, **kwargs)


def _data(n=48):
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, 4)).astype("f4"), rng.normal(size=(n, 2)).astype("f4")


def _compiled(cls, optimizer, parts):
    """`cls` holding `parts` workers (NoiseStep, LocalStep) or `parts` slices (SlicedStep), as
    the trainer makes them: by their constructor's arguments."""
    from deepdensity.model.steps import ByHandStep
    from deepdensity.training import dist

    model = _tiny(cls, **({"parts": parts} if issubclass(cls, ByHandStep) else {"grad_slices": parts}))
    model.compile(optimizer=optimizer, loss="mse")
    dist.create_slots(model, model.optimizer)
    if hasattr(model, "start_workers"):
        model.start_workers()
    return model


def _fit(model, x, y, batch, every=None):
    import tensorflow as tf

    class Sync(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, b, logs=None):
            if every and (b + 1) % every == 0:
                self.model.average_workers()

    model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0, callbacks=[Sync()])
    return [v.numpy() for v in model.trainable_variables]


def _sgd():
    import tensorflow as tf

    return tf.keras.optimizers.legacy.SGD(0.1)


def _adam():
    import tensorflow as tf

    return tf.keras.optimizers.legacy.Adam(0.01)


@pytest.mark.medium
def test_noise_step_reports_the_part_gradients_statistics():
    """One step of NoiseStep with 4 parts against GradientTape on each part separately."""
    import tensorflow as tf

    from deepdensity.model.steps import NoiseStep

    x, y = _data(16)
    model = _compiled(NoiseStep, _sgd(), 4)
    reference = _tiny(tf.keras.Model)  # same seed: same initial weights
    parts = []
    for i in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(reference(x[4 * i : 4 * i + 4]) - y[4 * i : 4 * i + 4]))
        parts.append(np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, reference.trainable_variables)]))
    parts = np.array(parts, dtype=np.float64)
    mean = parts.mean(axis=0)
    logs = model.train_on_batch(x, y, return_dict=True)
    assert logs["grad_part_sq"] == pytest.approx(np.mean(np.sum(parts**2, axis=1)), rel=1e-5)
    assert logs["grad_sq"] == pytest.approx(mean @ mean, rel=1e-5)
    after = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    before = np.concatenate([v.numpy().ravel() for v in reference.trainable_variables])
    np.testing.assert_allclose(after, before - 0.1 * mean, rtol=1e-5, atol=1e-7)


@pytest.mark.medium
def test_local_with_h1_and_sgd_is_synchronous_data_parallelism():
    """The identity local SGD rests on: with plain SGD, averaging the weights after every
    step is averaging the gradients before it."""
    from deepdensity.model.autoencoder import SlicedStep
    from deepdensity.model.steps import LocalStep

    x, y = _data()
    local = _fit(_compiled(LocalStep, _sgd(), 2), x, y, 8, every=1)
    sync = _fit(_compiled(SlicedStep, _sgd(), 2), x, y, 8)
    for a, b in zip(local, sync):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.medium
def test_local_with_h1_and_adam_is_synchronous_only_when_the_workers_agree():
    """With Adam it is not: the second moment averages g_i^2, not (mean g)^2. When both
    workers hold the same samples the gradients agree and so do the two paths."""
    from deepdensity.model.autoencoder import SlicedStep
    from deepdensity.model.steps import LocalStep

    x, y = _data()
    gap = max(
        np.abs(a - b).max()
        for a, b in zip(
            _fit(_compiled(LocalStep, _adam(), 2), x, y, 8, every=1), _fit(_compiled(SlicedStep, _adam(), 2), x, y, 8)
        )
    )
    assert gap > 1e-3
    twin = np.concatenate([np.concatenate([x[i : i + 4]] * 2) for i in range(0, 48, 8)])
    twin_y = np.concatenate([np.concatenate([y[i : i + 4]] * 2) for i in range(0, 48, 8)])
    for a, b in zip(
        _fit(_compiled(LocalStep, _adam(), 2), twin, twin_y, 8, every=1),
        _fit(_compiled(SlicedStep, _adam(), 2), twin, twin_y, 8),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.medium
def test_local_workers_between_averagings_are_independent_models():
    """Two emulated workers that never average follow two separate one-model runs on their
    halves: the swapping in and out of weights and moments loses nothing. Averaging at the
    end gives the mean of the two."""
    from deepdensity.model.steps import LocalStep

    x, y = _data()
    model = _compiled(LocalStep, _adam(), 2)
    _fit(model, x, y, 8)
    halves = []
    for w in range(2):
        xs = np.concatenate([x[i + 4 * w : i + 4 * w + 4] for i in range(0, 48, 8)])
        ys = np.concatenate([y[i + 4 * w : i + 4 * w + 4] for i in range(0, 48, 8)])
        halves.append(_fit(_compiled(LocalStep, _adam(), 1), xs, ys, 4))
    for k, store in enumerate(model.stores[: len(halves[0])]):
        for w in range(2):
            np.testing.assert_allclose(store.numpy()[w], halves[w][k], rtol=1e-5, atol=1e-6)
    model.average_workers()
    for v, a, b in zip(model.trainable_variables, *halves):
        np.testing.assert_allclose(v.numpy(), (a + b) / 2, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------
# the trainer's bookkeeping
# ------------------------------------------------------------------------------------
def train(out, mode, data, *extra):
    run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            mode,
            "--config",
            SMOKE,
            "--set",
            f"data_path={data}",
            "--out",
            str(out),
            "--quiet",
            *extra,
        ]
    )
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_adaptive_grows_its_batch_as_its_test_says_and_resumes_with_it(tmp_path, smoke_data):
    # images every epoch: TensorBoard's writer must survive adaptive's one fit per epoch
    extra = ["--emulate-workers", "2", "--set", "adaptive_theta=0.5", "--set", "tensorboard_images_every=1"]
    rows = train(tmp_path / "whole", "adaptive", smoke_data, *extra, "--set", "max_epochs=3")
    # and stay open across them: one event file for the run, not one per epoch
    assert [f.name.startswith("events.out.tfevents.") for f in (tmp_path / "whole" / "tb").iterdir()] == [True]
    for row, nxt in zip(rows, rows[1:]):
        assert nxt["global_batch"] == row["next_global_batch"]
        b = row["global_batch"] // 2
        assert row["next_global_batch"] == 2 * rules.adaptive_batch(b, row["grad_noise"], row["grad_sq"], 0.5, 32)
        assert row["steps"] == rules.steps_per_epoch(
            128, policies.plan("adaptive", 2), global_batch=row["global_batch"]
        )
    assert rows[0]["global_batch"] == 32 and rows[-1]["global_batch"] > 32, "the smoke data grows at theta 0.5"
    train(tmp_path / "cut", "adaptive", smoke_data, *extra, "--set", "max_epochs=1")
    resumed = train(tmp_path / "cut", "adaptive", smoke_data, *extra, "--set", "max_epochs=3", "--resume")
    assert [r["global_batch"] for r in resumed] == [r["global_batch"] for r in rows]
    for a, b in zip(resumed, rows):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)


@pytest.mark.slow
def test_local_logs_its_allreduces_and_validates_the_average(tmp_path, smoke_data):
    rows = train(
        tmp_path / "loc",
        "local",
        smoke_data,
        "--emulate-workers",
        "2",
        "--set",
        "local_steps=3",
        "--set",
        "max_epochs=2",
    )
    assert [(r["steps"], r["allreduces"], r["global_batch"]) for r in rows] == [(8, 3, 32)] * 2
    strong = train(tmp_path / "strong", "strong", smoke_data, "--emulate-workers", "2", "--set", "max_epochs=2")
    assert [(r["steps"], r["allreduces"]) for r in strong] == [(8, 8)] * 2
    assert rows[-1]["val_loss"] != pytest.approx(strong[-1]["val_loss"], rel=1e-6), "local is not strong"


def test_an_adaptive_run_taken_from_the_ledger_keeps_what_the_beyond_report_reads(tmp_path):
    """A later beyond study reuses its runs from the ledger; the record then reads their rows from
    the folder the ledger writes, so every key record.beyond_keys keeps must survive the trip
    (adaptive's noise and norm: the 'not exercised' statement is made of them)."""
    from deepdensity.study.core import ledger
    from deepdensity.study.record import ROW_KEYS
    from deepdensity.training.runs import read_metrics

    rows = [
        {
            "epoch": e,
            "loss": 0.02,
            "val_loss": 0.01 / e,
            "seconds": 1.5 * e,
            "global_batch": 32,
            "steps": 114,
            "allreduces": 114,
            "grad_noise": 1e-6 * e,
            "grad_sq": 5e-5,
            "next_global_batch": 32,
        }
        for e in (1, 2, 3)
    ]
    config = {
        "seed": 0,
        "epoch_definition": "per_worker",
        "data_path": "d.h5",
        "target_loss": 0.0,
        "max_epochs": 3,
        "stall_patience": 0,
        "stall_near": 0.0,
        "stall_near_patience": 0,
        "collapse_loss": 0.0,
        "collapse_patience": 0,
    }
    book = ledger.Ledger(tmp_path / ledger.LEDGER_FILE)
    book.append(
        ledger.entry_of(
            "adaptive-n2-s0",
            "adaptive",
            2,
            0,
            "one process",
            "",
            "arrays:x",
            config,
            {"status": "max_epochs", "epochs": 3},
            rows,
            [r["val_loss"] for r in rows],
            {"host": "h"},
            "rev",
            "trained",
        )
    )
    entry, got = ledger.Ledger(tmp_path / ledger.LEDGER_FILE).find(book.entries[0]["key"], ledger.stopping_of(config))
    ledger.materialize(tmp_path / "run", entry, got, config)
    back = read_metrics(tmp_path / "run")
    assert [{k: r[k] for k in ROW_KEYS} for r in back] == [{k: r[k] for k in ROW_KEYS} for r in rows]
    assert [r["next_global_batch"] for r in back] == [32] * 3, "a resume's batch, kept too"


# ------------------------------------------------------------------------------------
# the study's time model and answer
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", policies.paper())
@pytest.mark.parametrize("n", [1, 2, 4, 8, 32])
def test_epoch_seconds_of_a_row_is_the_speedup_model_for_the_papers_modes(mode, n):
    parts = dict(step_fixed_s=0.0135, per_sample_s=0.00124, allreduce_per_doubling_s=0.0057, eval_per_sample_s=0.00094)
    p = policies.plan(mode, n, 32)
    steps = rules.steps_per_epoch(1844, p)
    by_row = speedup.epoch_seconds(steps, p.per_worker_batch, steps, n, 256, **parts)
    assert by_row == pytest.approx(speedup.epoch_seconds_model(p, 1844, 256, **parts), rel=1e-12)
    # by hand: steps x (fixed + per-sample x b + allreduce x log2 n) + evaluation shared by n
    assert by_row == pytest.approx(
        steps * (0.0135 + 0.00124 * p.per_worker_batch + 0.0057 * math.log2(n)) + 0.00094 * 256 / n, rel=1e-12
    )


def test_local_pays_three_gradient_allreduces_every_h_steps():
    args = dict(
        n=8, n_val=256, step_fixed_s=0.01, per_sample_s=0.001, allreduce_per_doubling_s=0.005, eval_per_sample_s=0.0
    )
    every_step = speedup.epoch_seconds(456, 4, 456, **args)
    local = speedup.epoch_seconds(456, 4, rules.local_syncs_per_epoch(456, 4), allreduce_size=3.0, **args)
    assert every_step - local == pytest.approx((456 - 3 * 114) * 0.005 * 3, rel=1e-12)


def _cell(mode, n, seed, t):
    from deepdensity.study.core.cells import Cell

    reached = t is not None
    return Cell(
        mode,
        n,
        seed,
        "reached_target" if reached else "stalled",
        5,
        5 if reached else None,
        1.0,
        "modelled",
        t,
        f"{mode}-{n}-{seed}",
    )


def test_filter_n_is_the_first_failing_n_else_the_slowest():
    from deepdensity.study.core.cells import filter_n

    cells = [
        _cell("weak", 1, 0, 100.0),
        _cell("weak", 2, 0, 60.0),
        _cell("weak", 4, 0, 70.0),
        _cell("weak", 8, 0, 50.0),
    ]
    assert filter_n(cells, "weak") == 4  # slowest median, no failure
    cells += [_cell("weak", 8, 1, None), _cell("weak", 2, 1, 61.0)]
    assert filter_n(cells, "weak") == 8  # a failing seed wins over time
    assert filter_n(cells, "warmup") is None  # never run


def test_the_batch_sweep_runs_every_sequential_seed_at_every_batch(tmp_path):
    """The beyond preset's sweep: each batch and lr rule at every sequential seed (3 or more a batch,
    so that a batch is judged against B on seeds, docs/beyond.md), with passes to target kept;
    b = B is each seed's sequential run itself."""
    from collections import Counter

    from deepdensity.config import Config
    from deepdensity.study.core.preset import load_study
    from deepdensity.study.run.beyond import batch_sweep

    _, study = load_study("beyond")
    seeds, calls = study.sequential_seeds(), []
    assert len(seeds) >= 3 and 32 in study.batch_sweep

    def write(name, batch):
        rows = [
            {"epoch": e + 1, "val_loss": v, "steps": 1844 // batch, "global_batch": batch, "allreduces": 0}
            for e, v in enumerate((1.0, 0.8, 0.4, 0.3))
        ]
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    class Runner:
        root = tmp_path

        def run_all(self, jobs, label=""):
            return [job() for job in jobs]

        def run(self, name, mode, n, settings):
            calls.append((name, int(settings["seed"]), int(settings["batch_size"])))
            # the paper's "missed" (docs/beyond.md, amendment of 2026-11-27): no stall or collapse rule
            assert int(settings["stall_patience"]) == 0 and float(settings["collapse_loss"]) == 0.0
            write(name, int(settings["batch_size"]))
            return {"status": "reached_target", "epochs": 3, "final_val_loss": 0.4}

    for seed in seeds:
        write(f"seq-s{seed}", 32)
    timing = {
        "compute_scale": 1.0,
        "step_fixed_s": 0.004,
        "per_sample_s": 0.0006,
        "eval_per_sample_s": 0.0003,
        "allreduce_per_doubling_s": 0.005,
        "allreduce_latency_s": 0.0,
        "epoch_overhead_s": 0.0,
    }
    rows = batch_sweep(Runner(), study, Config(), 0.003, 0.5, 64, 256, timing)
    assert sorted((r["batch"], r["lr_rule"], r["seed"]) for r in rows) == sorted(
        (b, rule, s) for b in study.batch_sweep for rule in ("eta", "linear") for s in seeds
    )
    assert min(Counter((r["batch"], r["lr_rule"]) for r in rows).values()) >= 3
    assert len(calls) == 2 * (len(study.batch_sweep) - 1) * len(seeds), "b = B is the sequential run, not run again"
    assert {r["passes_to_target"] for r in rows} == {3.0}


def test_the_sweeps_own_batch_grows_a_sequential_run_that_ended_short_of_the_target(tmp_path):
    """b = B is the sequential run, which the cells' stall rule let end once every N was decided.
    The sweep judges it without that rule (docs/beyond.md, amendment of 2026-11-27): a run that
    ended above the target is grown to the cap (target 0, no rule) and judged then. Target 0.5,
    cap 6: one seed reaches at pass 6, one never does and is capped at 6, never at 4."""
    from deepdensity.config import Config
    from deepdensity.study.core.preset import load_study
    from deepdensity.study.run.beyond import batch_sweep

    _, study = load_study("beyond")
    study.batch_sweep = [32]
    first, second, *others = study.sequential_seeds()
    grown = {first: (1.0, 0.8, 0.6, 0.6, 0.55, 0.45), second: (1.0, 0.8, 0.6, 0.6, 0.6, 0.6)}
    asked = []

    def write(name, vals):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"epoch": e + 1, "val_loss": v, "steps": 57, "global_batch": 32, "allreduces": 0}) + "\n"
                for e, v in enumerate(vals)
            )
        )

    class Runner:
        root = tmp_path

        def run_all(self, jobs, label=""):
            return [job() for job in jobs]

        def run(self, name, mode, n, settings, need_weights=False):
            seed = int(settings["seed"])
            asked.append((name, int(settings["max_epochs"]), float(settings["target_loss"])))
            write(name, grown[seed])

    for seed in (first, second):
        write(f"seq-s{seed}", grown[seed][:4])  # ended at pass 4, above the target
    for seed in others:
        write(f"seq-s{seed}", (1.0, 0.4))  # reached at pass 2
    timing = {
        "compute_scale": 1.0,
        "step_fixed_s": 0.004,
        "per_sample_s": 0.0006,
        "eval_per_sample_s": 0.0003,
        "allreduce_per_doubling_s": 0.005,
        "allreduce_latency_s": 0.0,
        "epoch_overhead_s": 0.0,
    }
    rows = batch_sweep(Runner(), study, Config(), 0.003, 0.5, 6, 256, timing)
    assert sorted(asked) == sorted([(f"seq-s{first}", 6, 0.0), (f"seq-s{second}", 6, 0.0)]), "grown to the cap"
    got = {r["seed"]: (r["status"], r["epochs"]) for r in rows if r["lr_rule"] == "eta"}
    assert got[first] == ("reached_target", 6) and got[second] == ("max_epochs", 6)
    assert all(got[s] == ("reached_target", 2) for s in others)


def test_the_data_filter_takes_its_features_from_the_first_sequential_run(tmp_path, monkeypatch):
    """The beyond preset's sequential runs take seeds apart from the edge search's (3..10, where
    its cells take 0..7): the filter must read a run the study trained, seq-s3, not seq-s0."""
    import subprocess

    from deepdensity.study.core.preset import load_study
    from deepdensity.study.run import beyond
    from deepdensity.utils.errors import StudyError

    _, study = load_study("beyond")
    assert study.sequential_seeds()[0] != study.seeds[0], "the case this test is about"
    asked = []

    def filter_tool(cmd, **kwargs):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "stop here")

    monkeypatch.setattr(subprocess, "run", filter_tool)
    runner = type("Runner", (), {"root": tmp_path})()
    with pytest.raises(StudyError, match="the data filter failed"):
        beyond.filter_experiment(runner, study, {}, [], [], 256, {}, None, say=lambda *a: None)
    run = asked[0][asked[0].index("--run") + 1]
    assert run == str(tmp_path / f"seq-s{study.sequential_seeds()[0]}")


def test_a_default_study_cell_in_the_filter_is_timed_by_its_passes():
    """The full-data rows the filter takes from the default study: passes to target x the seconds
    of a pass on this study's clock, as every cell (an epoch of 2 s at N = 4 is 4 passes of 0.5 s:
    37 passes take 18.5 s, where 10 whole epochs would say 20)."""
    import dataclasses

    from deepdensity.study.run.beyond import _earlier_full_row

    reached = dataclasses.replace(_cell("weak", 4, 0, 99.0), epochs=10, epochs_to_target=10, passes_to_target=37)
    row = _earlier_full_row(reached, lambda mode, n: 2.0, 4)
    assert row["time_to_target_s"] == pytest.approx(37 * 0.5) and row["passes_to_target"] == 37
    assert _earlier_full_row(_cell("weak", 4, 1, None), lambda mode, n: 2.0, 4)["time_to_target_s"] is None


def test_the_sweeps_section_names_the_rules_its_runs_ended_under():
    """The record says which stopping rules the sweep ran under (docs/beyond.md, amendment of
    2026-11-27); a record made before it names none, and its runs had the study's stall rule
    (templates/batch_sweep.md)."""
    from deepdensity.utils.templates import fill

    def said(stopping) -> str:
        text = " ".join(
            fill(
                "batch_sweep.md",
                eta=1,
                batch=32,
                target=1,
                stopping=stopping,
                answer="",
                table="",
                comparisons="",
                median="",
            ).split()
        )
        return text[text.index("target 1; ") + len("target 1; ") : text.index(". Every batch is")]

    assert said({"stall_patience": 0, "collapse_loss": 0.0}).startswith("no stall or collapse rule")
    assert said(None) == "stall rule as the study's (the collapse rule is off in the sweep)"
    assert said({"stall_patience": 3, "collapse_loss": 0.0}) == "the stall rule with a patience of 3 passes"
    assert (
        said({"stall_patience": 3, "collapse_loss": 0.02})
        == "the stall rule with a patience of 3 passes and the collapse rule at val_loss 0.02"
    )
    assert said({"collapse_loss": 0.02}) == "no stall rule, the collapse rule at val_loss 0.02"
