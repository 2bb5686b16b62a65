"""Which seeds the study runs, what one more seed of each unit runs (study_units), and the units
run again to check the study's rules and results (stall_check, isa_recheck, stack_recheck); the
outcomes they record and the cells those give are outcomes.py's. The preset's first seeds in every
cell, then the sequential design of study_plan.py (more seeds for cells below max_seeds, within
the time budget, up to max_seeds).

A *unit* is what one seed costs: ("strong",) is the sequential run, from which strong
scaling at every N (and N = 1 of every mode) is read; ("2eta",) the sequential run at
2 x eta; (mode, N) one emulated (or real) multi-worker run."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from pathlib import Path
from typing import Callable, Optional

from deepdensity.scaling import policies
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import curves
from deepdensity.study.core.preset import DOUBLE_ETA, DOUBLE_ETA_RUN, figure1_run, isa_to_check
from deepdensity.study.plan import study_plan
from deepdensity.study.record import paper_keys, seq_2eta_of
from deepdensity.study.run.outcomes import SEQUENTIAL_UNIT, Book, study_cells
from deepdensity.study.run.runner import NotHeld, StudyRunner, unless_not_held
from deepdensity.study.run.sequential import figure1_slices, real_strong_runs, strong_from_sequential
from deepdensity.study.run.session import Protocol, StudyRun
from deepdensity.training.runs import read_json
from deepdensity.utils.errors import UserError
from deepdensity.utils.machine import onednn_isa

FIRST = "first seeds of the preset"
# Units whose runs are sequential (one worker): they take the study's sequential seeds.
SEQUENTIAL_UNITS = (SEQUENTIAL_UNIT, (DOUBLE_ETA,))


def run_first_seeds(runner: StudyRunner, book: Book, units: dict, seeds: list, sequential_seeds: list = None) -> None:
    """Every unit at every one of the preset's first seeds, `runner.parallel` at a time, the
    sequential units (SEQUENTIAL_UNITS) at `sequential_seeds` instead when given. Seed by seed
    across all units, so that an interrupted study has grown every cell evenly."""

    def seeds_of(u: tuple) -> list:
        return sequential_seeds if sequential_seeds is not None and u in SEQUENTIAL_UNITS else seeds

    jobs = [
        (u, seeds_of(u)[i]) for i in range(len(seeds)) for u in units if seeds_of(u)[i] not in book.seeds.get(u, [])
    ]
    names = runner.run_all([functools.partial(held_or_none, units[u], s) for u, s in jobs], label="first seeds")
    for (u, s), run_names in zip(jobs, names):
        if run_names is not None:  # None: not held, in a study that trains nothing
            book.add(u, s, run_names, FIRST)


def held_or_none(job: Callable, seed: int) -> Optional[list]:
    """job(seed), or None when a run it needs is not held and the study trains nothing."""
    try:
        return job(seed)
    except NotHeld:
        return None


def run_more_seeds(runner: StudyRunner, book: Book, units: dict, max_seeds: int, deadline: float, say=print) -> str:
    """The sequential design: one more seed at a time for the unsettled units, fewest seeds and
    cheapest first, each only if it is expected to end before `deadline`; returns why it stopped."""
    stopped = {"why": "every cell settled or at max_seeds"}

    def reason(unit: tuple) -> Optional[str]:
        for cell in book.cells_of(unit):
            why = study_plan.unsettled(book.reached(*cell), max_seeds)
            if why:
                return f"N = {cell[1]}: {why}" if unit == SEQUENTIAL_UNIT else why
        return None

    def cost(unit: tuple) -> float:
        """Seconds one more seed of `unit` is expected to take: its seeds' mean so far."""
        return sum(runner.wall.get(r, 0.0) for r in set(book.runs[unit])) / len(book.seeds[unit])

    def next_jobs(running: set, done: set) -> list:
        busy = {u for u, _ in running}
        order = study_plan.next_in_line((u, len(book.seeds[u]), cost(u)) for u in units if u not in busy and reason(u))
        jobs = []
        for u, _, c in order:
            if time.perf_counter() + c > deadline:
                stopped["why"] = "the time budget"
                continue
            seed = max(book.seeds[u]) + 1
            jobs.append(((u, seed), functools.partial(_seed_job, units[u], seed, reason(u))))
        return jobs

    def on_done(key: tuple, value: tuple) -> None:
        unit, seed = key
        run_names, why = value
        book.add(unit, seed, run_names, why)
        say(f"more seeds: {unit} seed {seed} ({why})")

    runner.schedule(next_jobs, on_done, label="more seeds")
    return stopped["why"]


