"""REPORT.md answers on its first screen (issue 56): its first table has a row per claim of
claims.json, in order, each cell short enough to read at a glance, before the claims' full
evidence. Read from the committed reports, which test_rerender holds to what the code renders."""

import json

import pytest

from tests.support import ROOT

LONGEST_CELL = 200  # characters: a cell a reader takes in without scrolling
FOLDERS = [ROOT / "reports", ROOT / "tests" / "study" / "data" / "tiny-reports"]


def first_table(text: str) -> list:
    """The rows (lists of cells) of the first markdown table in `text`, header and rule dropped."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return table[2:]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.relative_to(ROOT).as_posix())
def test_the_first_table_is_one_short_row_per_claim_before_the_evidence(folder):
    if not (folder / "REPORT.md").is_file():
        pytest.skip(f"no report committed in {folder}")
    text = (folder / "REPORT.md").read_text()
    claims = json.loads((folder / "claims.json").read_text())
    rows = first_table(text)
    header = text[text.index("## The answer") :].split("\n|", 1)[1].split("\n", 1)[0]
    verdict = [cell.strip() for cell in header.strip("|").split(" | ")].index("verdict")
    assert [row[0] for row in rows] == [c["claim"] for c in claims]
    assert [row[verdict] for row in rows] == [f"**{c['verdict']}**" for c in claims]
    assert max(len(cell) for row in rows for cell in row) <= LONGEST_CELL
    assert text.index("## The answer") < text.index("## Claims")


def test_the_beyond_reports_first_table_is_one_short_row_per_question():
    folder = ROOT / "reports" / "beyond"
    if not (folder / "REPORT.md").is_file():
        pytest.skip("no beyond study committed")
    text = (folder / "REPORT.md").read_text()
    answers = json.loads((folder / "answers.json").read_text())
    rows = first_table(text.split("## The answer", 1)[1])
    questions = [*answers["not_exercised"], *answers["remedies"], *answers["filter"], *answers["sweep"]]
    assert len(rows) == len(questions) and all(q in row[0] for q, row in zip(questions, rows))
    assert max(len(cell) for row in rows for cell in row) <= LONGEST_CELL
    assert text.index("## The answer") < text.index("| comparison |")


def test_a_long_cell_in_the_first_table_is_found():
    """The check above reads the table it means: a report whose first table is the full claims
    table (the layout before) fails it."""
    long = "| claim | ours |\n|---|---|\n| Strong | " + "N = 1: 0 of 8 missed; " * 20 + " |\n"
    assert max(len(cell) for row in first_table("# R\n\n" + long) for cell in row) > LONGEST_CELL


def test_no_committed_report_or_record_names_a_folder_of_the_machine_that_made_it():
    """reports/ and the golden fixture, the records (study.json, ledger.jsonl) included: a report
    shows a path by its last two parts, a record keeps the paths a study ran in that way."""
    from deepdensity.study.record import machine_paths

    committed = [
        p
        for folder in (ROOT / "reports", ROOT / "tests" / "study" / "data")
        for p in folder.rglob("*")
        if p.is_file() and p.suffix in (".md", ".json", ".jsonl", ".csv")
    ]
    assert {"study.json", "ledger.jsonl", "REPORT.md"} <= {p.name for p in committed}
    named = {p.relative_to(ROOT).as_posix(): machine_paths(p.read_text()) for p in committed}
    assert {p: paths for p, paths in named.items() if paths} == {}


LONGEST_LINE = 400  # characters: issue 68's bound for any line of REPORT.md


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.relative_to(ROOT).as_posix())
def test_a_terminal_shows_every_line_and_each_claim_has_a_section_of_short_tables(folder):
    """No line of REPORT.md past 400 characters (before, the Claims table's rows ran past 2,000),
    and each claim of claims.json, in order, a section of its own: its verdict, then a table of
    its cells, each row the cell's evidence beside whether more seeds could change it."""
    if not (folder / "REPORT.md").is_file():
        pytest.skip(f"no report committed in {folder}")
    text = (folder / "REPORT.md").read_text()
    claims = json.loads((folder / "claims.json").read_text())
    assert max(len(line) for line in text.splitlines()) <= LONGEST_LINE
    section = text.split("## Claims", 1)[1].split("\n## ", 1)[0]
    heads = [line for line in section.splitlines() if line.startswith("### ")]
    assert heads == [f"### {c['claim']}: **{c['verdict']}**" for c in claims]
    for claim, part in zip(claims, section.split("\n### ")[1:]):
        assert "| cell | ours |" in part, f"no table of cells under {claim['claim']}"
        cells = first_table(part.split("| cell | ours |", 1)[1].join(["| cell | ours |", ""]))
        assert cells, claim["claim"]
        # each cell's evidence is the judge's own words for it, after its name
        assert all(f"{row[0]}: {row[1]}" in claim["ours"] for row in cells), claim["claim"]
