"""The study's ledger: every finished run, kept beside the reports, so that a study grows across
invocations and machines instead of starting over.

An entry is one finished run: the settings that decide its path (the key), the stopping rules it
ran under, its epoch-end validation losses and metrics rows, its outcome, and the machine, the
instruction set and the revision that ran it; a few KB, no weights. A later study asks the
ledger before it trains: a run whose key matches is *replayed* under the stopping rules the
study asks for now (rules.StoppingRules over its epochs). Training is deterministic on one
machine and a stopping rule only ends a run, so if the replay stops inside the recorded epochs
the answer is exact: the same run, cut where the rules now in force would have cut it. If it
does not (the run ended earlier than it would now), the run is trained again.

The key leaves out the data's path (the data is named by its cubes' hash, data_identity) and the
stopping rules (replayed instead), and holds TRAINING_VERSION: bump it when a change to the
training code changes what a run with the same settings computes. A ledger file's lines, and what
a crash leaves of one, are ledger_lines.py's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Iterable, Optional

from deepdensity.scaling import rules
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import curves
from deepdensity.study.core.data_identity import CUBES_OF
from deepdensity.study.core.ledger_lines import FORMAT, end_the_last_line, entries_in
from deepdensity.study.core.preset import FIG1_PREFIX
from deepdensity.utils.files import mark_folder, write_atomic

TRAINING_VERSION = 1
LEDGER_FILE = "ledger.jsonl"
MARKER = "from_ledger.json"  # in a run folder written from the ledger, not trained here
STOPPING = tuple(f.name for f in dataclasses.fields(rules.StoppingRules))  # declared there alone
NOT_IN_KEY = ("data_path",) + STOPPING
ROW_KEYS = (
    "epoch",
    "loss",
    "val_loss",
    "lr",
    "seconds",
    "steps_seconds",
    "global_batch",
    "steps",
    "allreduces",
    "workers",
    "pass_val_losses",
    "batch_changes",
    "noise_ratio",
    "grad_noise",
    "grad_sq",
    "next_global_batch",
)


def run_key(config: dict, mode: str, n: int, launcher: str, isa_cap: str, data: str, stack_check: str = "") -> str:
    """What decides a run's path: its settings but the stopping rules and the data's path, its
    mode and workers, how it was launched, the instruction-set cap and the data's cubes
    (data_identity). The stack (TensorFlow, Keras) is left out: a run of the committed study is
    reused on another stack as what it is (`stack_of`); only the stack check's runs
    (`stack_check`, naming the stack they are trained on) are keyed by it, so that no run of
    another stack answers them."""
    what = {
        "training_version": TRAINING_VERSION,
        "mode": mode,
        "n": n,
        "launcher": launcher,
        "isa_cap": isa_cap or "",
        "data": data,
        **({"stack_check": stack_check} if stack_check else {}),
        "config": {k: config[k] for k in sorted(config) if k not in NOT_IN_KEY},
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=list).encode()).hexdigest()[:24]


def stopping_of(config: dict) -> dict:
    return {k: config[k] for k in STOPPING}


def replay(entry: dict, stopping: dict) -> Optional[tuple]:
    """(status, epochs) of the entry's run under `stopping`, or None when the recorded epochs end
    before those rules would stop it. A run recorded as non-finite stays so at its last epoch."""
    vals = [math.inf if v is None else v for v in entry["val_losses"]]
    last, rules_ = len(vals) - 1, rules.StoppingRules.of(stopping)
    for e, v in enumerate(vals):
        if e == last and entry["result"]["status"] == RunStatus.DIVERGED:
            return RunStatus.DIVERGED, e + 1
        reason = rules_.reason(e, 1.0, v, vals[: e + 1])
        if reason:
            return reason, e + 1
    return None


def answer(entry: dict, stopping: dict) -> Optional[dict]:
    """The entry cut to what a run under `stopping` would have recorded: {"result", "rows",
    "val_losses"}; None when the entry cannot answer (replay), or when it holds no metrics rows
    (imported from a record) and the target differs from its own, whose passes it alone holds."""
    outcome = replay(entry, stopping)
    if outcome is None:
        return None
    status, epochs = outcome
    rows = entry.get("rows")
    if rows is None and stopping["target_loss"] != entry["stopping"]["target_loss"]:
        return None
    rows = rows[:epochs] if rows is not None else None
    val = entry["val_losses"][epochs - 1]
    seconds = rows[-1].get("seconds") if rows else None
    result = {
        **entry["result"],
        "status": status,
        "epochs": epochs,
        "final_val_loss": val,
        "final_loss": rows[-1].get("loss") if rows else entry["result"].get("final_loss"),
        "target_loss": stopping["target_loss"],
        "seconds": seconds if rows else entry["result"].get("seconds"),
        "time_to_target_s": seconds
        if status == RunStatus.REACHED and rows
        else (entry["result"].get("time_to_target_s") if status == RunStatus.REACHED else None),
    }
    if rows is not None:
        per_epoch = curves.passes_per_epoch(entry["n"], curves.epoch_definition(entry["config"]))
        passes = curves.passes_to_target(rows, stopping["target_loss"], per_epoch)
    else:
        passes = entry["result"].get("passes_to_target")
    result["passes_to_target"] = passes if status == RunStatus.REACHED else None
    return {"result": result, "rows": rows, "val_losses": entry["val_losses"][:epochs]}


def seconds_a_pass(entry: dict) -> Optional[float]:
    """The seconds a pass of the entry's run took on its own clock; None without a timed row."""
    rows = entry.get("rows")
    if not rows or not rows[-1].get("seconds"):
        return None
    passes_an_epoch = curves.passes_per_epoch(entry["n"], curves.epoch_definition(entry["config"]))
    return rows[-1]["seconds"] / (len(rows) * passes_an_epoch)


