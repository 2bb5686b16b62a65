"""The plan's line of missing runs (missing_lines): the runs of a preset the ledger does not hold
yet, looked up by run name at the earlier record's eta and target, and what they should take here."""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.study.core import ledger
from deepdensity.study.core.preset import DOUBLE_ETA_RUN, SWEEP_STOPPING, Study
from deepdensity.study.core.request import cells_stopping
from deepdensity.study.plan.study_plan import hours_here, passes_to_expect, runs_like, second_look, sweep_runs

SECOND_LOOK = "second look"  # the groups of the second look's runs begin so (its line drops it)


def missing_lines(study: Study, entries: list, earlier: Optional[dict], parallel: int) -> list:
    """The runs the ledger does not hold yet, and what they should take here: the trained cells'
    seeds, the data filter's and the batch sweep's runs, looked up by run name among the
    ledger's entries of the earlier record's eta (a linear-rule sweep run: eta x b / B) and
    target, replayed under the preset's stopping rules (the sweep's: preset.SWEEP_STOPPING;
    ledger.answer). The second look's runs (docs/decision-rules.md) have a line of their own:
    they are the next look's, not runs the first look lacks. Passes a missing run needs come
    from runs of its kind on record (passes_to_expect; a cell: the cell's, else the mode's
    largest N below, runs_like; the sweep: its batch and lr rule), else the cap; the filter's
    from its mode's runs on record, else not estimated (its N is not known either); seconds a
    pass from the runs on record (their own clocks), of its batch for the sweep."""
    looks = _missing_by_look(study, entries, earlier)
    if looks is None:
        return ["  missing runs: no earlier record of this preset to name eta and the target by"]
    first, second, pass_s = looks
    if not first:
        held = "every run of its first look" if second else "every run it is asked for"
        lines = [f"  missing runs: none, the ledger holds {held}; not counted here: {_uncounted(study)}"]
    else:
        lines = [
            f"  missing runs: {_priced(study, first, pass_s, earlier, parallel)}; not counted here: {_uncounted(study)}"
        ]
    if second:
        lines.append(
            f"  the second look's runs to train: {_priced(study, second, pass_s, earlier, parallel, f'{SECOND_LOOK} ')}"
        )
    return lines


def _priced(study: Study, missing: list, pass_s: dict, earlier: dict, parallel: int, drop: str = "") -> str:
    """'N (what they should take here): group seeds ...; ...' of missing_runs' entries, `drop`
    taken off the front of the groups' names."""
    every = sorted(pass_s.values())
    priced = (
        [
            (passes, statistics.median_low([pass_s[r] for r in like if r in pass_s] or every))
            for _, passes, like, _ in missing
            if passes is not None
        ]
        if every
        else []
    )
    total = sum(passes for _, passes, _, _ in missing if passes is not None)
    unknown = sum(passes is None for _, passes, _, _ in missing)
    at_cap = sum(capped for _, passes, _, capped in missing if passes is not None)
    cost = f"about {total:.0f} passes"
    if priced:
        by_batch = " (the sweep's at its batch where a run of it is on record)" if study.batch_sweep else ""
        cost += (
            f", {hours_here(priced, parallel):.1f} h here at {statistics.median_low(every):.2f} s a pass{by_batch} "
            f"and {parallel} at a time"
        )
    if at_cap:
        cost += f"; {at_cap} of them taken at the cap ({earlier['cap']} epochs), no run of their kind being on record"
    if unknown:
        cost += (
            f"; {unknown} not estimated (their N is picked from the default study, and no run of theirs is on record)"
        )
    by_group = {}
    for (group, seed), _, _, _ in missing:
        by_group.setdefault(group.removeprefix(drop), []).append(seed)
    return f"{len(missing)} ({cost}): " + "; ".join(
        f"{g} seeds {', '.join(str(x) for x in s)}" for g, s in by_group.items()
    )


