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
from deepdensity.utils.machine import CAP_FLAGS, ONEDNN_CAPS

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
    no_train: bool = False,
) -> list:
    """'this invocation: trains T run(s) and reuses R, about H here (...)', then what the runs to
    train are and the runs not held it will not train (--no-train; the second look's where this
    CPU cannot be held to the first look's instruction set), which it does not count either; one
    line where the last record does not name its runs. `stack_prefix`: the names --stack-check
    gives its runs ('stack-tf2210-'; '' without it); `cpu_flags`: this CPU's (/proc/cpuinfo)."""
    clock = (
        "the clock held in its runs folder"
        if (runs / "timing.json").is_file()
        else f"with the clock first, {CLOCK_MINUTES[0]}-{CLOCK_MINUTES[1]} min"
    )
    asked = ((earlier or {}).get("provenance") or {}).get("runs")
    if not asked:
        why = "no earlier record of this preset" if not earlier else "its last record does not name its runs"
        return [f"this invocation: {why}: the runs below, each trained unless held ({clock})"]
    second = set(second_look_names(study, earlier)) if study.second_look_seeds else set()
    names, to_train, seq = _runs_asked(study, entries, asked, second, runs, stack_prefix, cpu_flags)
    isa = _first_looks_isa(entries, asked)
    not_here = "" if _can_hold(isa, cpu_flags) else f"the second look's: this CPU cannot be held to {isa}"
    why_not = "--no-train" if no_train else not_here
    skipped = to_train if no_train else [n for n in to_train if n in second] if not_here else []
    names, to_train = names - set(skipped), [n for n in to_train if n not in skipped]
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
        lines.append(f"  to train: {_kinds(to_train, second, seq)}")
    if skipped:
        lines.append(f"  not counted: {len(skipped)} run(s) no ledger holds that it will not train ({why_not})")
    return lines


def _runs_asked(study: Study, entries: list, asked: dict, second: set, runs: Path, stack_prefix: str, flags: str):
    """(every run name the invocation asks for, those it trains, the first sequential run's name):
    the last invocation's runs as named here, the second look's, and Fig. 1's where its weights
    are not in the runs folder and its sequential run is held (else that run trains itself)."""
    names = {_as_asked_here(n, study, stack_prefix, flags) for n in [*asked["trained"], *asked["reused"]]}
    names.discard(None)
    names |= second
    seq = f"seq-s{study.sequential_seeds()[0]}"
    names.discard(FIG1_PREFIX + seq)
    recorded = {e["run"] for e in entries}
    if not (figure1_run(runs, study.sequential_seeds()[0]) / "weights.h5").is_file() and _held(seq, runs, recorded):
        names.add(FIG1_PREFIX + seq)
    return names, sorted(n for n in names if n == FIG1_PREFIX + seq or not _held(n, runs, recorded)), seq


def _first_looks_isa(entries: list, asked: dict) -> Optional[str]:
    """The oneDNN instruction set the last invocation's own runs were trained on, where the ledger
    names one (not the checks' runs, capped or on another stack); None where it names several."""
    mine = set(asked["trained"]) | set(asked["reused"])
    found = {
        e["machine"].get("onednn_isa")
        for e in entries
        if e["run"] in mine and not e["isa_cap"] and not e.get("stack_check") and not e["machine"].get("isa_pin")
    }
    return next(iter(found)) if len(found) == 1 else None


def _can_hold(isa: Optional[str], flags: str) -> bool:
    """Can oneDNN here use, or be held to, `isa` (second_look.py's pin)? True where unknown."""
    flag = CAP_FLAGS.get(ONEDNN_CAPS.get(isa or "", ""))
    return flag is None or f" {flag} " in f" {flags} "


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
