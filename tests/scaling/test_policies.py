"""The policies' arithmetic, checked against the paper's section IV and VI wording and
Horovod's LearningRateWarmupCallback formula, written out independently here; and the
registry a new policy joins."""

import math

import pytest

from deepdensity.scaling import policies, rules

ETA = 0.00105


@pytest.mark.parametrize("n", range(1, 65))
def test_plan_every_mode_and_worker_count(n):
    for mode in ("weak", "linear", "warmup"):
        p = policies.plan(mode, n, 32, ETA)
        assert p.per_worker_batch == 32, "weak-style modes give every worker the base batch"
        assert p.global_batch == 32 * n
        expected_lr = ETA * n if mode in ("linear", "warmup") else ETA
        assert p.peak_lr == pytest.approx(expected_lr, rel=1e-12)
    if 32 % n == 0:
        p = policies.plan("strong", n, 32, ETA)
        assert (p.global_batch, p.per_worker_batch, p.peak_lr) == (32, 32 // n, ETA)
    else:
        with pytest.raises(rules.PlanError, match="does not divide"):
            policies.plan("strong", n, 32, ETA)


def test_plan_emulated_processes_take_the_whole_global_batch():
    p = policies.plan("weak", 8, 32, ETA, processes=1)
    assert (p.workers, p.processes, p.global_batch, p.per_process_batch) == (8, 1, 256, 256)
    p = policies.plan("strong", 8, 32, ETA, processes=2)
    assert p.per_process_batch == 16 and p.per_worker_batch == 4


@pytest.mark.parametrize(
    "bad",
    [
        dict(mode="sideways", workers=2),
        dict(mode="weak", workers=0),
        dict(mode="weak", workers=2.0),
        dict(mode="weak", workers=2, base_batch=0),
        dict(mode="weak", workers=2, base_lr=0.0),
        dict(mode="weak", workers=4, processes=3),
    ],
)
def test_plan_rejects_bad_input(bad):
    with pytest.raises(rules.PlanError):
        policies.plan(**bad)


def horovod_warmup_lr(initial_lr, size, warmup_epochs, steps, epoch, batch):
    """Horovod 0.28.1 LearningRateWarmupCallback, transcribed from its documentation:
    multiplier(e) = 1/size * ((e + 1/steps) * (size - 1) / warmup + 1), e = epoch + batch/steps."""
    e = epoch + batch / steps + 1.0 / steps
    return initial_lr * (1.0 / size) * (e * (size - 1) / warmup_epochs + 1)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_warmup_lr_follows_horovod(n):
    p = policies.plan("warmup", n, 32, ETA, warmup_epochs=5)
    steps = 7
    for epoch in range(5):
        for batch in range(steps):
            assert p.lr_at(epoch, batch, steps) == pytest.approx(
                horovod_warmup_lr(n * ETA, n, 5, steps, epoch, batch), rel=1e-12
            )
    # starts near eta, ends exactly at N * eta on the last warmup batch, stays there
    assert p.lr_at(0, 0, steps) == pytest.approx(ETA * (1 + (n - 1) / (steps * 5)))
    assert p.lr_at(4, steps - 1, steps) == pytest.approx(n * ETA)
    for epoch in (5, 6, 100):
        assert p.lr_at(epoch, 3, steps) == pytest.approx(n * ETA)


def test_warmup_is_monotone_and_other_modes_are_constant():
    p = policies.plan("warmup", 8, 32, ETA)
    lrs = [p.lr_at(e, b, 10) for e in range(7) for b in range(10)]
    assert all(a < b for a, b in zip(lrs[:50], lrs[1:50]))
    assert lrs[0] < 2 * ETA and lrs[-1] == pytest.approx(8 * ETA)
    for mode, lr in (("strong", ETA), ("weak", ETA), ("linear", 8 * ETA)):
        q = policies.plan(mode, 8 if mode != "strong" else 4, 32, ETA)
        assert [q.lr_at(e, b, 10) for e in range(7) for b in range(10)] == [pytest.approx(lr)] * 70


@pytest.mark.parametrize("mode", policies.names())
@pytest.mark.parametrize("definition", rules.EPOCH_DEFINITIONS)
@pytest.mark.parametrize("emulate", [1, 2])
def test_elastic_is_for_the_paper_modes_on_global_epochs_with_real_workers(mode, definition, emulate):
    """The paper's four policies can be elastic; adaptive and local cannot (their per-step
    state is not committed); per_worker epochs change length with N; emulation has no
    workers to lose. Each refusal names its reason."""
    problem = policies.elastic_problem(mode, definition, emulate)
    allowed = mode in ("strong", "weak", "linear", "warmup") and definition == "global" and emulate == 1
    assert (problem is None) == allowed
    if mode in ("adaptive", "local"):
        assert mode in problem and "not restored" in problem
    elif definition == "per_worker":
        assert "epoch_definition: global" in problem
    elif emulate > 1:
        assert "--emulate-workers" in problem


# ------------------------------------------------------------------------------------
# the registry
# ------------------------------------------------------------------------------------
def test_the_registry_holds_the_papers_four_first_and_two_beyond():
    assert policies.names() == ("strong", "weak", "linear", "warmup", "adaptive", "local")
    assert policies.paper() == ("strong", "weak", "linear", "warmup")
    assert policies.beyond() == ("adaptive", "local")
    assert policies.large_batch() == ("weak", "linear", "warmup")  # Gahlot et al.'s filter is for these
    assert all(policies.get(m).name == m for m in policies.names())
    with pytest.raises(rules.PlanError, match="unknown mode 'sideways'; choose one of strong, weak"):
        policies.get("sideways")


def test_a_study_goes_beyond_the_paper_when_any_of_its_modes_does():
    import itertools

    for k in range(1, 7):
        for modes in itertools.combinations(("strong", "weak", "linear", "warmup", "adaptive", "local"), k):
            assert policies.goes_beyond_the_paper(modes) == ("adaptive" in modes or "local" in modes), modes


def test_what_each_policy_says_of_itself():
    """The facts the trainer and the study ask of a policy instead of comparing its name."""
    get = policies.get
    assert [m for m in policies.names() if get(m).follows_sequential_path] == ["strong"]
    assert [m for m in policies.names() if not get(m).averages_in_optimizer] == ["adaptive", "local"]
    assert [m for m in policies.names() if not get(m).broadcast_after_first_step] == ["local"]
    assert [m for m in policies.names() if get(m).grows_batch] == ["adaptive"]
    assert [get(m).schedule for m in policies.paper()] == ["constant", "constant", "constant", "warmup"]
    assert get("local").allreduce_size == 3.0, "weights and Adam's two moments"
    assert len({get(m).style for m in policies.names()}) == 6, "every policy its own colour and marker"


class SquareRootLR(policies.Weak):
    """A toy fifth policy, as docs/policies.md adds it: weak's batches, lr sqrt(N) eta."""

    name, summary = "sqrt", "as weak, lr sqrt(N) * eta"

    def peak_lr(self, base_lr, workers):
        return base_lr * math.sqrt(workers)


@pytest.mark.parametrize("n", [1, 2, 4, 9, 16])
def test_a_new_policy_is_one_class_and_joins_every_listing(n):
    with policies.registered(SquareRootLR()):
        assert policies.names()[-1] == "sqrt" and "sqrt" in policies.paper()
        p = policies.plan("sqrt", n, 32, ETA)
        assert (p.global_batch, p.per_worker_batch) == (32 * n, 32)
        assert p.peak_lr == pytest.approx(ETA * n**0.5, rel=1e-12)
        assert [p.lr_at(e, b, 7) for e in range(3) for b in range(7)] == [pytest.approx(ETA * n**0.5)] * 21
        with pytest.raises(ValueError, match="not yet registered"):
            policies.register(SquareRootLR)
    assert "sqrt" not in policies.names()
    with pytest.raises(rules.PlanError):
        policies.plan("sqrt", n)


def test_the_paper_draws_the_loss_against_time_of_strong_and_weak_scaling_only():
    # Cunha et al. (HPML 2018), Figs. 4 and 5; the reports draw ours under the same names
    drawn = {name: policies.get(name).paper_figure for name in policies.names() if policies.get(name).paper_figure}
    assert drawn == {"strong": "fig4.png", "weak": "fig5.png"}
