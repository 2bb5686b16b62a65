"""What a study will do before it does it: the plan `repro` prints first (and alone, with
--dry-run; its line of the runs the ledger does not hold yet: missing.py), and the seeding rule
behind it. Pure: it reads the preset and, when there is one, an earlier record of the same preset
for its wall time; it trains nothing and imports no TensorFlow.

Which cell gets the next seed, in a preset with a time budget (`next_in_line`): one more seed at a
time to every cell below max_seeds, whatever its outcome so far, fewest seeds and then cheapest
first; a rule that never spends seeds to settle one answer (docs/decision-rules.md, "Seeds").
Which cells get a second look (`second_look`): every cell inconclusive at its first look, the
next seeds up to the preset's second_look_seeds, all of them (docs/decision-rules.md, "Second
look", fixed before its runs).
What a seed still to run should take, in passes (`runs_like`, `passes_to_expect`): the one
estimate behind the plan's missing runs and the report's cells below the design's seeds."""

from __future__ import annotations

import statistics
from typing import Iterable, Optional, Sequence

from deepdensity.scaling import policies
from deepdensity.study.core.cells import Call, cell_rate
from deepdensity.study.core.preset import Study
from deepdensity.utils.templates import fill

# The clock's probes and real epochs (timing.py), alone on the host: its three rounds took about
# 10.5 min on a 2-core AMD EPYC (the clock's job under MPI, the default study's settings, one
# round disturbed).
CLOCK_MINUTES = (8, 12)


def _ns(ns) -> str:
    return ", ".join(str(n) for n in ns)


def _cells(cells: list) -> str:
    by_mode = {}
    for mode, n in cells:
        by_mode.setdefault(mode, []).append(n)
    return "; ".join(f"{mode} N = {_ns(ns)}" for mode, ns in by_mode.items())


def run_counts(study: Study, real_runner: bool = False) -> tuple:
    """(fewest, most) training runs the study starts, the lr search left out (its length
    depends on where the edge is): calibration, sequential, every trained cell at the first
    seeds, then up to max_seeds a cell, the real strong-scaling runs and the beyond parts."""
    units = len(study.trained_cells(real_runner)) + study.doubles_eta() + 1  # + the sequential runs
    first = len(study.seeds)
    most_seeds = max(first, study.max_seeds) if study.budget_minutes else first
    fixed = (
        len(study.calibration_seeds)
        + (0 if real_runner else len(study.real_strong) + units * bool(study.isa_check))
        + len(study.filter_modes) * first * 3
        + len(sweep_runs(study))
    )
    return units * first + fixed, units * most_seeds + fixed


def sweep_runs(study: Study) -> list:
    """(run name, batch, lr rule, seed) of the batch sweep's runs (beyond.batch_sweep): every
    sequential seed at every batch but the base one, whose run is the sequential run itself."""
    base = study.runs.batch_size
    return [
        (f"batch-b{b}-{rule}-s{seed}", b, rule, seed)
        for seed in study.sequential_seeds()
        for b in study.batch_sweep
        if b != base
        for rule in ("eta", policies.LINEAR)
    ]


def plan_lines(
    name: str,
    study: Study,
    real_runner: str,
    runs: str,
    out: str,
    earlier: Optional[dict] = None,
    executor: str = "local",
) -> list:
    """The plan of one invocation, one line per stage, and what it should take (templates/plan.txt).
    `executor`: where the runs train, "local" or "slurm" (Slurm's own lines: study/run/slurm_runner.py
    plan_lines). `earlier`: the last record of this preset, for its wall time, where it has one."""
    cells = study.trained_cells(bool(real_runner))
    fewest, most = run_counts(study, bool(real_runner))
    text = fill(
        "plan.txt",
        name=name,
        study=study,
        real_runner=real_runner,
        runs=runs,
        out=out,
        executor=executor,
        clock_minutes=CLOCK_MINUTES,
        cells=cells,
        cells_named=_cells(cells),
        seeds=_ns(study.seeds),
        seq_seeds=_ns(study.sequential_seeds()),
        fewest=fewest,
        most=most,
        last=_last_study(earlier),
    )
    return text.splitlines()


