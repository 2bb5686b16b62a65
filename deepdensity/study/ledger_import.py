"""Runs of an earlier study record (study.json) into the ledger, so that a study grows from them.

    python -m deepdensity.study.ledger_import RECORD --runs runs/study-default --out reports/ledger.jsonl

A record keeps each run's outcome, passes to target and epoch-end validation losses, not its
metrics rows: such an entry answers only a study with the same target (ledger.answer). Each run's
settings are rebuilt the way the study asks for them (the runs folder's train.yaml and the run's
own settings), and the import refuses a record whose settings differ from them in anything but
the stopping rules. The data is named by the runs folder's data.h5, the study's data written
from the same specification; the record holds no fingerprint of its own, so an imported run is
used only where the study's own eta and target, recomputed from runs trained here, are the
record's to the last bit (the key holds eta, the answer the target).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from deepdensity.scaling import policies
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import ledger
from deepdensity.study.core.curves import passes_per_epoch
from deepdensity.study.core.preset import DOUBLE_ETA_RUN
from deepdensity.study.record import FORMAT
from deepdensity.study.run.runner import StudyRunner
from deepdensity.utils.args import parser
from deepdensity.utils.errors import UserError, command

OLD_STALL = {"stall_near": 0.0, "stall_near_patience": 0}  # records made before the near-target allowance


def record_runs(record: dict) -> list:
    """[(run name, mode, n, settings, result or None, val_losses)] of every run a paper study's
    record describes fully enough: sequential, 2 x eta, trained cells and the edge search's probes.
    A cell that reached the target in epochs of more than one pass needs its passes to target: its
    epochs would price it up to an epoch's passes too high."""
    eta, target, max_epochs = record["eta"], record["target"], record["cap"]
    study, curves = record["study"], record.get("curves") or {}
    common = {
        "base_lr": eta,
        "target_loss": target,
        "max_epochs": max_epochs,
        **({"collapse_loss": record["collapse_loss"]} if study["train"].get("collapse_patience") else {}),
    }
    return [
        *_sequential_runs(record, curves),
        *_double_eta_runs(record, curves, common),
        *_cell_runs(record, curves, common),
        *_probe_runs(record),
    ]


def _sequential_runs(record: dict, curves: dict) -> list:
    """The sequential runs (record_runs), trained to the calibration's epochs and every N's."""
    eta, study = record["eta"], record["study"]
    seq_max_epochs = study["calibration_epochs"] + max(study["workers"])
    runs = []
    for name, curve in sorted(curves.items()):
        if name.startswith("seq-s"):
            seed = int(name[len("seq-s") :])
            runs.append(
                (
                    name,
                    policies.STRONG,
                    1,
                    {
                        "base_lr": eta,
                        "max_epochs": seq_max_epochs,
                        "target_loss": 0.0,
                        "seed": seed,
                        "stall_patience": 0,
                        "collapse_patience": 0,
                    },
                    None,
                    curve["val_loss"],
                )
            )
    return runs


def _double_eta_runs(record: dict, curves: dict, common: dict) -> list:
    """The sequential runs at 2 x eta (record_runs) whose curves the record holds."""
    runs = []
    for r in record.get("seq_2eta") or []:
        name = f"{DOUBLE_ETA_RUN}{r['seed']}"
        if name in curves:
            runs.append(
                (
                    name,
                    policies.STRONG,
                    1,
                    {**common, "seed": r["seed"], "base_lr": 2 * record["eta"]},
                    {k: r[k] for k in ("status", "epochs", "final_val_loss")},
                    curves[name]["val_loss"],
                )
            )
    return runs


def _cell_runs(record: dict, curves: dict, common: dict) -> list:
    """The trained cells' runs at N > 1 (record_runs) that the record prices fully enough."""
    runs = []
    for c in record["cells"]:
        priced = (
            c.get("passes_to_target") is not None
            or c["status"] != RunStatus.REACHED
            or passes_per_epoch(c["n"], record["settings"]["epoch_definition"]) == 1
        )
        if c["n"] > 1 and c["run"] in curves and not c["run"].startswith("seq-") and priced:
            runs.append(
                (
                    c["run"],
                    c["mode"],
                    c["n"],
                    {**common, "seed": c["seed"]},
                    {
                        "status": c["status"],
                        "epochs": c["epochs"],
                        "final_val_loss": c.get("final_val_loss"),
                        "passes_to_target": c.get("passes_to_target"),
                    },
                    curves[c["run"]]["val_loss"],
                )
            )
    return runs


