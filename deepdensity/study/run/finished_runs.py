"""A finished run in the runs folder, as the runner meets it: checked against the run asked for
now before it is reused (set aside, reopened or refused), and made a ledger entry."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

import yaml

from deepdensity.config import Config
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import curves, ledger
from deepdensity.study.core.request import RunRequest
from deepdensity.study.run import run_folders
from deepdensity.training.runs import other_data, read_json, read_metrics, resume_changes
from deepdensity.utils.errors import StudyError
from deepdensity.utils.stack import git_revision


def set_aside_if_other_controller(out: Path, now: Optional[str], say=print) -> None:
    """A run of this name trained here under another controller than `now` (the runner's; None
    for one process) is not this run (the allreduce's order of summing changes its path; the
    ledger keeps it under its own): it is set aside, not reused and not deleted, and this one
    trains or comes from the ledger. One set aside earlier under the controller asked for now
    comes back."""
    if not now:
        return
    had = run_folders.other_controller(out, now)
    if had:
        aside = run_folders.set_aside(out, had)
        say(f"{out.name}: trained here under {had}, asked for under {now}; the {had} run is kept in {aside}")
    if run_folders.take_back(out, now):
        say(f"{out.name}: the run trained here under {now} earlier, set aside since, is back in its folder")


def stopped_early(out: Path, asked: RunRequest) -> Optional[dict]:
    """The result of the finished run in `out` where a stopping rule no longer asked for ended it
    (a stall rule turned off: docs/beyond.md, amendment of 2026-11-27) and the rules now in force
    train it on: the runner reopens it at its last checkpoint. None for a run that ends where it
    did under both, or that stopped at its cap (left to the cap's own rule: extended when asked for
    more); a StudyError for one that the rules now in force would have ended sooner, as the runner
    cannot cut a folder."""
    wanted = ledger.stopping_of(asked.config.to_dict())
    saved = {**Config().to_dict(), **read_json(out / "config.json", "run's configuration")}  # older: defaults
    if all(saved[k] == wanted[k] for k in ledger.STOPPING):
        return None
    r = read_json(out / "result.json", "finished run's result")
    if r["status"] == RunStatus.CAPPED:  # extended (or not) by max_epochs, as before
        return None
    vals = [row["val_loss"] for row in read_metrics(out)]
    now = ledger.replay({"val_losses": vals, "result": r}, wanted)
    if now == (r["status"], r["epochs"]):
        return None
    if now is not None:
        raise StudyError(
            f"{out} holds a run that ended {r['status']} at epoch {r['epochs']}; the stopping rules "
            f"asked for now end it {now[0]} at epoch {now[1]}: delete it, or pass another --runs folder"
        )
    return r


def refuse_stale(out: Path, asked: RunRequest, train_yaml: Path, fingerprint: Callable[[str], str]) -> None:
    """A finished run is reused only if it ran with the settings the study asks for now, on
    the same data (`fingerprint` of a data file: the runner's, computed once a file); otherwise
    StudyError names the differences (never a stale result)."""
    saved = read_json(out / "config.json", "run's configuration")
    # what train.yaml and the run set (a setting left at its default is not compared: a
    # default that changed since would make every earlier run stale)
    named = {**(yaml.safe_load(train_yaml.read_text()) or {}), **dict(asked.settings)}
    wanted = {k: v for k, v in asked.config.to_dict().items() if k in named}
    diffs = [f"{k} {old!r} -> {new!r}" for k, old, new in resume_changes(saved, wanted, {})]
    data = wanted.get("data_path")
    if data and Path(data).exists() and other_data(saved, fingerprint(data)):
        diffs.append(f"the data in {data} changed")
    if diffs:
        raise StudyError(
            f"{out} holds a finished run with other settings than this study asks for "
            f"({', '.join(diffs)}); delete it, or pass another --runs folder"
        )


def ledger_entry(
    out: Path,
    asked: RunRequest,
    request: dict,
    source: str,
    runs_ledger: ledger.Ledger,
    machine_of: Callable[[str], dict],
    stack_check: str,
    say=print,
) -> Optional[dict]:
    """The finished run in `out` as a ledger entry, once for this machine (a run another
    machine's entry also answers is still added: where each run was trained is kept); None where
    `runs_ledger` holds it for this machine already, or where its folder holds fewer metrics rows
    than epochs (said). `source`: "trained" here and now, or "runs folder" (finished before;
    revision unknown); `machine_of(isa_cap)`: this machine, as the entry names it."""
    name, mode, n = asked.name, asked.mode, asked.n
    result = read_json(out / "result.json", "run's result")
    rows = read_metrics(out)
    if len(rows) != result["epochs"]:
        say(f"ledger: {out} holds {len(rows)} metrics rows for {result['epochs']} epochs; not recorded")
        return None
    saved = read_json(out / "config.json", "run's configuration")
    config = {**request["config"], **{k: saved[k] for k in ledger.STOPPING if k in saved}}
    machine = machine_of(request["isa_cap"])
    if _held_for(machine, runs_ledger, request, config, rows):
        return None
    vals = [r["val_loss"] for r in rows]
    entry = ledger.entry_of(
        name,
        mode,
        n,
        int(config["seed"]),
        request["launcher"],
        request["isa_cap"],
        request["data"],
        config,
        _with_passes(result, rows, config, n),
        rows,
        vals,
        machine,
        git_revision() if source == "trained" else "unknown",
        source,
        stack=saved.get("versions"),
        stack_check=stack_check,
        transport=(saved.get("launch") or {}).get("transport"),
    )
    assert entry["key"] == request["key"], (entry["key"], request["key"])
    if source != "trained":  # finished before: when its result was written, not now
        entry["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime((out / "result.json").stat().st_mtime))
    return entry


def _held_for(machine: dict, runs_ledger: ledger.Ledger, request: dict, config: dict, rows: list) -> bool:
    """Does the ledger hold the run already (its key, stopping rules and epochs), trained on this
    machine's host?"""
    return any(
        e["key"] == request["key"]
        and e["stopping"] == ledger.stopping_of(config)
        and len(e["val_losses"]) == len(rows)
        and e["machine"].get("host") == machine["host"]
        for e in runs_ledger.entries
    )


def _with_passes(result: dict, rows: list, config: dict, n: int) -> dict:
    """The run's result with its passes to target, as its ledger entry keeps it (None where it
    did not reach the target)."""
    per_epoch = curves.passes_per_epoch(n, curves.epoch_definition(config))
    return {
        **result,
        "passes_to_target": curves.passes_to_target(rows, config["target_loss"], per_epoch)
        if result["status"] == RunStatus.REACHED
        else None,
    }
