"""study/run/design.py on stand-in units: the sequential design (which cells get more seeds, in
what order, and when it stops: max_seeds, settled cells, the time budget), and the stall check
(the runs the stall rule stopped, continued to the cap with the rule off)."""

import time

import pytest

from deepdensity.study.run.design import FIRST, run_first_seeds, run_more_seeds, stall_check
from deepdensity.study.run.outcomes import Book
from deepdensity.study.run.runner import StudyRunner


def _units(book, runner, outcome, cost):
    """Units whose seed s 'reaches the target' per outcome(unit, s); each run costs cost[unit] s."""

    def job(unit, seed):
        name = f"{unit[0]}-n{unit[1]}-s{seed}"
        book.results[(unit[0], unit[1], seed)] = (
            {"status": "reached_target" if outcome(unit, seed) else "stalled", "epochs": 3},
            name,
        )
        runner.wall[name] = cost[unit]
        return [name]

    return {u: (lambda s, u=u: job(u, s)) for u in cost}


def test_every_cell_gets_seeds_up_to_the_cap_mixed_ones_too(tmp_path):
    """A failure rate's interval narrows with every run, so a mixed cell (the one where failure
    is a basin a run falls into by chance) gets seeds as a unanimous one does."""
    runner = StudyRunner(tmp_path, tmp_path / "t.yaml", None, parallel=2, say=lambda *a: None)
    book = Book()
    cost = {("weak", 2): 1.0, ("weak", 8): 5.0, ("linear", 2): 2.0}
    mixed = {("linear", 2)}  # seed 1 of linear N = 2 fails, the rest reach
    units = _units(book, runner, lambda u, s: not (u in mixed and s == 1), cost)
    run_first_seeds(runner, book, units, [0, 1, 2])
    assert all(book.seeds[u] == [0, 1, 2] for u in units) and book.why[(("weak", 2), 0)] == FIRST
    stopped = run_more_seeds(runner, book, units, max_seeds=5, deadline=time.perf_counter() + 60, say=lambda *a: None)
    assert all(book.seeds[u] == [0, 1, 2, 3, 4] for u in units)
    assert "narrows its missed rate's interval" in book.why[(("linear", 2), 3)]
    assert stopped == "every cell settled or at max_seeds"


def test_more_seeds_go_to_every_cell_alike_and_the_budget_is_kept(tmp_path):
    runner = StudyRunner(tmp_path, tmp_path / "t.yaml", None, parallel=1, say=lambda *a: None)
    book = Book()
    cost = {("weak", 2): 1.0, ("warmup", 2): 1000.0}
    units = _units(book, runner, lambda u, s: not (u == ("weak", 2) and s == 0), cost)
    run_first_seeds(runner, book, units, [0, 1, 2])
    stopped = run_more_seeds(runner, book, units, max_seeds=4, deadline=time.perf_counter() + 60, say=lambda *a: None)
    assert book.seeds[("weak", 2)] == [0, 1, 2, 3]
    assert "narrows its missed rate's interval" in book.why[(("weak", 2), 3)], "not to settle one answer"
    assert book.seeds[("warmup", 2)] == [0, 1, 2], "a 1000 s seed does not fit a 60 s budget"
    assert stopped == "the time budget"


@pytest.mark.parametrize("base_lr, want", [("edge", [3, 4, 5]), ("default_study", [3, 4, 5]), (0.001, [0, 1, 2])])
def test_the_sequential_runs_keep_apart_from_the_seeds_that_chose_eta(base_lr, want):
    """Seeds on which an edge search chose eta converge at eta by construction: a study whose eta
    came from one (its own, or the default study's) runs its sequential cell on other seeds; a
    study with a given eta keeps its seeds. Calibration seeds are never used by a cell."""
    from deepdensity.study.core.preset import Study

    study = Study(seeds=[0, 1, 2], edge_seeds=[0, 1, 2], base_lr=base_lr, calibration_seeds=[100, 101, 102])
    assert study.sequential_seeds() == want
    assert Study(seeds=[99, 100, 101], edge_seeds=[0], base_lr=0.001, calibration_seeds=[100]).sequential_seeds() == [
        0,
        1,
        2,
    ]