def _seed_job(job: Callable, seed: int, why: str) -> tuple:
    return job(seed), why


def study_units(
    s: StudyRun,
    proto: Protocol,
    real_strong: bool,
    book: Book,
    double_eta: bool,
    runner: Optional[StudyRunner] = None,
    prefix: str = "",
) -> dict:
    """{unit: job(seed) -> run names}: what one more seed of each unit (above) runs, as jobs that
    record their outcomes in the study's Book.
    Strong scaling follows the sequential path (the tests show it under horovodrun), so
    unless its runs are real it is read off each seed's sequential run. `runner` and `prefix`:
    another runner and run names, for the same units under other conditions (the ISA check)."""
    study, common, runner = s.study, proto.common(), runner or s.runner

    def sequential(seed: int) -> list:
        workers = [n for n in study.workers if n == 1 or not real_strong]
        derived, vals = strong_from_sequential(
            runner, seed, proto.eta, proto.seq_max_epochs, workers, proto.stopping(), prefix
        )
        for n, (status, epochs) in derived.items():
            last = curves.sample_epoch_losses(vals, n)[epochs - 1]
            book.results[(policies.STRONG, n, seed)] = (
                {
                    "status": status,
                    "epochs": epochs,
                    "time_to_target_s": None,
                    "final_val_loss": last if math.isfinite(last) else None,
                },
                f"{prefix}seq-s{seed}",
            )
        return [f"{prefix}seq-s{seed}"]

    def cell(mode: str, n: int, seed: int, name: str, settings: dict, train_mode: str = "") -> list:
        result = runner.run(prefix + name, train_mode or mode, n, {**common, "seed": seed, **settings})
        book.results[(mode, n, seed)] = (result, prefix + name)
        return [prefix + name]

    units = {(policies.STRONG,): sequential}
    if double_eta:  # the paper's "further increasing the lr diverges", at 2 x eta
        units[(DOUBLE_ETA,)] = lambda seed: cell(
            DOUBLE_ETA, 1, seed, f"{DOUBLE_ETA_RUN}{seed}", {"base_lr": 2 * proto.eta}, train_mode=policies.STRONG
        )
    for mode, n in study.trained_cells(real_strong):
        units[(mode, n)] = functools.partial(
            lambda mode, n, seed: cell(mode, n, seed, f"{mode}-n{n}-s{seed}", {}), mode, n
        )
    return units