def _probe_runs(record: dict) -> list:
    """The edge search's probes (record_runs), each at its own lr."""
    sweep = record.get("lr_search") or {}
    return [
        (
            p["run"],
            policies.STRONG,
            1,
            {
                "base_lr": p["lr"],
                "max_epochs": sweep["epochs"],
                "target_loss": 0.0,
                "seed": p["seed"],
                "stall_patience": sweep["patience"],
                "collapse_patience": 0,
            },
            None,
            p["val_losses"],
        )
        for p in sweep.get("probes") or []
    ]


def import_record(record: dict, runs_folder: Path, source: str, say=print) -> list:
    """Ledger entries of the record's runs, each checked: settings as the study builds them
    now, and its outcome replayed under its own stopping rules."""
    probe = StudyRunner(runs_folder, runs_folder / "train.yaml", None)
    machine = {k: record["environment"].get(k) for k in ("cpu", "onednn_isa", "rendering")}
    revision = record["provenance"]["revision"]
    entries, skipped = [], []
    for name, mode, n, settings, result, vals in record_runs(record):
        request = probe._request(probe.ask(name, mode, n, {**settings, **OLD_STALL}))
        if not request["data"]:
            raise UserError(
                f"{request['config']['data_path']} (the data {runs_folder / 'train.yaml'} names) does not "
                f"exist from here; run this from the folder the study runs in"
            )
        config = request["config"]
        differs = [
            k
            for k, v in record["settings"].items()
            if k not in ledger.NOT_IN_KEY + ("seed", "base_lr") and _plain(config.get(k)) != _plain(v)
        ]
        if differs:
            raise UserError(
                f"{source}: its runs' settings differ from {runs_folder / 'train.yaml'} in "
                f"{', '.join(differs)}; this record cannot be imported into this study"
            )
        entry = ledger.entry_of(
            name,
            mode,
            n,
            settings["seed"],
            request["launcher"],
            "",
            request["data"],
            config,
            dict(result or {"status": None, "epochs": len(vals)}, time_to_target_s=None, seconds=None),
            None,
            [math.inf if v is None else v for v in vals],
            machine,
            revision,
            source,
            # a record from before the stack was recorded has no Keras: ledger.stack_of
            stack=record["environment"] if record["environment"].get("keras") else None,
        )
        entry["finished"] = record["provenance"]["generated"]  # no later than the record that holds it
        own = ledger.replay(entry, entry["stopping"])
        if own is None or (result is not None and own != (result["status"], result["epochs"])):
            skipped.append(f"{name} (recorded {result and (result['status'], result['epochs'])}, replayed {own})")
            continue
        entry["result"]["status"], entry["result"]["epochs"] = own
        entries.append(entry)
    for s in skipped:
        say(f"not imported: {s}: its curve does not replay to its recorded outcome")
    return entries


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


@command()
def main(argv=None) -> int:
    ap = parser(__doc__, "python -m deepdensity.study.ledger_import")
    ap.add_argument("record", help="a study.json of a paper study (git show REV:reports/study.json > FILE)")
    ap.add_argument(
        "--runs", required=True, help="the runs folder of the study that will use them (its train.yaml, data.h5)"
    )
    ap.add_argument("--source", required=True, help="where the record came from, kept in each entry")
    ap.add_argument("--out", required=True, help="the ledger file to append to")
    args = ap.parse_args(argv)
    record = json.loads(Path(args.record).read_text())
    if record.get("format") != FORMAT:
        raise UserError(f"{args.record} is not a study record of format {FORMAT} (got {record.get('format')!r})")
    entries = import_record(record, Path(args.runs), args.source)
    book = ledger.Ledger(Path(args.out))
    known = {(e["key"], json.dumps(e["stopping"], sort_keys=True), e["source"]) for e in book.entries}
    new = [e for e in entries if (e["key"], json.dumps(e["stopping"], sort_keys=True), e["source"]) not in known]
    for e in new:
        book.append(e)
    print(f"{len(new)} run(s) of {args.record} added to {args.out} ({len(entries) - len(new)} already there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