def missing_runs(study: Study, entries: list, earlier: Optional[dict]) -> Optional[list]:
    """The runs missing_lines counts, the first look's and the second's, as ((group, seed),
    passes, runs like it, taken at the cap), or None without an earlier record of this preset
    (no eta or target to look them up by)."""
    looks = _missing_by_look(study, entries, earlier)
    return None if looks is None else looks[0] + looks[1]


def _missing_by_look(study: Study, entries: list, earlier: Optional[dict]) -> Optional[tuple]:
    """(the first look's missing runs, the second look's, {run name: seconds a pass}), or None
    without an earlier record of this preset."""
    if not earlier or "eta" not in earlier:
        return None
    held, pass_s = _held_runs(study, entries, earlier)
    max_epochs = earlier["cap"]
    first = (
        _missing_cells(study, held, max_epochs) + _missing_filter(study, held) + _missing_sweep(study, held, max_epochs)
    )
    return first, _missing_second_look(study, held, max_epochs, earlier), pass_s


def _held_runs(study: Study, entries: list, earlier: dict) -> tuple:
    """({run name: (entry, its answer's result)} of the entries at the earlier record's eta (the
    sweep's linear rule: at eta x b / B) that answer under the preset's stopping rules (the
    sweep's: SWEEP_STOPPING), {run name: seconds a pass})."""
    stopping = dataclasses.asdict(
        cells_stopping(study.runs, earlier["target"], earlier["cap"], earlier["collapse_loss"])
    )
    base = study.runs.batch_size
    sweep = {name: (b, rule) for name, b, rule, _ in sweep_runs(study)}
    held, pass_s = {}, {}
    for e in entries:
        b, rule = sweep.get(e["run"], (base, "eta"))
        lr = (
            earlier["eta"]
            * (b / base if rule == policies.LINEAR else 1)
            * (2 if e["run"].startswith(DOUBLE_ETA_RUN) else 1)
        )
        if not _same_lr(e["config"].get("base_lr"), lr) or e["isa_cap"]:
            continue
        got = ledger.answer(e, {**stopping, **SWEEP_STOPPING} if e["run"] in sweep else stopping)
        if got is not None:
            held[e["run"]] = (e, got["result"])
        if (seconds := ledger.seconds_a_pass(e)) is not None and not e["run"].startswith(DOUBLE_ETA_RUN):
            pass_s[e["run"]] = seconds
    return held, pass_s


def _same_lr(recorded, lr: float) -> bool:
    """Is a ledger entry's base_lr this lr? (An lr search's entry may hold a name, not a number.)"""
    return isinstance(recorded, (int, float)) and math.isclose(recorded, lr, rel_tol=1e-12)


def _cell_epochs(held: dict) -> dict:
    """{(mode, N): [(epochs, run name)]} of the held runs of the trained cells (runs_like's input)."""
    epochs = {}
    for e, result in held.values():
        if e["run"] == f"{e['mode']}-n{e['n']}-s{e['seed']}":
            epochs.setdefault((e["mode"], e["n"]), []).append((result["epochs"], e["run"]))
    return epochs


def _missing_cells(study: Study, held: dict, max_epochs: int) -> list:
    """((group, seed), passes, runs alike, taken at the cap) of every trained cell's seed the
    ledger does not hold."""
    epochs = _cell_epochs(held)
    return [
        _missing_cell_run(epochs, f"{mode} N = {n}", mode, n, seed, max_epochs)
        for mode, n in study.trained_cells()
        for seed in study.seeds
        if f"{mode}-n{n}-s{seed}" not in held
    ]


def _missing_cell_run(epochs: dict, group: str, mode: str, n: int, seed: int, max_epochs: int) -> tuple:
    """((group, seed), passes, runs alike, taken at the cap) of one cell's seed the ledger does not hold."""
    known = runs_like(epochs, mode, n)
    return (group, seed), passes_to_expect([x for x, _ in known], n, max_epochs), [r for _, r in known], not known


