"""The second look (docs/decision-rules.md, "Second look", fixed before its runs): the seeds the
cells inconclusive at their first look get, trained after the first seeds."""

from __future__ import annotations

import functools
import os

from deepdensity.study.core.preset import Study
from deepdensity.study.plan import study_plan
from deepdensity.study.run.design import held_or_none
from deepdensity.study.run.outcomes import Book
from deepdensity.study.run.runner import StudyRunner
from deepdensity.utils.machine import ONEDNN_CAPS


def run_second_look(runner: StudyRunner, book: Book, units: dict, study: Study, say=print) -> str:
    """The second look (docs/decision-rules.md, "Second look", fixed before its runs): every unit
    one of whose cells was inconclusive at its first look gets the next seeds up to the preset's
    second_look_seeds, all of them, `runner.parallel` at a time (study_plan.second_look). They
    train only where oneDNN's instruction set is, or can be held by ONEDNN_MAX_CPU_ISA to, the
    one the first look's runs were trained on (the ledger's entries of them), so that the stack
    is what differs between the looks; elsewhere only what the ledger or the runs folder holds
    is taken. Returns what it did."""
    if not study.second_look_seeds:
        return "no second look in the preset"
    design = len(study.seeds)
    jobs = []
    for u in units:
        first = book.seeds.get(u, [])[:design]
        seeds = study_plan.second_look(
            [book.reached(*cell)[:design] for cell in book.cells_of(u)], first, study.second_look_seeds
        )
        jobs += [(u, s) for s in seeds if s not in book.seeds.get(u, [])]
    if not jobs:
        return "no cell inconclusive at its first look"
    first_isa = {
        e["machine"].get("onednn_isa")
        for e in runner.ledger.entries
        if e["run"] in {r for u, _ in jobs for r in book.runs.get(u, [])} and not e["isa_cap"]
    }
    here = runner.onednn_isa()
    pin = _pin(runner, first_isa, here)
    held_only = bool(first_isa) and here not in first_isa and not pin
    if runner.may_train and (held_only or pin):
        say(_where(first_isa, here, pin))
    why = {
        u: "second look: "
        + "; ".join(
            f"{m} N = {n} inconclusive at its first look "
            f"({design - sum(book.reached(m, n)[:design])} of {design} missed)"
            for m, n in book.cells_of(u)
            if study_plan.inconclusive(book.reached(m, n)[:design])
        )
        for u, _ in jobs
    }
    may_train = runner.may_train
    runner.may_train, runner.isa_pin = may_train and not held_only, pin
    try:
        names = runner.run_all([functools.partial(held_or_none, units[u], s) for u, s in jobs], label="second look")
    finally:
        runner.may_train, runner.isa_pin = may_train, ""
    done = 0
    for (u, s), run_names in zip(jobs, names):
        if run_names is not None:
            book.add(u, s, run_names, why[u])
            done += 1
    return f"{done} of its {len(jobs)} runs" + (
        " (only those held: not this machine's instruction set)"
        if held_only
        else f" (oneDNN held to the first look's set: ONEDNN_MAX_CPU_ISA={pin})"
        if pin
        else ""
    )


def _where(first_isa: set, here: str, pin: str) -> str:
    """What the second look says where this machine's oneDNN is not the first look's set."""
    if pin:
        return (
            f"second look: oneDNN held to the first look's {next(iter(first_isa))} by ONEDNN_MAX_CPU_ISA={pin} "
            f"(this machine's own is {here}; docs/decision-rules.md, 'Second look')"
        )
    return (
        f"second look: not trained here: the first look's runs were trained on {', '.join(sorted(first_isa))}, "
        f"this machine's oneDNN is {here} (docs/decision-rules.md, 'Second look'); the runs the ledger holds "
        f"are taken"
    )


def _pin(runner: StudyRunner, first_isa: set, here: str) -> str:
    """The ONEDNN_MAX_CPU_ISA that holds oneDNN here to the one set the first look's runs were
    trained on, where this machine's own set is another that includes it (an Intel Xeon with
    AMX for runs of AVX-512 with bfloat16); "" where none is needed or none gives that set."""
    if len(first_isa) != 1 or here in first_isa or os.environ.get("ONEDNN_MAX_CPU_ISA"):
        return ""  # (a cap the shell exports is every run's, in their keys too: not overridden)
    (first,) = first_isa
    cap = ONEDNN_CAPS.get(first, "")
    return cap if cap and runner.onednn_isa(cap) == first else ""
