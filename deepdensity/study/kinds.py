"""The two kinds of study, each one object: PAPER (the paper's protocol: record.study_record,
report/paper_report.py's REPORT.md, claims and Tables I-II, figures.py) and BEYOND (the modes past the paper,
the data filter and the batch sweep: beyond.py's experiments, record.beyond_record,
report_beyond.py, beyond_figures.py). Which kind a study or a record is, is decided here alone
(of_study, of_record); `make repro` (repro.run_study) and `deepdensity report` (rerender.py)
ask the kind to finish a study, render its reports or name its text outputs (issue 44).

The operations import their modules when called: `deepdensity report` on a paper record
imports none of the beyond study's."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from deepdensity.scaling import policies


@dataclass(frozen=True)
class StudyEnd:
    """What a study holds when its cells are assembled (repro.run_study), for its kind to finish it."""
    s: Any                      # session.StudyRun
    proto: Any                  # session.Protocol
    book: Any                   # design.Book
    cells: list
    timing: dict
    modelled: Callable          # (mode, n) -> seconds an epoch on this study's clock
    stopped: str                # why the sequential design stopped adding seeds
    sweep: Optional[dict]       # the lr search (the edge of stability), if this study ran it
    checked: Optional[dict]     # the stall check, if the preset asks for one
    options: Any                # session.StudyOptions


class StudyKind:
    """A kind of study: its name (the record's "kind"), and how it finishes a study, renders a
    record's reports and names its text outputs."""
    name: str

    def finish(self, end: StudyEnd) -> None:
        """The study's record written to its staging folder (study.json) and its reports rendered there."""
        raise NotImplementedError

    def render(self, out: Path, record: dict, folder: Path) -> list:
        """The reports of `record` (read from `folder`) rendered into `out`; returns the claims judged."""
        raise NotImplementedError

    def text_outputs(self) -> tuple:
        """The text files render writes; `deepdensity report --check` compares exactly these."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"kinds.{self.name.upper()}"


class _Paper(StudyKind):
    name = "paper"

    def finish(self, end: StudyEnd) -> None:
        from deepdensity.study.record import study_record
        from deepdensity.study.report.paper_report import render_reports
        from deepdensity.study.run.checks import isa_recheck, stack_recheck
        from deepdensity.study.run.runner import unless_not_held
        from deepdensity.study.run.sequential import real_strong_runs
        s, proto, book, runner = end.s, end.proto, end.book, end.options.runner
        real = [] if runner else unless_not_held(lambda: real_strong_runs(s, proto), [])
        isa = None if runner else unless_not_held(lambda: isa_recheck(s, proto, book, end.timing, end.modelled), None)
        stack = None if runner else unless_not_held(
            lambda: stack_recheck(s, proto, book, end.timing, end.modelled, end.options.stack_check), None)
        record = {**study_record(self.name, s, proto, book, end.cells, end.timing, end.sweep, end.stopped, runner),
                  "real_strong": real, "isa_check": isa, "stack_check": stack, "stall_check": end.checked,
                  "pass_seconds": s.runner.ledger.pass_seconds()}
        _write_record(s.out, record)
        claims = render_reports(s.out, record, s.runner.ledger.entries)
        for c in claims:
            print(f"  {c['verdict']:>13}: {c['claim']}")

    def render(self, out: Path, record: dict, folder: Path) -> list:
        from deepdensity.study.core import ledger
        from deepdensity.study.report.paper_report import render_reports
        return render_reports(out, record, ledger.read_entries(folder / ledger.LEDGER_FILE))

    def text_outputs(self) -> tuple:
        from deepdensity.study.report.paper_report import TEXT_OUTPUTS
        return TEXT_OUTPUTS


class _Beyond(StudyKind):
    name = "beyond"

    def finish(self, end: StudyEnd) -> None:
        from deepdensity.study.record import beyond_record
        from deepdensity.study.report.report_beyond import write_beyond_reports
        from deepdensity.study.run.beyond import beyond_parts
        s = end.s
        earlier, filtering, sweep_rows = beyond_parts(s, end.proto, end.cells, end.timing, end.modelled,
                                                      end.options.compare_with)
        record = beyond_record(self.name, s, end.proto, end.book, end.cells, earlier, end.timing, filtering,
                               sweep_rows, end.stopped)
        _write_record(s.out, record)
        write_beyond_reports(s.out, record)

    def render(self, out: Path, record: dict, folder: Path) -> list:
        from deepdensity.study.report.report_beyond import write_beyond_reports
        write_beyond_reports(out, record)
        return []

    def text_outputs(self) -> tuple:
        from deepdensity.study.report.report_beyond import TEXT_OUTPUTS
        return TEXT_OUTPUTS


PAPER, BEYOND = _Paper(), _Beyond()


def of_study(study) -> StudyKind:
    """A preset's kind: BEYOND when it runs a mode past the paper's (adaptive, local), else PAPER."""
    return BEYOND if policies.goes_beyond_the_paper(study.modes) else PAPER


def of_record(record: dict) -> StudyKind:
    """A record's kind, by its "kind": BEYOND's name, else PAPER (as every record has been read)."""
    return BEYOND if record.get("kind") == BEYOND.name else PAPER


def _write_record(out: Path, record: dict) -> None:
    from deepdensity.utils.files import write_atomic
    write_atomic(out / "study.json", json.dumps(record, indent=1))