def test_the_stall_check_continues_stopped_runs_and_a_run_that_reaches_counts_as_reached(tmp_path):
    """Every stalled run at N >= 16, of the others the preset's count; strong scaling (read off the
    sequential runs) is not continued; a continued run that reaches the target replaces the stopped one."""
    import json
    from types import SimpleNamespace

    class Runner:
        def __init__(self):
            self.asked = []

        def run(self, name, mode, n, settings, continue_from=None):
            self.asked.append((name, mode, n, settings["stall_patience"], settings["base_lr"], continue_from))
            status = "reached_target" if name.startswith("warmup-n32") else "max_epochs"
            (tmp_path / name).mkdir()
            (tmp_path / name / "result.json").write_text(json.dumps({"status": status, "epochs": 40}))
            return {"status": status, "epochs": 40, "final_val_loss": 1.0}

        def run_all(self, jobs, label=""):
            return [job() for job in jobs]

    book = Book()
    stalled = {"status": "stalled", "epochs": 9}
    book.results = {
        ("warmup", 32, 0): (stalled, "warmup-n32-s0"),
        ("linear", 16, 1): (stalled, "linear-n16-s1"),
        ("weak", 4, 0): (stalled, "weak-n4-s0"),
        ("weak", 2, 0): (stalled, "weak-n2-s0"),
        ("2eta", 1, 3): (stalled, "seq-2eta-s3"),
        ("strong", 8, 3): (stalled, "seq-s3"),
        ("weak", 8, 0): ({"status": "reached_target", "epochs": 9}, "weak-n8-s0"),
        # a second look's runs (seeds past the first look's 0-7; 2 x eta's past 3-10): not continued
        ("weak", 4, 9): (stalled, "weak-n4-s9"),
        ("linear", 16, 20): (stalled, "linear-n16-s20"),
        ("2eta", 1, 12): (stalled, "seq-2eta-s12"),
    }
    from deepdensity.study.core.preset import Study

    study = Study(seeds=list(range(8)), stall_check=3)  # first looks: seeds 0-7; sequential 3-10
    s = SimpleNamespace(study=study, runner=Runner(), root=tmp_path)
    proto = SimpleNamespace(eta=0.002, common=lambda: {"base_lr": 0.002, "target_loss": 1.0, "max_epochs": 64})
    rows = stall_check(s, proto, book)
    asked = {a[0]: a for a in s.runner.asked}
    assert [a[2] for a in s.runner.asked] == sorted(a[2] for a in s.runner.asked), (
        "the cheapest continuations (smallest N) first"
    )
    assert set(asked) == {
        "warmup-n32-s0-to-cap",
        "linear-n16-s1-to-cap",
        "weak-n4-s0-to-cap",
        "weak-n2-s0-to-cap",
        "seq-2eta-s3-to-cap",
    }, "every one at N >= 16, then 3 of the others spread over their cells; never strong nor a second look's"
    assert all(a[3] == 0 for a in asked.values()), "the stall rule off"
    assert all(a[5] + "-to-cap" == name for name, a in asked.items()), "each from the run the rule stopped"
    assert asked["seq-2eta-s3-to-cap"][1:3] == ("strong", 1) and asked["seq-2eta-s3-to-cap"][4] == 0.004
    assert [r["status"] for r in rows if r["run"] == "warmup-n32-s0-to-cap"] == ["reached_target"]
    assert book.results[("warmup", 32, 0)][1] == "warmup-n32-s0-to-cap"
    assert book.results[("linear", 16, 1)][1] == "linear-n16-s1", "a continued run that missed leaves the stopped one"


