"""The study's checks of its own rules and results with more runs: the stall rule (the runs it
stopped, continued to the cap with the rule off), the instruction-set check (the first seed of
every trained unit again under another oneDNN ISA, every cell judged again on those runs) and
the stack check (the same, on another venv's TensorFlow and Keras: repro --stack-check VENV).
"""
from __future__ import annotations

import functools
import os
from dataclasses import asdict
from typing import Optional

from deepdensity.scaling import policies
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.record import seq_2eta_of
from deepdensity.study.run.design import Book, SEQUENTIAL_UNITS, study_cells, study_units
from deepdensity.study.run.session import Protocol, StudyRun
from deepdensity.training.runs import read_json


def stall_check(s: StudyRun, proto: Protocol, book: Book) -> list:
    """The stall rule checked with runs (docs/decision-rules.md): runs it stopped, continued from
    their last checkpoint (or trained again where none is held) to the cap with the rule off, every one at N >= 16 and a sample of the preset's `stall_check`
    of the others, spread over their cells. Where one reaches the target, its outcome replaces the
    stopped run's in the cells (the paper ran every run to its cap). One row per run continued.
    Strong scaling is read off the sequential runs, not trained on its own: it is not continued."""
    stopped = sorted((n, mode, seed, name) for (mode, n, seed), (r, name) in book.results.items()
                     if r["status"] == RunStatus.STALLED and not name.startswith("seq-s"))
    others = [x for x in stopped if x[0] < 16]
    # the sample of the others: a seed of every cell in turn (lowest seeds first), so that every
    # N and mode the rule stopped runs in is checked before any gets a second
    by_cell = {}
    for x in others:
        by_cell.setdefault((x[0], x[1]), []).append(x)
    spread = [x for i in range(max(map(len, by_cell.values()), default=0)) for x in
              (runs[i] for runs in by_cell.values() if i < len(runs))]
    # smallest N first: a continuation's cost grows with N (an epoch is N passes), so a study
    # stopped part-way has settled the most cells; the choice of runs does not depend on the order
    chosen = sorted([x for x in stopped if x[0] >= 16] + spread[:s.study.stall_check])

    def to_cap(n: int, mode: str, seed: int, name: str) -> dict:
        lr = 2 * proto.eta if mode == "2eta" else proto.eta       # the 2 x eta cell: the sequential model
        r = s.runner.run(f"{name}-to-cap", policies.SEQUENTIAL if mode == "2eta" else mode, n,
                         {**proto.common(), "seed": seed, "base_lr": repr(lr), "stall_patience": 0},
                         continue_from=name)     # from its last checkpoint: the same path, not its epochs again
        return {"mode": mode, "n": n, "seed": seed, "stopped_run": name, "stopped_after": book.results[(mode, n, seed)][0]["epochs"],
                "run": f"{name}-to-cap", "status": r["status"], "epochs": r["epochs"],
                "final_val_loss": r.get("final_val_loss")}

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
    from deepdensity.study.core.preset import isa_to_check
    from deepdensity.utils.machine import onednn_isa
    isa = isa_to_check(s.study.isa_check, onednn_isa())
    if isa is None:
        return None
    seed = s.study.seeds[0]
    runner = s.runner.sibling(None, s.runner.parallel)
    runner.env_extra = {"ONEDNN_MAX_CPU_ISA": isa}
    again = Book()
    again.results = dict(book.results)
    units = study_units(s, proto, real_strong=False, book=again, double_eta=s.study.doubles_eta(), runner=runner,
                        prefix=f"isa-{isa.lower()}-")
    seq_seed = s.study.sequential_seeds()[0]
    print(f"stability: seed {seed} of every trained cell (the sequential runs: seed {seq_seed}) again with "
          f"ONEDNN_MAX_CPU_ISA={isa}")
    runner.run_all([functools.partial(job, seq_seed if unit in SEQUENTIAL_UNITS else seed)
                    for unit, job in units.items()], label=f"runs under {isa}")
    cells = study_cells(s.study, again, s.root, "", timing, s.n_val, modelled, proto.target)
    return {"isa": isa, "seed": seed, "sequential_seed": seq_seed, "cells": [asdict(c) for c in cells],
            "seq_2eta": seq_2eta_of(again)}


def venv_stack(venv: str) -> dict:
    """{"python": VENV's interpreter, "tensorflow", "keras"} of another venv, asked of that
    interpreter (utils/stack.py reads its distributions); a UserError where it has no Python,
    no deepdensity or no supported stack."""
    import json
    import subprocess
    from pathlib import Path

    from deepdensity.utils.errors import UserError
    python = Path(venv) / "bin" / "python"
    if not python.is_file():
        raise UserError(f"--stack-check {venv}: no {python}; name a venv made by make install (e.g. .venv-paper)")
    ask = ("import json; from deepdensity.utils import stack; f = stack.found(); "
           "print(json.dumps([f.tensorflow, f.keras2, *stack.judge(f)]))")
    got = subprocess.run([str(python), "-c", ask], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"})
    if got.returncode != 0:
        raise UserError(f"--stack-check {venv}: its Python could not say its stack (is deepdensity installed "
                        f"there? make install VENV={venv}): {got.stderr.strip()[-300:]}")
    tf, keras, verdict, reasons = json.loads(got.stdout.strip().splitlines()[-1])
    if verdict == "unsupported":
        raise UserError(f"--stack-check {venv}: its stack is unsupported: {'; '.join(reasons)}")
    return {"python": str(python), "tensorflow": tf, "keras": keras}


def stack_recheck(s: StudyRun, proto: Protocol, book: Book, timing: dict, modelled,
                  venv: str) -> Optional[dict]:
    """repro --stack-check VENV: the first seed of every trained unit run again with VENV's
    interpreter, TensorFlow and Keras, and the study's cells with those runs in place of the
    originals (the report judges every claim again on them, beside the ISA check); None when
    not asked. The runs are keyed by VENV's stack: no run of another stack answers them."""
    if not venv:
        return None
    other = venv_stack(venv)
    seed, seq_seed = s.study.seeds[0], s.study.sequential_seeds()[0]
    label = f"TensorFlow {other['tensorflow']}, {other['keras']}"
    runner = s.runner.sibling(None, s.runner.parallel)
    runner.python, runner.stack_check = other["python"], label
    again = Book()
    again.results = dict(book.results)
    prefix = "stack-tf" + other["tensorflow"].replace(".", "") + "-"
    units = study_units(s, proto, real_strong=False, book=again, double_eta=s.study.doubles_eta(), runner=runner,
                        prefix=prefix)
    print(f"stability across stacks: seed {seed} of every trained cell (the sequential runs: seed {seq_seed}) "
          f"again on {label} ({venv})")
    runner.run_all([functools.partial(job, seq_seed if unit in SEQUENTIAL_UNITS else seed)
                    for unit, job in units.items()], label=f"runs on TensorFlow {other['tensorflow']}")
    cells = study_cells(s.study, again, s.root, "", timing, s.n_val, modelled, proto.target)
    return {"stack": label, "venv": venv, "seed": seed, "sequential_seed": seq_seed,
            "cells": [asdict(c) for c in cells], "seq_2eta": seq_2eta_of(again)}
