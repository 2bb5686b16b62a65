"""The study's record: everything its reports say, in one JSON file (reports/study.json), so
that a report is a function of its record and the code, and can be rendered again without
training (`deepdensity report --from reports/`)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import time
from pathlib import Path
from typing import Optional

from deepdensity.config import Config
from deepdensity.scaling import policies
from deepdensity.study.core.cells import TimeBase
from deepdensity.study.core.preset import DOUBLE_ETA, SWEEP_STOPPING, Study
from deepdensity.study.core.protocol_text import RULES_VERSION
from deepdensity.training.runs import read_metrics
from deepdensity.utils.stack import git_revision

# the only format read back: a record of another is refused (rerender.py, ledger_import.py)
FORMAT = 2
# an absolute path as a record may hold it (a study run outside the checkout): after a space,
# a bracket, a quote, a backtick or '=' (data_path=/x), or at the start, so that "s / epoch",
# "1/2" and URLs are not paths
_ABSOLUTE_PATH = re.compile(r"(?:(?<=[\s(\"'`=])|^)/[\w.+-]+(?:/[\w.+-]+)+", re.M)


def machine_paths(text: str) -> list:
    """The absolute paths `text` names."""
    return _ABSOLUTE_PATH.findall(text)


def without_machine_paths(text: str) -> str:
    """`text` with every absolute path shown by its last two parts ("/work/x/reports/study.json"
    as "reports/study.json"): a committed report names no folder of the machine that made it."""
    return _ABSOLUTE_PATH.sub(lambda m: "/".join(m.group(0).split("/")[-2:]), text)


def _finite(x) -> Optional[float]:
    return float(x) if x is not None and math.isfinite(x) else None


def _curves(runs_root: Path, names: set) -> dict:
    """{run: per-epoch validation loss, and for warmup runs training loss and lr too}."""
    out = {}
    for name in sorted(names):
        rows = read_metrics(runs_root / name)
        curve = {"val_loss": [_finite(r["val_loss"]) for r in rows]}
        if name.startswith(policies.WARMUP + "-"):  # a run imported from an earlier record has no loss or lr rows
            curve.update(loss=[_finite(r.get("loss")) for r in rows], lr=[r.get("lr") for r in rows])
        out[name] = curve
    return out


def _common(s, proto, book, timing: dict, stopped: str, runner: str, kind: str, other_runs=frozenset()) -> dict:
    """What every study's record holds: the preset, settings, eta and target, the clock, the
    seeds and why, the machine and how the record was made. `other_runs`: the names of runs
    besides the cells' (a beyond study's filter and sweep), counted in the runs' minutes."""
    run_names = cell_runs(book) | set(other_runs)
    wall = time.perf_counter() - s.t_start
    # "cap": the epoch cap, max_epochs, under the name every record has had (the format's key)
    return {
        "format": FORMAT,
        "kind": kind,
        "decision_rules": RULES_VERSION,
        "preset": s.name,
        "study": dataclasses.asdict(s.study),
        "settings": proto.cfg.to_dict(),
        "eta": proto.eta,
        "target": proto.target,
        "cap": proto.max_epochs,
        "calibration": proto.calibration,
        "collapse_loss": s.collapse_loss,
        "n_train": s.n_train,
        "n_val": s.n_val,
        "runner": runner or "",
        "seed_reasons": [
            {"unit": " ".join(map(str, unit)), "seed": seed, "why": why}
            for (unit, seed), why in sorted(book.why.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
        ],
        "timing": timing,
        "environment": s.environment(),
        "provenance": {
            "command": "make repro" + ("" if s.name == "default" else " PRESET=" + s.name),
            "revision": git_revision(),
            "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "wall_minutes": round(wall / 60, 1),
            "trained": len(s.runner.trained),
            "reused": len(s.runner.reused - s.runner.trained),
            # by name: the next dry run counts from them (plan/invocation.py)
            "runs": {"trained": sorted(s.runner.trained), "reused": sorted(s.runner.reused - s.runner.trained)},
            "parallel_runs": s.runner.parallel,
            "runs_minutes": round(
                sum(
                    json.loads((s.root / n / "result.json").read_text()).get("seconds") or 0.0
                    for n in run_names
                    if (s.root / n / "result.json").exists()
                )
                / 60,
                1,
            ),
            "more_seeds_stopped_at": stopped,
        },
    }


def cell_runs(book) -> set:
    """The names of the runs behind a study's cells (its Book's units, every seed)."""
    return {name for names in book.runs.values() for name in names}


def seq_2eta_of(book) -> list:
    """The sequential runs at 2 x eta of a study's book, as the record keeps them."""
    return [
        {"seed": sd, "status": r["status"], "epochs": r["epochs"], "final_val_loss": _finite(r.get("final_val_loss"))}
        for (m, _, sd), (r, _) in sorted(book.results.items())
        if m == DOUBLE_ETA
    ]


def study_record(kind: str, end, own: dict, other_runs=frozenset()) -> dict:
    """The one record of a finished study (`end`: rerender.StudyEnd, repro.run_study's state):
    what every study holds (_common) and its cells, then its kind's `own` keys (paper_keys,
    beyond_keys); `other_runs` are the kind's runs besides the cells', counted in the runs' minutes."""
    return {
        **_common(end.s, end.proto, end.book, end.timing, end.stopped, end.options.runner or "", kind, other_runs),
        "cells": [dataclasses.asdict(c) for c in end.cells],
        **own,
    }


def paper_keys(end, fig1: Optional[dict]) -> dict:
    """What a study of the paper's protocol records besides the cells: the runs at 2 x eta, the lr
    search, every run's curve and Fig. 1's slices (sequential.figure1_slices; None where no
    weights were at hand)."""
    return {
        "seq_2eta": seq_2eta_of(end.book),
        "lr_search": end.sweep,
        "curves": _curves(end.s.root, cell_runs(end.book)),
        "fig1": fig1,
    }


ROW_KEYS = ("epoch", "global_batch", "steps", "allreduces", "grad_noise", "grad_sq", "val_loss")


def beyond_keys(root: Path, cells: list, earlier: tuple, filtering: Optional[dict], sweep: Optional[list]) -> dict:
    """What a study of the modes beyond the paper records besides the cells: the default study's
    cells beside them, the per-epoch rows of the adaptive and local runs its tables and Fig. 7
    read, the filter and the batch sweep. Paths the machine named are kept by their last two parts."""
    beyond_runs = sorted({c.run for c in cells if not policies.get(c.mode).in_paper and c.n > 1})
    return {
        "earlier": {"cells": [dataclasses.asdict(c) for c in earlier[0]], "note": without_machine_paths(earlier[1])},
        "run_rows": {run: [{k: r.get(k) for k in ROW_KEYS} for r in read_metrics(root / run)] for run in beyond_runs},
        "filtering": None
        if filtering is None
        else {
            "rows": filtering["rows"],
            "filter": {
                k: without_machine_paths(v) if isinstance(v, str) else v for k, v in filtering["filter"].items()
            },
        },
        "batch_sweep": sweep,
        "sweep_stopping": dict(SWEEP_STOPPING) if sweep else None,
    }


def study_of(record: dict) -> Study:
    return Study(**record["study"])


def config_of(record: dict) -> Config:
    fields = {f.name for f in dataclasses.fields(Config)}
    return Config(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in record["settings"].items() if k in fields})


def time_base(record: dict) -> TimeBase:
    """What turns the record's passes into seconds under a clock: its data and epoch definition."""
    return TimeBase(record["n_train"], record["n_val"], config_of(record).epoch_definition)