def stall_check(s: StudyRun, proto: Protocol, book: Book) -> list:
    """The stall rule checked with runs (docs/decision-rules.md): runs it stopped, continued from
    their last checkpoint (or trained again where none is held) to the cap with the rule off, every one at
    N >= 16 and a sample of the preset's `stall_check`
    of the others, spread over their cells. Where one reaches the target, its outcome replaces the
    stopped run's in the cells (the paper ran every run to its cap). One row per run continued.
    Strong scaling is read off the sequential runs, not trained on its own: it is not continued;
    nor is a run of a second look (its sample is the first look's; docs/decision-rules.md, "Second
    look": such a run the rule stopped counts as missed)."""
    stopped = sorted(
        (n, mode, seed, name)
        for (mode, n, seed), (r, name) in book.results.items()
        if r["status"] == RunStatus.STALLED
        and not name.startswith("seq-s")
        and seed in s.study.first_look_seeds(mode, n)
    )
    others = [x for x in stopped if x[0] < 16]
    # the sample of the others: a seed of every cell in turn (lowest seeds first), so that every
    # N and mode the rule stopped runs in is checked before any gets a second
    by_cell = {}
    for x in others:
        by_cell.setdefault((x[0], x[1]), []).append(x)
    spread = [
        x
        for i in range(max(map(len, by_cell.values()), default=0))
        for x in (runs[i] for runs in by_cell.values() if i < len(runs))
    ]
    # smallest N first: a continuation's cost grows with N (an epoch is N passes), so a study
    # stopped part-way has settled the most cells; the choice of runs does not depend on the order
    chosen = sorted([x for x in stopped if x[0] >= 16] + spread[: s.study.stall_check])

    def to_cap(n: int, mode: str, seed: int, name: str) -> dict:
        lr = 2 * proto.eta if mode == DOUBLE_ETA else proto.eta  # the 2 x eta cell: the sequential model
        r = s.runner.run(
            f"{name}-to-cap",
            policies.SEQUENTIAL if mode == DOUBLE_ETA else mode,
            n,
            {**proto.common(), "seed": seed, "base_lr": lr, "stall_patience": 0},
            continue_from=name,
        )  # from its last checkpoint: the same path, not its epochs again
        return {
            "mode": mode,
            "n": n,
            "seed": seed,
            "stopped_run": name,
            "stopped_after": book.results[(mode, n, seed)][0]["epochs"],
            "run": f"{name}-to-cap",
            "status": r["status"],
            "epochs": r["epochs"],
            "final_val_loss": r.get("final_val_loss"),
        }

    if chosen:
        print(f"stall check: {len(chosen)} run(s) the stall rule stopped, continued to the cap with the rule off")
    rows = s.runner.run_all([functools.partial(to_cap, *x) for x in chosen], label="stall check")
    for row in rows:
        if row["status"] == RunStatus.REACHED:
            result = read_json(s.root / row["run"] / "result.json", "run's result")
            book.results[(row["mode"], row["n"], row["seed"])] = (result, row["run"])
    return rows


def isa_recheck(s: StudyRun, proto: Protocol, book: Book, timing: dict, modelled) -> Optional[dict]:
    """The preset's isa_check: the first seed of every trained unit run again with oneDNN and the
    rendering kernel capped at another instruction set, and the study's cells with those runs in
    place of the originals (the report judges every claim again on them); None when not asked."""
    isa = isa_to_check(s.study.isa_check, onednn_isa())
    if isa is None:
        return None
    runner = s.runner.sibling(None, s.runner.parallel)
    runner.env_extra = {"ONEDNN_MAX_CPU_ISA": isa}
    return {
        "isa": isa,
        **_first_seeds_again(
            s,
            proto,
            book,
            timing,
            modelled,
            runner,
            f"isa-{isa.lower()}-",
            check="stability",
            how=f"with ONEDNN_MAX_CPU_ISA={isa}",
            label=f"runs under {isa}",
        ),
    }


def _first_seeds_again(
    s: StudyRun,
    proto: Protocol,
    book: Book,
    timing: dict,
    modelled,
    runner: StudyRunner,
    prefix: str,
    check: str,
    how: str,
    label: str,
) -> dict:
    """The checks' first seed of every trained unit again on `runner`, its runs named `prefix`..., and the
    study's cells with those runs in place of the originals; `check`, `how` the runs differ and the
    runs' `label`, as the progress lines name them."""
    seed, seq_seed = s.study.seeds[0], s.study.sequential_seeds()[0]
    again = Book()
    again.results = dict(book.results)
    units = study_units(
        s, proto, real_strong=False, book=again, double_eta=s.study.doubles_eta(), runner=runner, prefix=prefix
    )
    print(f"{check}: seed {seed} of every trained cell (the sequential runs: seed {seq_seed}) again {how}")
    runner.run_all(
        [functools.partial(job, seq_seed if unit in SEQUENTIAL_UNITS else seed) for unit, job in units.items()],
        label=label,
    )
    cells = study_cells(s.study, again, s.root, "", timing, s.n_val, modelled, proto.target)
    return {
        "seed": seed,
        "sequential_seed": seq_seed,
        "cells": [dataclasses.asdict(c) for c in cells],
        "seq_2eta": seq_2eta_of(again),
    }