def _missing_second_look(study: Study, held: dict, max_epochs: int, earlier: dict) -> list:
    """((group, seed), passes, runs alike, taken at the cap) of the second look's runs the ledger
    does not hold: the cells inconclusive at their first look in the earlier record (its cells
    and its runs at 2 x eta), at the seeds `second_look` gives them."""
    if not study.second_look_seeds:
        return []
    first, seq_first = study.seeds, study.sequential_seeds()
    by_cell = {}
    for c in earlier.get("cells", []):
        by_cell.setdefault((c["mode"], c["n"]), []).append((c["seed"], c["status"] == "reached_target"))

    def first_look(cell: tuple, seeds: list) -> list:
        return [r for seed, r in sorted(by_cell.get(cell, [])) if seed in seeds]

    epochs = _cell_epochs(held)
    out = [
        _missing_cell_run(epochs, f"{SECOND_LOOK} {mode} N = {n}", mode, n, seed, max_epochs)
        for mode, n in study.trained_cells()
        for seed in second_look([first_look((mode, n), first)], first, study.second_look_seeds)
        if f"{mode}-n{n}-s{seed}" not in held
    ]
    # the sequential runs decide every strong cell (and N = 1): one open strong cell gives them seeds
    strong = [first_look(cell, seq_first) for cell in sorted(by_cell) if cell[0] == policies.STRONG]
    seq_passes = [(result["epochs"], name) for name, (_, result) in held.items() if re.fullmatch(r"seq-s\d+", name)]
    for seed in second_look(strong, seq_first, study.second_look_seeds):
        if f"seq-s{seed}" not in held:
            out.append(
                (
                    (f"{SECOND_LOOK} sequential runs", seed),
                    passes_to_expect([x for x, _ in seq_passes], 1, max_epochs),
                    [r for _, r in seq_passes],
                    not seq_passes,
                )
            )
    return out + _missing_second_look_at_2eta(study, held, max_epochs, earlier)


def _missing_second_look_at_2eta(study: Study, held: dict, max_epochs: int, earlier: dict) -> list:
    """The second look's runs at 2 x eta the ledger does not hold (as _missing_second_look's):
    where the earlier record's runs at 2 x eta were inconclusive at their first look."""
    if not study.doubles_eta():
        return []
    seq_first = study.sequential_seeds()
    reached = [
        r["status"] == "reached_target"
        for r in sorted(earlier.get("seq_2eta", []), key=lambda r: r["seed"])
        if r["seed"] in seq_first
    ]
    known = [(result["epochs"], name) for name, (_, result) in held.items() if name.startswith(DOUBLE_ETA_RUN)]
    out = []
    for seed in second_look([reached], seq_first, study.second_look_seeds):
        if f"{DOUBLE_ETA_RUN}{seed}" not in held:
            out.append(
                (
                    (f"{SECOND_LOOK} 2 x eta", seed),
                    passes_to_expect([x for x, _ in known], 1, max_epochs),
                    [r for _, r in known],
                    not known,
                )
            )
    return out


def missing_by_name(study: Study, entries: list, earlier: dict) -> dict:
    """{run name: (passes, seconds a pass)} of the runs missing_lines counts, as they are priced
    there; under None, the price of any other run: the cap's passes at the median pass."""
    looks = _missing_by_look(study, entries, earlier)
    first, second, pass_s = looks if looks is not None else ([], [], {})
    every = sorted(pass_s.values())
    median = statistics.median_low(every) if every else 0.0
    priced = {
        _run_name(group, seed): (
            passes if passes is not None else earlier["cap"],
            statistics.median_low([pass_s[r] for r in like if r in pass_s] or every or [0.0]),
        )
        for (group, seed), passes, like, _ in [*first, *second]
        if not group.startswith(("filter", "batch sweep"))
    }
    return {**priced, None: (earlier["cap"], median)}