class Ledger:
    """The entries of every ledger file read (this runs folder's, the committed one, others
    given), answering requests; new entries are appended to `own`, one line each, as runs end."""

    def __init__(self, own: Path, others: Iterable[Path] = ()):
        self.own, self._lock = Path(own), threading.Lock()
        self.paths = list(dict.fromkeys([self.own, *map(Path, others)]))
        self._read: dict = {}  # path -> (mtime, entries): a file that changes is read again

    @property
    def entries(self) -> list:
        """Every entry of every ledger file, read again when a file changed (a ledger copied in
        from another machine while a study runs is used from its next run on)."""
        with self._lock:
            for path in self.paths:
                mtime = path.stat().st_mtime_ns if path.is_file() else None
                if path not in self._read or self._read[path][0] != mtime:
                    self._read[path] = (mtime, read_entries(path) if mtime is not None else [])
            return [e for _, entries in self._read.values() for e in entries]

    def find(self, key: str, stopping: dict) -> Optional[tuple]:
        """(entry, answer) of the first entry with `key` that answers `stopping`, else None."""
        for e in [e for e in self.entries if e["key"] == key]:
            a = answer(e, stopping)
            if a is not None:
                return e, a
        return None

    def pass_seconds(self) -> Optional[float]:
        """The median seconds a pass took in the entries with rows (their runs' own clocks)."""
        per = sorted(filter(None, (seconds_a_pass(e) for e in self.entries if not e["isa_cap"])))
        return round(per[len(per) // 2], 3) if per else None

    def append(self, entry: dict) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock:
            self.own.parent.mkdir(parents=True, exist_ok=True)
            with open(self.own, "a+b") as f:  # one line per run: a crash loses at most the line being written
                end_the_last_line(f)
                f.seek(0, os.SEEK_END)
                f.write(line.encode())
                f.flush()
                os.fsync(f.fileno())

    def write_merged(self, path: Path) -> int:
        """Every entry once, in a stable order; the same run from two machines is two entries.
        Returns the count."""
        seen, kept = set(), []
        for e in sorted(self.entries, key=_identity):
            ident = _identity(e)
            if ident not in seen:
                seen.add(ident)
                kept.append(e)
        write_atomic(path, "".join(json.dumps(e, sort_keys=True) + "\n" for e in kept))
        return len(kept)


def _identity(e: dict) -> tuple:
    """What makes an entry another one: its run, rules, length, and where and when it ran."""
    return (
        e["mode"],
        e["n"],
        e["seed"],
        e["run"],
        e["key"],
        json.dumps(e["stopping"], sort_keys=True),
        len(e["val_losses"]),
        json.dumps(e["machine"], sort_keys=True),
        e["finished"],
        e["source"],
    )


def read_entries(path: Path) -> list:
    """The entries of a ledger file ([] when missing), its lines checked (ledger_lines.entries_in),
    each read as it should have been written (_keyed_by_its_stack, _keyed_by_its_cubes), but Fig.
    1's run: trained for its weights alone, which no entry holds, it answers no request, and
    under its sequential run's key it would answer that run's (runner.py does not record it since
    2026-12-01; the second look's invocation, before, did)."""
    return [
        _keyed_by_its_cubes(_keyed_by_its_stack(e)) for e in entries_in(path) if not e["run"].startswith(FIG1_PREFIX)
    ]


def _keyed_by_its_cubes(e: dict) -> dict:
    """An entry of an "arrays:" identity in CUBES_OF (data_identity.py), read with its cubes'
    identity and the key that gives; the others as they are."""
    label = e.get("stack_check", "")
    if (
        e["data"] not in CUBES_OF
        or run_key(e["config"], e["mode"], e["n"], e["launcher"], e["isa_cap"], e["data"], label) != e["key"]
    ):
        return e  # not a key this version of the training code would make: left as it was
    data = CUBES_OF[e["data"]]
    return {**e, "data": data, "key": run_key(e["config"], e["mode"], e["n"], e["launcher"], e["isa_cap"], data, label)}


def entry_of(
    run: str,
    mode: str,
    n: int,
    seed: int,
    launcher: str,
    isa_cap: str,
    data: str,
    config: dict,
    result: dict,
    rows: Optional[list],
    val_losses: list,
    machine: dict,
    revision: str,
    source: str,
    stack: Optional[dict] = None,
    stack_check: str = "",
    transport: Optional[str] = None,
) -> dict:
    """One ledger line, keyed as run_key keys the request it answers (`stack_check` included, so
    that a stack check's run is stored under its own key and answers only a stack check).
    `stack`: the TensorFlow, Keras and numpy that trained it, as its config.json's "versions" say
    (None: not known; see `stack_of`); `transport`: how its ranks' allreduces travelled, as its
    config.json's "launch" says (None: one process, or not known)."""
    cfg = {k: v for k, v in config.items() if k != "data_path"}
    return {
        "format": FORMAT,
        "key": run_key(config, mode, n, launcher, isa_cap, data, stack_check),
        "run": run,
        "mode": mode,
        "n": n,
        "seed": seed,
        "launcher": launcher,
        "isa_cap": isa_cap or "",
        "data": data,
        **({"stack_check": stack_check} if stack_check else {}),
        **({"transport": transport} if transport else {}),
        "config": cfg,
        "stopping": stopping_of(config),
        "result": result,
        "rows": None if rows is None else [{k: r[k] for k in ROW_KEYS if k in r} for r in rows],
        "val_losses": [v if v is not None and math.isfinite(v) else None for v in val_losses],
        "machine": machine,
        "revision": revision,
        "source": source,
        **({"stack": {k: stack.get(k) for k in STACK_KEYS if stack.get(k)}} if stack else {}),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


# the prefix design.stack_recheck gives its runs' names, and its label of the stack they ran on
STACK_CHECK_RUN = "stack-tf"


def stack_check_label(tensorflow: str, keras: str) -> str:
    """The stack a stack check's runs are keyed by (design.stack_recheck): 'TensorFlow 2.21.0,
    tf-keras 2.21.0', Keras as its distribution's name (config.json says the module's, tf_keras)."""
    return f"TensorFlow {tensorflow}, {keras.replace('tf_keras', 'tf-keras')}"


def _keyed_by_its_stack(e: dict) -> dict:
    """An entry as it should have been written. Until 2026-11-29 entry_of left the stack out of
    a stack check's key, so that the check's runs (named stack-tf<version>-...) were stored under
    the default study's keys: they answered its requests, and every invocation that found them in
    a runs folder recorded them again. Such an entry is read with its stack's key; the others as
    they are."""
    if (
        not e["run"].startswith(STACK_CHECK_RUN)
        or e.get("stack_check")
        or not (e.get("stack") or {}).get("tensorflow")
        or not (e.get("stack") or {}).get("keras")
    ):
        return e
    label = stack_check_label(e["stack"]["tensorflow"], e["stack"]["keras"])
    return {
        **e,
        "stack_check": label,
        "key": run_key(e["config"], e["mode"], e["n"], e["launcher"], e["isa_cap"], e["data"], label),
    }


STACK_KEYS = ("tensorflow", "keras", "numpy")
# Entries written before the ledger recorded the stack: every revision of setup.py until then
# pinned tensorflow-cpu==2.15.1 (and tensorflow[and-cuda]==2.15.1), whose tf.keras is keras 2.15.0
# (`git log -p -- setup.py`)
BEFORE_STACKS = {"tensorflow": "2.15.1", "keras": "keras 2.15.0"}


def stack_of(entry: dict) -> tuple:
    """(TensorFlow, Keras, recorded) of the run behind an entry; for an entry from before the
    ledger recorded them, the pin of every revision then and recorded False."""
    recorded = entry.get("stack")
    if recorded:
        return (*(recorded.get(k) or "?" for k in ("tensorflow", "keras")), True)
    return (*(BEFORE_STACKS[k] for k in ("tensorflow", "keras")), False)


def materialize(folder: Path, entry: dict, got: dict, config: dict) -> None:
    """A run folder that reads as the finished run `got` (an answer of `entry`): config.json,
    metrics.jsonl, result.json, and MARKER naming where it ran. No weights: it cannot be resumed."""
    mark_folder(folder, "run")
    # the ledger's marker next: a crash part-way leaves a folder that says it came from the ledger
    write_atomic(
        folder / MARKER,
        json.dumps({k: entry[k] for k in ("key", "machine", "revision", "source", "finished")}, indent=2),
    )
    write_atomic(
        folder / "config.json",
        json.dumps(
            {**config, "mode": entry["mode"], "workers": entry["n"], "data_fingerprint": entry["data"]}, indent=2
        ),
    )
    rows = (
        got["rows"]
        if got["rows"] is not None
        else [{"epoch": i + 1, "val_loss": v} for i, v in enumerate(got["val_losses"])]
    )
    write_atomic(folder / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write_atomic(folder / "result.json", json.dumps(got["result"], indent=2))
