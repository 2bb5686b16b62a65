"""The two kinds of study, each one object, and `deepdensity report --from DIR` (python -m
deepdensity report), which renders a study's reports again from its record (study.json) alone,
by the record's kind; with --check, into a temporary folder and compared with the folder's own.

Both kinds run one pipeline (plan, run, clock, record, reports) and differ in what they ask and
how they answer it. PAPER is the paper's protocol (its checks and Fig. 1, run/design.paper_parts;
report/paper_report.py's REPORT.md, claims and Tables I-II); BEYOND the modes past the paper, the
data filter and the batch sweep (run/beyond.beyond_parts; report/report_beyond.py).
Which kind a study or a record is, is decided here alone (of_study, of_record); `make repro`
(repro.run_study) and `deepdensity report` ask the kind to finish a study, render its reports or
name its text outputs."""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from deepdensity.scaling import policies
from deepdensity.study.core import clocks, ledger
from deepdensity.study.record import FORMAT, study_record
from deepdensity.study.report import paper_report, report_beyond
from deepdensity.study.run import beyond, design
from deepdensity.utils.args import parser
from deepdensity.utils.errors import StudyError, command
from deepdensity.utils.files import check_own_folder, json_with, mark_folder, write_atomic


def rerender(folder: Path, out: Path, mark: bool = False) -> list:
    """Render the reports of `folder`/study.json into `out`; returns the claims. `mark`: make
    `out` a marked reports folder first, once the record has been read whole."""
    record_path = folder / "study.json"
    if not record_path.is_file():
        raise StudyError(f"{record_path} does not exist: --from takes a reports folder written by `make repro`")
    redo = "restore it from git or a copy, or run the study again with `make repro`"
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise StudyError(f"{record_path} is damaged (not UTF-8 text: {e.reason} at byte {e.start}); {redo}") from None
    except ValueError as e:  # json.JSONDecodeError: cut short, or not JSON at all
        raise StudyError(f"{record_path} is damaged (not whole JSON: {e}); {redo}") from None
    if not isinstance(record, dict):
        raise StudyError(f"{record_path} is damaged (a JSON {type(record).__name__}, not a mapping); {redo}")
    if record.get("format") != FORMAT:
        raise StudyError(
            f"{record_path} is not a study record of format {FORMAT} (got {record.get('format')!r}); "
            f"run the study again with `make repro`"
        )
    if not clocks.is_current(record.get("timing")):
        clock = (record.get("timing") or {}).get("clock_version")
        raise StudyError(
            f"{record_path} holds a clock of version {clock!r}; this code reads version "
            f"{clocks.CLOCK_VERSION} only: run the study again with `make repro`"
        )
    if mark:
        mark_folder(out, "reports")
    return of_record(record).render(out, record, folder)


def text_outputs(folder: Path) -> tuple:
    """The text reports a folder's record renders (its kind's: the default study's, or the beyond study's)."""
    return of_record(json.loads((folder / "study.json").read_text())).text_outputs


def holds_a_study_record(reports: Path) -> bool:
    """Is `reports` a study's reports folder written before folders were marked (its study.json,
    a record with its cells)? Reports folders are marked since (.gitignore keeps the marks out of
    the committed reports/)."""
    return json_with(reports / "study.json", ("cells",))


def differences(committed: Path, rendered: Path) -> list:
    """Unified diffs of the text reports that differ between two folders."""
    out = []
    for name in text_outputs(committed):
        a, b = committed / name, rendered / name
        old = a.read_text().splitlines(keepends=True) if a.exists() else []
        new = b.read_text().splitlines(keepends=True) if b.exists() else []
        if old != new:
            out.append("".join(difflib.unified_diff(old, new, f"{a} (committed)", f"{b} (rendered now)")))
    return out


