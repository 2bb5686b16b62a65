"""The second look in REPORT.md (docs/decision-rules.md, "Second look"): each claim's verdict at its
first look beside the verdict after both, the stacks of the two looks tested against each other
cell by cell and pooled, and what an open cell would need to leave the 0.5 band."""

from __future__ import annotations

from typing import Optional

from deepdensity.scaling import policies
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import ledger, stats
from deepdensity.study.core.cells import Call, cell_rate
from deepdensity.study.core.preset import DOUBLE_ETA, Study
from deepdensity.study.judge.claims import cells_of, claims_of
from deepdensity.study.report.render import md_table

HOLM_ALPHA = 0.05  # the rules' level for the stacks' test over the cells (Holm)


def first_seeds(study: Study, mode: str, n: int) -> set:
    """A cell's first look's seeds (Study.first_look_seeds)."""
    return set(study.first_look_seeds(mode, n))


def has_second_look(record: dict, study: Study) -> bool:
    """Does the record hold a run of a second look (a preset with second_look_seeds, a run past its
    cell's first look)? More seeds by max_seeds (the sequential design) are no second look."""
    if not study.second_look_seeds:
        return False
    past = [c["seed"] not in first_seeds(study, c["mode"], c["n"]) for c in record["cells"]]
    past += [r["seed"] not in first_seeds(study, DOUBLE_ETA, 1) for r in record.get("seq_2eta") or []]
    return any(past)


def first_look_verdicts(record: dict, study: Study) -> dict:
    """{claim key: its verdict} judged on the first look's runs alone, as the first look was."""
    first = {
        **record,
        "cells": [c for c in record["cells"] if c["seed"] in first_seeds(study, c["mode"], c["n"])],
        "seq_2eta": [r for r in record.get("seq_2eta") or [] if r["seed"] in first_seeds(study, DOUBLE_ETA, 1)],
    }
    return {c["key"]: c["verdict"] for c in claims_of(first, cells_of(first), first["seq_2eta"])}


def _entries_by_run(record: dict, entries: list) -> dict:
    """{run name: its latest ledger entry at this study's eta (or twice it) finished by the time
    the record was made}: where each run of a cell was trained."""
    found = {}
    for e in entries:
        if e["config"].get("base_lr") in (record["eta"], 2 * record["eta"]) and (
            e["finished"] <= record["provenance"]["generated"]
        ):
            if e["run"] not in found or e["finished"] > found[e["run"]]["finished"]:
                found[e["run"]] = e
    return found


def _looked_cells(record: dict, study: Study) -> list:
    """[(cell name, first look's runs, second look's runs)] of the cells a second look added runs
    to, each run as (run name, missed)."""
    units = {}
    for c in record["cells"]:
        units.setdefault((c["mode"], c["n"]), []).append(c)
    units[(DOUBLE_ETA, 1)] = [{**r, "mode": DOUBLE_ETA, "run": f"seq-2eta-s{r['seed']}"} for r in record["seq_2eta"]]
    out = []
    for (mode, n), runs in units.items():
        seeds = first_seeds(study, mode, n)
        first = [(r["run"], r["status"] != RunStatus.REACHED) for r in runs if r["seed"] in seeds]
        second = [(r["run"], r["status"] != RunStatus.REACHED) for r in runs if r["seed"] not in seeds]
        if second:
            out.append(("2 x eta" if mode == DOUBLE_ETA else f"{mode} N = {n}", first, second))
    return out


