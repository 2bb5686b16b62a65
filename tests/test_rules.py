"""The four policies' arithmetic, checked against the paper's section IV and VI wording
and Horovod's LearningRateWarmupCallback formula, written out independently here."""
import math

import numpy as np
import pytest

from deepdensity import rules

ETA = 0.00105


@pytest.mark.parametrize("n", range(1, 65))
def test_plan_every_mode_and_worker_count(n):
    for mode in ("weak", "linear", "warmup"):
        p = rules.plan(mode, n, 32, ETA)
        assert p.per_worker_batch == 32, "weak-style modes give every worker the base batch"
        assert p.global_batch == 32 * n
        expected_lr = ETA * n if mode in ("linear", "warmup") else ETA
        assert p.peak_lr == pytest.approx(expected_lr, rel=1e-12)
    if 32 % n == 0:
        p = rules.plan("strong", n, 32, ETA)
        assert (p.global_batch, p.per_worker_batch, p.peak_lr) == (32, 32 // n, ETA)
    else:
        with pytest.raises(rules.PlanError, match="does not divide"):
            rules.plan("strong", n, 32, ETA)


def test_plan_emulated_processes_take_the_whole_global_batch():
    p = rules.plan("weak", 8, 32, ETA, processes=1)
    assert (p.workers, p.processes, p.global_batch, p.per_process_batch) == (8, 1, 256, 256)
    p = rules.plan("strong", 8, 32, ETA, processes=2)
    assert p.per_process_batch == 16 and p.per_worker_batch == 4


@pytest.mark.parametrize("bad", [
    dict(mode="sideways", workers=2), dict(mode="weak", workers=0), dict(mode="weak", workers=2.0),
    dict(mode="weak", workers=2, base_batch=0), dict(mode="weak", workers=2, base_lr=0.0),
    dict(mode="weak", workers=4, processes=3),
])
def test_plan_rejects_bad_input(bad):
    with pytest.raises(rules.PlanError):
        rules.plan(**bad)


def horovod_warmup_lr(initial_lr, size, warmup_epochs, steps, epoch, batch):
    """Horovod 0.28.1 LearningRateWarmupCallback, transcribed from its documentation:
    multiplier(e) = 1/size * ((e + 1/steps) * (size - 1) / warmup + 1), e = epoch + batch/steps."""
    e = epoch + batch / steps + 1.0 / steps
    return initial_lr * (1.0 / size) * (e * (size - 1) / warmup_epochs + 1)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_warmup_lr_follows_horovod(n):
    p = rules.plan("warmup", n, 32, ETA, warmup_epochs=5)
    steps = 7
    for epoch in range(5):
        for batch in range(steps):
            assert rules.lr_at(p, epoch, batch, steps) == pytest.approx(
                horovod_warmup_lr(n * ETA, n, 5, steps, epoch, batch), rel=1e-12)
    # starts near eta, ends exactly at N * eta on the last warmup batch, stays there
    assert rules.lr_at(p, 0, 0, steps) == pytest.approx(ETA * (1 + (n - 1) / (steps * 5)))
    assert rules.lr_at(p, 4, steps - 1, steps) == pytest.approx(n * ETA)
    for epoch in (5, 6, 100):
        assert rules.lr_at(p, epoch, 3, steps) == pytest.approx(n * ETA)


def test_warmup_is_monotone_and_other_modes_are_constant():
    p = rules.plan("warmup", 8, 32, ETA)
    lrs = [rules.lr_at(p, e, b, 10) for e in range(7) for b in range(10)]
    assert all(a < b for a, b in zip(lrs[:50], lrs[1:50]))
    assert lrs[0] < 2 * ETA and lrs[-1] == pytest.approx(8 * ETA)
    for mode, lr in (("strong", ETA), ("weak", ETA), ("linear", 8 * ETA)):
        q = rules.plan(mode, 8 if mode != "strong" else 4, 32, ETA)
        assert [rules.lr_at(q, e, b, 10) for e in range(7) for b in range(10)] == [pytest.approx(lr)] * 70


@pytest.mark.parametrize("processes", [1, 2, 4, 8, 16, 32])
def test_every_global_batch_is_the_same_whatever_n(processes):
    order = rules.epoch_order(1844, 32, epoch=3, seed=7)
    assert order.shape == (1844 // 32, 32)
    assert len(np.unique(order)) == order.size, "no sample twice in an epoch"
    shards = [rules.shard_of_batch(order, r, processes) for r in range(processes)]
    for step in range(order.shape[0]):
        parts = [set(s[step]) for s in shards]
        assert set().union(*parts) == set(order[step])
        assert sum(len(x) for x in parts) == 32, "shards are disjoint"


def test_epoch_order_depends_on_seed_and_epoch_only():
    a = rules.epoch_order(100, 10, 0, 0)
    assert np.array_equal(a, rules.epoch_order(100, 10, 0, 0))
    assert not np.array_equal(a, rules.epoch_order(100, 10, 1, 0))
    assert not np.array_equal(a, rules.epoch_order(100, 10, 0, 1))


def test_steps_per_epoch_drops_the_remainder_and_rejects_too_little_data():
    assert rules.steps_per_epoch(1844, 32) == 57
    assert rules.steps_per_epoch(1844, 1024) == 1
    with pytest.raises(rules.PlanError, match="fewer than one global batch"):
        rules.steps_per_epoch(1000, 1024)


def test_validation_shard():
    assert [rules.validation_shard(256, r, 4) for r in range(4)] == [(0, 64), (64, 128), (128, 192), (192, 256)]
    assert rules.validation_shard(256, 1, 3) == (0, 256), "uneven shards would bias the mean"


def test_stop_reason():
    nan, inf = float("nan"), float("inf")
    assert rules.stop_reason(0, nan, 0.1, 0.01, 400) == "diverged"
    assert rules.stop_reason(0, 0.1, inf, 0.01, 400) == "diverged"
    assert rules.stop_reason(5, 0.1, 0.01, 0.01, 400) == "reached_target", "target is inclusive"
    assert rules.stop_reason(5, 0.1, 0.02, 0.01, 400) is None
    assert rules.stop_reason(399, 0.1, 0.02, 0.01, 400) == "max_epochs"
    assert rules.stop_reason(399, nan, 0.001, 0.01, 400) == "diverged", "non-finite wins"


def test_efficiency_matches_paper_definition():
    # T1 / (n Tn) * 100: a perfect halving at n=2 is 100 %, no gain at n=2 is 50 %.
    assert rules.efficiency(100.0, 2, 50.0) == pytest.approx(100.0)
    assert rules.efficiency(100.0, 2, 100.0) == pytest.approx(50.0)
    # the paper's Table I, 2 GPUs: 105.17 % means T2 = T1 / (2 * 1.0517)
    assert rules.efficiency(1000.0, 2, 1000.0 / (2 * 1.0517)) == pytest.approx(105.17)
    assert math.isnan(rules.efficiency(100.0, 4, None))
    assert math.isnan(rules.efficiency(None, 4, 10.0))
    assert math.isnan(rules.efficiency(100.0, 4, float("nan")))


def test_first_epoch_reaching():
    assert rules.first_epoch_reaching([0.5, 0.2, 0.05, 0.01], 0.05) == 3
    assert rules.first_epoch_reaching([0.5, float("nan"), 0.2], 0.05) is None