@command(os_hint="pass another --out folder")
def main(argv=None) -> int:
    ap = parser(
        "Render a study's reports again from its record (study.json), without training.", "python -m deepdensity report"
    )
    ap.add_argument("--from", dest="folder", required=True, help="a reports folder holding study.json, e.g. reports/")
    ap.add_argument("--out", help="where to write (default: the --from folder itself)")
    ap.add_argument(
        "--check",
        action="store_true",
        help="render into a temporary folder and compare with --from's reports; exit 1 if they differ",
    )
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            rerender(folder, Path(tmp) / folder.name)
            diffs = differences(folder, Path(tmp) / folder.name)
        for d in diffs:
            sys.stdout.write(d)
        print(
            f"{len(diffs)} report(s) differ from what the code renders"
            if diffs
            else f"the reports in {folder} are what the code renders from its study.json"
        )
        return 1 if diffs else 0
    out = check_own_folder(args.out, "--out", "reports", holds_a_study_record) if args.out else folder
    rerender(folder, out, mark=bool(args.out))
    print(f"reports rendered from {folder / 'study.json'} into {out}")
    return 0


@dataclass(frozen=True)
class StudyEnd:
    """What a study holds when its cells are assembled (repro.run_study), for its kind to finish it."""

    s: Any  # session.StudyRun
    proto: Any  # session.Protocol
    book: Any  # outcomes.Book
    cells: list
    timing: dict
    modelled: Callable  # (mode, n) -> seconds an epoch on this study's clock
    stopped: str  # why the sequential design stopped adding seeds
    sweep: Optional[dict]  # the lr search (the edge of stability), if this study ran it
    checked: Optional[dict]  # the stall check, if the preset asks for one
    options: Any  # session.StudyOptions


@dataclass(frozen=True)
class StudyKind:
    """A kind of study, in the one pipeline both kinds share (plan, run, clock, record, reports):
    its name (the record's "kind"), what it asks besides the cells (`parts`: the run stage, from
    the StudyEnd to the record's own keys and the runs besides the cells') and how it answers
    (`render_reports`: a record's reports into a folder, returning the claims judged; the text
    files it writes, `text_outputs`)."""

    name: str
    parts: Callable
    render_reports: Callable
    text_outputs: tuple
    reads_ledger: bool = False  # whether its reports read the ledger's entries (where each run came from)

    def finish(self, end: StudyEnd) -> None:
        """The study's record written to its staging folder (study.json) and its reports rendered there."""
        own, other_runs = self.parts(end)
        record = study_record(self.name, end, own, other_runs)
        _write_record(end.s.out, record)
        for c in self.render_reports(end.s.out, record, end.s.runner.ledger.entries):
            print(f"  {c['verdict']:>13}: {c['claim']}")

    def render(self, out: Path, record: dict, folder: Path) -> list:
        """The reports of `record` (read from `folder`, beside its ledger) rendered into `out`;
        returns the claims judged (the paper's; a beyond study answers in answers.json)."""
        entries = ledger.read_entries(folder / ledger.LEDGER_FILE) if self.reads_ledger else None
        return self.render_reports(out, record, entries)


PAPER = StudyKind(
    "paper", design.paper_parts, paper_report.render_reports, paper_report.TEXT_OUTPUTS, reads_ledger=True
)
BEYOND = StudyKind("beyond", beyond.beyond_parts, report_beyond.render_reports, report_beyond.TEXT_OUTPUTS)


def of_study(study) -> StudyKind:
    """A preset's kind: BEYOND when it runs a mode past the paper's (adaptive, local), else PAPER."""
    return BEYOND if policies.goes_beyond_the_paper(study.modes) else PAPER


def of_record(record: dict) -> StudyKind:
    """A record's kind, by its "kind": BEYOND's name, else PAPER (as every record has been read)."""
    return BEYOND if record.get("kind") == BEYOND.name else PAPER


def _write_record(out: Path, record: dict) -> None:
    write_atomic(out / "study.json", json.dumps(record, indent=1))