def venv_stack(venv: str) -> dict:
    """{"python": VENV's interpreter, "tensorflow", "keras"} of another venv, asked of that
    interpreter (utils/stack.py reads its distributions); a UserError where it has no Python,
    no deepdensity or no supported stack."""
    import json
    import subprocess

    python = Path(venv) / "bin" / "python"
    if not python.is_file():
        raise UserError(f"--stack-check {venv}: no {python}; name a venv made by make install (e.g. .venv-paper)")
    ask = (
        "import json; from deepdensity.utils import stack; f = stack.found(); "
        "print(json.dumps([f.tensorflow, f.keras2, *stack.judge(f)]))"
    )
    got = subprocess.run(
        [str(python), "-c", ask],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
    )
    if got.returncode != 0:
        raise UserError(
            f"--stack-check {venv}: its Python could not say its stack (is deepdensity installed "
            f"there? make install VENV={venv}): {got.stderr.strip()[-300:]}"
        )
    tf, keras, verdict, reasons = json.loads(got.stdout.strip().splitlines()[-1])
    if verdict == "unsupported":
        raise UserError(f"--stack-check {venv}: its stack is unsupported: {'; '.join(reasons)}")
    return {"python": str(python), "tensorflow": tf, "keras": keras}


def stack_check_prefix(tensorflow: str) -> str:
    """The names of the stack check's runs begin so: 'stack-tf2210-' for TensorFlow 2.21.0."""
    return "stack-tf" + tensorflow.replace(".", "") + "-"


def stack_recheck(s: StudyRun, proto: Protocol, book: Book, timing: dict, modelled, venv: str) -> Optional[dict]:
    """repro --stack-check VENV: the first seed of every trained unit run again with VENV's
    interpreter, TensorFlow and Keras, and the study's cells with those runs in place of the
    originals (the report judges every claim again on them, beside the ISA check); None when
    not asked. The runs are keyed by VENV's stack: no run of another stack answers them."""
    if not venv:
        return None
    other = venv_stack(venv)
    label = f"TensorFlow {other['tensorflow']}, {other['keras']}"
    runner = s.runner.sibling(None, s.runner.parallel)
    runner.python, runner.stack_check = other["python"], label
    prefix = stack_check_prefix(other["tensorflow"])
    return {
        "stack": label,
        "venv": venv,
        **_first_seeds_again(
            s,
            proto,
            book,
            timing,
            modelled,
            runner,
            prefix,
            check="stability across stacks",
            how=f"on {label} ({venv})",
            label=f"runs on TensorFlow {other['tensorflow']}",
        ),
    }


def paper_parts(end) -> tuple:
    """(the record's own keys, no runs besides the cells'): what a study of the paper's protocol
    asks besides its cells (rerender.PAPER; `end`: rerender.StudyEnd): the strong-scaling runs
    for real, the ISA and stack checks (none of these under a real runner), Fig. 1's slices, the
    stall check and the seconds a pass of its runs."""
    s, proto, book, runner = end.s, end.proto, end.book, end.options.runner
    real = [] if runner else unless_not_held(lambda: real_strong_runs(s, proto), [])
    isa = None if runner else unless_not_held(lambda: isa_recheck(s, proto, book, end.timing, end.modelled), None)
    stack = (
        None
        if runner
        else unless_not_held(
            lambda: stack_recheck(s, proto, book, end.timing, end.modelled, end.options.stack_check), None
        )
    )
    fig1 = figure1_slices(proto.cfg, figure1_run(s.root, s.study.sequential_seeds()[0]))
    return {
        **paper_keys(end, fig1),
        "real_strong": real,
        "isa_check": isa,
        "stack_check": stack,
        "stall_check": end.checked,
        "pass_seconds": s.runner.ledger.pass_seconds(),
    }, frozenset()