def stacks_section(record: dict, study: Study, entries: list) -> Optional[str]:
    """The two looks' stacks tested against each other (Fisher's exact test, two-sided, missed
    against reached): per cell with Holm over the cells, and pooled over them; where a cell's
    test rejects, each stack's own rate and interval. None without a second look."""
    looked = _looked_cells(record, study) if has_second_look(record, study) else []
    if not looked:
        return None
    found = _entries_by_run(record, entries)

    def stacks(runs: list) -> str:
        named = {"TF {}, {}".format(*ledger.stack_of(found[r])[:2]) for r, _ in runs if r in found}
        return ", ".join(sorted(named)) or "not in the ledger"

    tests = [stats.fisher_two_sided(sum(m for _, m in a), len(a), sum(m for _, m in b), len(b)) for _, a, b in looked]
    holm = stats.holm(tests, HOLM_ALPHA)
    rows, differ = [], []
    for (cell, a, b), h in zip(looked, holm):
        rows.append(
            [
                cell,
                f"{sum(m for _, m in a)} of {len(a)} ({stacks(a)})",
                f"{sum(m for _, m in b)} of {len(b)} ({stacks(b)})",
                f"{h['p']:.2g}",
                f"{h['p_adjusted']:.2g}" + (" **differ**" if h["reject"] else ""),
            ]
        )
        if h["reject"]:
            differ.append(
                f"{cell}: {cell_rate(sum(m for _, m in a), len(a))} on the first look's stack, "
                f"{cell_rate(sum(m for _, m in b), len(b))} on the second's"
            )
    pooled = [sum(sum(m for _, m in x[i]) for x in looked) for i in (1, 2)]
    sizes = [sum(len(x[i]) for x in looked) for i in (1, 2)]
    p = stats.fisher_two_sided(pooled[0], sizes[0], pooled[1], sizes[1])
    text = (
        "The two looks' stacks, tested against each other: in each cell that had a second look, the "
        "first look's runs against the second look's, missed against reached (Fisher's exact test, "
        f"two-sided; Holm over the {len(looked)} cells at {HOLM_ALPHA:g}), and pooled over them.\n\n"
        + md_table(["cell", "first look: missed", "second look: missed", "p", "Holm-adjusted p"], rows)
        + f"\nPooled over the {len(looked)} cells: {pooled[0]} of {sizes[0]} missed at the first look, "
        f"{pooled[1]} of {sizes[1]} at the second, p = {p:.2g}"
        + (" (the stacks differ)" if p <= HOLM_ALPHA else "")
        + ". "
    )
    if differ:
        text += (
            "Where a cell's test rejects, the call stands on all its runs, and each stack's own rate is: "
            + "; ".join(differ)
            + "."
        )
    else:
        text += "No cell's test rejects: the call on all its runs stands for both stacks."
    return text + "\n"


# the cells each claim judges, by mode (the time claim, strong_fastest, judges times, not cells)
CLAIM_MODES = {
    "strong_converges": policies.STRONG,
    "linear_fails": policies.LINEAR,
    "warmup_to_four": policies.WARMUP,
    "weak_efficiency": policies.WEAK,
    "double_eta_diverges": DOUBLE_ETA,
}


def still_open(record: dict, study: Study) -> dict:
    """{claim key: [a sentence a cell]} of the cells with a second look whose call after both
    is still inconclusive: the rate with its interval at the second look's level, and the runs
    that rate would need to leave the 0.5 band (none where the rate is 0.5 itself)."""
    level, out = study.second_look_confidence, {}
    if not has_second_look(record, study):
        return out
    by_mode = {mode: key for key, mode in CLAIM_MODES.items()}
    for cell, a, b in _looked_cells(record, study):
        missed, runs = sum(m for _, m in a + b), len(a) + len(b)
        rate = cell_rate(missed, runs, level)
        if rate.call != Call.INCONCLUSIVE:
            continue
        need = stats.runs_to_leave_band(missed, runs, level)
        mode = DOUBLE_ETA if cell == "2 x eta" else cell.split()[0]
        if mode not in by_mode:  # a mode no claim of the paper's judges
            continue
        out.setdefault(by_mode[mode], []).append(
            f"{cell.removeprefix(mode + ' ')}: {rate}; "
            + (
                f"at that rate {need} runs in all would leave the 0.5 band"
                if need is not None
                else "at that rate no number of runs would leave the 0.5 band"
                if 2 * missed == runs
                else "at that rate more than 100,000 runs would be needed to leave the 0.5 band"
            )
        )
    return out
