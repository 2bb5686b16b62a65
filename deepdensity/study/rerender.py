"""`deepdensity report --from DIR` (python -m deepdensity report): a study's reports rendered
again from its record (study.json) alone, by the record's kind (kinds.py: the default study's,
report/paper_report.py, or the beyond study's, report/report_beyond.py); with --check, into a temporary folder and
compared with the folder's own."""
from __future__ import annotations

import difflib
import json
import sys
import tempfile
from pathlib import Path

from deepdensity.study import kinds
from deepdensity.study.core import clocks
from deepdensity.utils.errors import command, StudyError
from deepdensity.study.record import FORMAT
from deepdensity.utils.args import parser
from deepdensity.utils.files import check_own_folder, json_with, mark_folder


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
    except ValueError as e:         # json.JSONDecodeError: cut short, or not JSON at all
        raise StudyError(f"{record_path} is damaged (not whole JSON: {e}); {redo}") from None
    if not isinstance(record, dict):
        raise StudyError(f"{record_path} is damaged (a JSON {type(record).__name__}, not a mapping); {redo}")
    if record.get("format") != FORMAT:
        raise StudyError(f"{record_path} is not a study record of format {FORMAT} (got {record.get('format')!r}); "
                         f"run the study again with `make repro`")
    if not clocks.is_current(record.get("timing")):
        clock = (record.get("timing") or {}).get("clock_version")
        raise StudyError(f"{record_path} holds a clock of version {clock!r}; this code reads version "
                         f"{clocks.CLOCK_VERSION} only: run the study again with `make repro`")
    if mark:
        mark_folder(out, "reports")
    return kinds.of_record(record).render(out, record, folder)


def text_outputs(folder: Path) -> tuple:
    """The text reports a folder's record renders (its kind's: the default study's, or the beyond study's)."""
    return kinds.of_record(json.loads((folder / "study.json").read_text())).text_outputs()


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
    ap = parser("Render a study's reports again from its record (study.json), without training.",
                "python -m deepdensity report")
    ap.add_argument("--from", dest="folder", required=True, help="a reports folder holding study.json, e.g. reports/")
    ap.add_argument("--out", help="where to write (default: the --from folder itself)")
    ap.add_argument("--check", action="store_true",
                    help="render into a temporary folder and compare with --from's reports; exit 1 if they differ")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            rerender(folder, Path(tmp) / folder.name)
            diffs = differences(folder, Path(tmp) / folder.name)
        for d in diffs:
            sys.stdout.write(d)
        print(f"{len(diffs)} report(s) differ from what the code renders" if diffs else
              f"the reports in {folder} are what the code renders from its study.json")
        return 1 if diffs else 0
    out = check_own_folder(args.out, "--out", "reports", holds_a_study_record) if args.out else folder
    rerender(folder, out, mark=bool(args.out))
    print(f"reports rendered from {folder / 'study.json'} into {out}")
    return 0
