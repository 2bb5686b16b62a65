"""The dry run's first lines (invocation_lines): how many runs this invocation trains, how many it
reuses and about how long it takes here, before the plan's stages.

Counted by name from the runs the last invocation of this preset asked for (its record's
provenance "runs", written since 2026-12-01): each is reused where the runs folder holds it
finished or a ledger holds a run of that name, and trained otherwise; to them come the second
look's runs the last record lacks, the instruction-set check's under this machine's cap, and the
run Fig. 1 draws where the runs folder holds no weights for it (sequential.figure1_run). An
invocation counts what it asked for the same way (record.py: trained, and reused but not
trained), so the two agree wherever the ledger's runs answer as they did for the last one. The
time: the clock's minutes unless the runs folder holds its timing.json, and each run to train at
the passes its kind took (missing.py's estimates; the cap where none is on record)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from deepdensity.study.core.preset import FIG1_PREFIX, Study, figure1_run, isa_to_check
from deepdensity.study.plan.missing import missing_by_name, second_look_names
from deepdensity.study.plan.study_plan import CLOCK_MINUTES, hours_here

ISA_RUN = re.compile(r"isa-([a-z0-9_]+)-(.+)")  # design.isa_recheck's names: isa-<cap>-<run>
STACK_RUN = re.compile(r"stack-tf\d+-.+")  # design.stack_recheck's names
SEQ_RUN = re.compile(rf"({FIG1_PREFIX})?seq-s\d+")  # the sequential runs, and Fig. 1's


def invocation_lines(
    study: Study,
    entries: list,
    earlier: Optional[dict],
    parallel: int,
    runs: Path,
    stack_prefix: str,
    cpu_flags: str,
) -> list:
    """Two lines: 'this invocation: trains T run(s) and reuses R, about H here (...)' and what
    the runs to train are; one line where the last record does not name its runs.
    `stack_prefix`: the names --stack-check gives its runs ('stack-tf2210-'; '' without it);
    `cpu_flags`: this CPU's flags (/proc/cpuinfo), for the instruction-set check's cap."""
    clock = (
        "the clock held in its runs folder"
        if (runs / "timing.json").is_file()
        else f"with the clock first, {CLOCK_MINUTES[0]}-{CLOCK_MINUTES[1]} min"
    )
    asked = ((earlier or {}).get("provenance") or {}).get("runs")
    if not asked:
        why = "no earlier record of this preset" if not earlier else "its last record does not name its runs"
        return [f"this invocation: {why}: the runs below, each trained unless held ({clock})"]
    names = {_as_asked_here(n, study, stack_prefix, cpu_flags) for n in [*asked["trained"], *asked["reused"]]}
    names.discard(None)
    names |= set(second_look_names(study, earlier)) if study.second_look_seeds else set()
    seq = f"seq-s{study.sequential_seeds()[0]}"
    names.discard(FIG1_PREFIX + seq)
    recorded = {e["run"] for e in entries}
    fig1 = not (figure1_run(runs, study.sequential_seeds()[0]) / "weights.h5").is_file()
    if fig1 and _held(seq, runs, recorded):
        names.add(FIG1_PREFIX + seq)
    to_train = sorted(n for n in names if n == FIG1_PREFIX + seq or not _held(n, runs, recorded))
    priced = missing_by_name(study, entries, earlier)
    seq_passes = study.calibration_epochs + max(study.workers)  # repro's sequential runs' length
    hours = hours_here(
        [(seq_passes, priced[None][1]) if SEQ_RUN.fullmatch(n) else priced.get(n, priced[None]) for n in to_train],
        parallel,
    )
    took = f"about {hours:.1f} h here" if hours >= 0.1 else f"about {hours * 60:.0f} min here"
    lines = [
        f"this invocation: trains {len(to_train)} run(s) and reuses {len(names) - len(to_train)}, {took} "
        f"({parallel} at a time, {clock})"
    ]
    if to_train:
        lines.append(f"  to train: {_kinds(to_train, set(second_look_names(study, earlier)), seq)}")
    return lines


def _as_asked_here(name: str, study: Study, stack_prefix: str, cpu_flags: str) -> Optional[str]:
    """The name the last invocation's run has in this one: the instruction-set check's under
    this machine's cap; the stack check's only under the same --stack-check (None: not asked)."""
    if STACK_RUN.fullmatch(name):
        return name if stack_prefix and name.startswith(stack_prefix) else None
    isa = ISA_RUN.fullmatch(name)
    if isa:
        cap = isa_to_check(study.isa_check, "AVX-512" if " avx512f " in f" {cpu_flags} " else "AVX2")
        return f"isa-{cap.lower()}-{isa.group(2)}" if cap else None
    return name


def _held(name: str, runs: Path, recorded: set) -> bool:
    """Is the run reused: finished in the runs folder, or a run of that name on a ledger?"""
    return (runs / name / "result.json").is_file() or name in recorded


def _kinds(to_train: list, second: set, seq: str) -> str:
    """'96 of the second look, 1 for Fig. 1's weights, 2 others (a, b)'."""
    look = [n for n in to_train if n in second]
    fig1 = [n for n in to_train if n == FIG1_PREFIX + seq]
    rest = [n for n in to_train if n not in second and n != FIG1_PREFIX + seq]
    parts = [f"{len(look)} of the second look"] if look else []
    parts += [f"{fig1[0]} for Fig. 1's weights"] if fig1 else []
    if rest:
        shown = ", ".join(rest[:8]) + (f" and {len(rest) - 8} more" if len(rest) > 8 else "")
        parts.append(f"{len(rest)} of the last study's runs no ledger holds ({shown})")
    return "; ".join(parts)