def second_look_names(study: Study, earlier: dict) -> list:
    """The run names of every run the second look asks for, held or not (the names
    _missing_second_look's groups stand for)."""
    return [_run_name(group, seed) for (group, seed), _, _, _ in _missing_second_look(study, {}, 0, earlier)]


def _run_name(group: str, seed: int) -> str:
    """The run a missing run's group and seed name: 'second look weak N = 4', 8 -> weak-n4-s8."""
    group = group.removeprefix(f"{SECOND_LOOK} ")
    if group == "2 x eta":
        return f"{DOUBLE_ETA_RUN}{seed}"
    if group == "sequential runs":
        return f"seq-s{seed}"
    mode, n = re.fullmatch(r"(\w+) N = (\d+)", group).groups()
    return f"{mode}-n{n}-s{seed}"


def _filter_runs(study: Study) -> list:
    """(name pattern, mode, variant, seed) of the data filter's runs on filtered and random data
    (beyond.filter_experiment); their N is picked from the default study's cells, so the
    pattern leaves it open. The full-data runs are the default study's."""
    return [
        (re.compile(rf"{mode}-n(\d+)-{variant}-s{seed}"), mode, variant, seed)
        for mode in study.filter_modes
        for seed in study.seeds
        for variant in ("network", "random")
    ]


def _missing_filter(study: Study, held: dict) -> list:
    """((group, seed), passes or None, runs alike, False) of the data filter's runs not held.
    Their N, picked from the default study, and their passes are read off the filter's runs on
    record of the same mode (its data first); without any, neither is known (None)."""
    runs = _filter_runs(study)
    found = {(mode, variant): [] for _, mode, variant, _ in runs}
    for pattern, mode, variant, _ in runs:
        for name, (e, result) in held.items():
            if pattern.fullmatch(name):
                found[(mode, variant)].append((result["epochs"], e["n"], name))
    out = []
    for pattern, mode, variant, seed in runs:
        if any(pattern.fullmatch(name) for name in held):
            continue
        known = found[(mode, variant)] or [x for (md, _), xs in found.items() if md == mode for x in xs]
        n = known[0][1] if known else None
        passes = passes_to_expect([x for x, _, _ in known], n)
        out.append(
            (
                (f"filter {mode}{f' N = {n}' if n else ''} on {variant} data", seed),
                passes,
                [r for _, _, r in known],
                False,
            )
        )
    return out


def _missing_sweep(study: Study, held: dict, max_epochs: int) -> list:
    """((group, seed), passes, runs alike, taken at the cap) of the batch sweep's runs not held
    (one pass an epoch)."""
    runs = sweep_runs(study)
    out = []
    for name, b, rule, seed in runs:
        if name in held:
            continue
        known = [(held[r][1]["epochs"], r) for r, bb, rr, _ in runs if (bb, rr) == (b, rule) and r in held]
        same_batch = [r for r, bb, _, _ in runs if bb == b and r in held]
        out.append(
            (
                (f"batch sweep b = {b} at {rule}", seed),
                passes_to_expect([x for x, _ in known], 1, max_epochs),
                [r for _, r in known] or same_batch,
                not known,
            )
        )
    return out


def _uncounted(study: Study) -> str:
    """The runs besides the trained cells' preset seeds that the missing line does not look up."""
    others = [
        "the sequential runs" + (" (and at 2 x eta)" if study.doubles_eta() else ""),
        "the target's calibration runs",
    ] + ["the lr search"] * (study.base_lr == "edge")
    others += ["seeds past the preset's"] * (study.max_seeds > len(study.seeds))
    others += ["strong scaling for real"] * bool(study.real_strong)
    others += ["the filter's full-data runs (the default study's)"] * bool(study.filter_modes)
    others += ["the stall and instruction-set checks' runs"]
    return ", ".join(others) + " (each reused where the ledger or the runs folder holds it)"