def _last_study(earlier: Optional[dict]) -> Optional[dict]:
    """What the plan's time line says of the last study of this preset, from its record; None
    where there is none, or it is not whole."""
    try:
        p, env = earlier["provenance"], earlier["environment"]
        return {
            **{k: p[k] for k in ("wall_minutes", "trained", "reused", "parallel_runs", "runs_minutes", "generated")},
            "cpu": env["cpu"],
            "cores": env["cores"],
        }
    except (KeyError, TypeError):
        return None


# below this many seeds a cell is reported as short of seeds, whatever its outcomes
MIN_SEEDS = 3


def unsettled(reached: Sequence[bool], max_seeds: int) -> Optional[str]:
    """Why a cell gets one more seed, or None: every cell below max_seeds does, whatever its
    outcome so far."""
    if len(reached) >= max_seeds:
        return None
    if len(reached) < MIN_SEEDS:
        return f"only {len(reached)} seed(s)"
    return f"{len(reached)} seeds: another narrows its missed rate's interval"


def inconclusive(reached: Sequence[bool]) -> bool:
    """Was a cell's look at these runs (their reached flags) inconclusive, by the first look's rule?"""
    return bool(reached) and cell_rate(len(reached) - sum(reached), len(reached)).call == Call.INCONCLUSIVE


def second_look(first_reached: Sequence[Sequence[bool]], first_seeds: Sequence[int], total: int) -> list:
    """The seeds a unit gets at its second look: where the first look of any cell it decides
    (each cell's reached flags at `first_seeds`, in seed order) was inconclusive, the next
    total - len(first_seeds) integers after its first seeds, every one of them; none where each
    of its cells was called, where the preset has no second look (total 0), or where a cell's
    first look is not whole (a study in progress calls nothing)."""
    design = len(first_seeds)
    if not total or total <= design or not first_reached:
        return []
    if any(len(reached) != design for reached in first_reached):
        return []
    if not any(map(inconclusive, first_reached)):
        return []
    start = max(first_seeds) + 1
    return list(range(start, start + total - design))


def next_in_line(candidates: Iterable[tuple]) -> list:
    """The order in which unsettled cells get their next seed: [(key, seeds so far, cost)]
    sorted fewest seeds first, then cheapest, then by key (for a repeatable order)."""
    return sorted(candidates, key=lambda c: (c[1], c[2], str(c[0])))


def runs_like(by_cell: dict, mode: str, n: int) -> list:
    """The runs on record a missing seed of (mode, N = n) is expected to take as long as, from
    `by_cell` = {(mode, N): [run]}: the cell's own, else those of the mode's largest N below (a
    cell not reached yet at this N is priced by the nearest one that was); [] without either."""
    below = sorted((k for m, k in by_cell if m == mode and k <= n), reverse=True)
    return by_cell[(mode, below[0])] if below else []


def passes_to_expect(epochs: list, passes_an_epoch: Optional[int], max_epochs: Optional[int] = None) -> Optional[int]:
    """The passes a run still to do is expected to take: the median of the epochs its like runs
    took (`epochs`), `passes_an_epoch` passes each; without such runs the cap's epochs, or None
    where there is no cap either (not estimated). The median, and its lower value for an even
    count, so that one run stopped at the cap does not set the estimate and it is a run's own
    count of epochs."""
    if not epochs:
        return None if max_epochs is None else max_epochs * passes_an_epoch
    return statistics.median_low(epochs) * passes_an_epoch


def hours_here(priced: list, parallel: int) -> float:
    """The hours the runs still to do take here, `priced` = [(passes, seconds a pass)] of each
    (passes_to_expect at the seconds its like runs took), `parallel` at a time: the one cost
    estimate behind the plan's missing runs and the report's cells below the design's seeds."""
    return sum(passes * seconds for passes, seconds in priced) / 3600 / max(1, parallel)