class _LookRunner:
    """What run_second_look asks of a runner: the ledger's entries, this machine's oneDNN (its
    own, and under a cap: `capped`), may_train, isa_pin and run_all; the jobs record what they
    were asked, whether they could train and the pin they ran under."""

    def __init__(self, isa: str, first_isa: str, capped: dict = None):
        self.isa, self.capped, self.may_train, self.isa_pin, self.asked = isa, capped or {}, True, "", []
        self.ledger = type(
            "L",
            (),
            {
                "entries": [
                    {"run": f"weak-n4-s{s}", "isa_cap": "", "machine": {"onednn_isa": first_isa}} for s in range(8)
                ]
            },
        )()

    def onednn_isa(self, cap=""):
        return self.capped.get(cap, self.isa) if cap else self.isa

    def run_all(self, jobs, label=""):
        return [job() for job in jobs]


def _looked_book(misses_by_unit: dict):
    from deepdensity.study.run.outcomes import Book

    book = Book()
    for (mode, n), misses in misses_by_unit.items():
        for seed in range(8):
            book.results[(mode, n, seed)] = (
                {"status": "max_epochs" if seed < misses else "reached_target"},
                f"{mode}-n{n}-s{seed}",
            )
            book.add((mode, n), seed, [f"{mode}-n{n}-s{seed}"], "first seeds of the preset")
    return book


BF16 = "Intel AVX-512 with Intel DL Boost and bfloat16 support"  # the first look's (reports/ledger.jsonl)
AMX = (
    "Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX with bfloat16 and 8-bit "
    "integer support"
)


@pytest.mark.parametrize(
    "here, capped, trains, pin",
    [
        (BF16, {}, True, ""),
        # an Intel Xeon with AMX: oneDNN held to the first look's set by its cap
        (AMX, {"AVX512_CORE_BF16": BF16}, True, "AVX512_CORE_BF16"),
        # AVX2: the cap cannot raise oneDNN to a set the CPU lacks
        ("Intel AVX2", {"AVX512_CORE_BF16": "Intel AVX2"}, False, ""),
        # a set the cap does not reach exactly is no pin
        (AMX, {"AVX512_CORE_BF16": AMX}, False, ""),
    ],
)
def test_the_second_look_trains_every_seed_of_the_open_cells_on_the_first_looks_instruction_set(
    here, capped, trains, pin
):
    from deepdensity.study.core.preset import Study
    from deepdensity.study.run.runner import NotHeld
    from deepdensity.study.run.second_look import run_second_look

    runner = _LookRunner(here, BF16, capped)
    book = _looked_book({("weak", 4): 1, ("weak", 8): 0, ("linear", 8): 8})

    def unit(mode, n):
        def job(seed):
            runner.asked.append((mode, n, seed, runner.isa_pin))
            if not runner.may_train:
                raise NotHeld("not held")
            return [f"{mode}-n{n}-s{seed}"]

        return job

    units = {u: unit(*u) for u in [("weak", 4), ("weak", 8), ("linear", 8)]}
    study = Study(seeds=list(range(8)), second_look_seeds=24)
    said = []
    got = run_second_look(runner, book, units, study, say=said.append)
    assert runner.asked == [("weak", 4, s, pin) for s in range(8, 24)], "the open cell, all 16 seeds, no other"
    assert runner.may_train and runner.isa_pin == "", "as it was"
    if trains:
        assert got.startswith("16 of its 16 runs") and book.seeds[("weak", 4)] == list(range(24))
        assert book.why[(("weak", 4), 8)] == "second look: weak N = 4 inconclusive at its first look (1 of 8 missed)"
        if pin:
            assert f"ONEDNN_MAX_CPU_ISA={pin}" in got and len(said) == 1 and f"ONEDNN_MAX_CPU_ISA={pin}" in said[0]
        else:
            assert got == "16 of its 16 runs" and not said
    else:
        assert got.startswith("0 of its 16 runs") and book.seeds[("weak", 4)] == list(range(8))
        assert said and "not trained here" in said[0] and here in said[0]
    assert run_second_look(runner, book, units, Study(seeds=list(range(8)))) == "no second look in the preset"
