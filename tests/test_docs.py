"""Docs that cannot drift from the code: the help listing in docs/commands.md is the command table's,
the resumable settings in docs/training.md are the code's, and docs/layout.md names
every module of the package (and no module that is gone), and the Slurm plan docs/cluster.md
shows is what the committed study record gives. A change to one without the other
fails here, with the text to paste."""

import re
from pathlib import Path

from deepdensity import cli
from deepdensity.training.runs import RESUMABLE
from tests.support import ROOT

README = ROOT / "README.md"
LAYOUT = ROOT / "docs" / "layout.md"
PACKAGE = ROOT / "deepdensity"


def fenced_after(text: str, first_line: str) -> str:
    """The rest of the code block whose first line is `first_line`."""
    start = text.index("```\n" + first_line + "\n") + len("```\n" + first_line + "\n")
    return text[start : text.index("```", start)]


def test_the_help_listing_in_the_docs_is_the_command_table():
    assert fenced_after((ROOT / "docs" / "commands.md").read_text(), "$ deepdensity --help") == cli.usage() + "\n"


def test_the_resumable_settings_in_the_docs_are_the_codes():
    text = (ROOT / "docs" / "training.md").read_text()
    start = text.index("<!-- resumable settings:")
    block = text[text.index("\n", start) + 1 : text.index("<!-- end of resumable settings -->")]
    want = "".join(f"  - `{key}`: {why}\n" for key, why in RESUMABLE.items())
    assert block.rstrip(" ") == want, f"docs/training.md should list:\n{want}"


def layout_block() -> str:
    text = LAYOUT.read_text()
    return fenced_after(
        text[text.index("# Layout") :],
        "train.py                  thin entry: python train.py / horovodrun ... python train.py",
    )


def layout_sections(block: str = "") -> dict:
    """The layout's text by the package folder it describes: a line indented two spaces opens a
    section, named by its first word where that is a folder (`data/`, `perf/bench.py` -> `perf`)
    and "" (the package's top) where it is a file; deeper-indented lines continue it."""
    sections: dict = {}
    current = None
    for line in (block or layout_block()).splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            first = line.split()[0]
            current = first.split("/")[0] if "/" in first else ""
        elif not line.startswith("   "):
            current = None  # train.py, deepdensity/: outside the package's folders
        if current is not None:
            sections[current] = sections.get(current, "") + line + "\n"
    return sections


def package_modules() -> list:
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def test_the_layout_names_every_module_in_its_own_folders_section():
    sections = layout_sections()
    missing = [
        str(m)
        for m in package_modules()
        if not re.search(rf"(?<![\w.]){re.escape(m.name)}", sections.get(m.parts[0] if len(m.parts) > 1 else "", ""))
    ]
    assert missing == [], f"docs/layout.md does not name {', '.join(missing)} in its folder's section"


def test_the_layout_names_no_module_that_is_gone():
    gone = []
    for folder, text in layout_sections().items():
        where = PACKAGE / folder
        present = {p.name for p in (where.rglob("*.py") if folder else where.glob("*.py"))}
        gone += [f"{folder}/{name}" if folder else name for name in set(re.findall(r"\b(\w+\.py)\b", text)) - present]
    assert sorted(gone) == []


def test_the_section_parser_tells_a_module_named_in_the_wrong_folder():
    """The check above would pass a name that exists elsewhere; here cli.py is under data/
    only, so a training/cli.py would be reported missing."""
    block = "  data/                   cli.py, cubes.py\n                          more.py\n  config.py  x\n"
    sections = layout_sections(block)
    assert sections["data"].count("cli.py") == 1 and "more.py" in sections["data"]
    assert "cli.py" not in sections.get("", "") and "config.py" in sections[""]


def test_the_slurm_plan_in_the_cluster_docs_is_what_the_committed_record_gives(tmp_path, monkeypatch):
    """docs/cluster.md shows `repro --executor slurm ... --dry-run` for the default preset: the
    job count comes from the preset, the CPU-hours the last study's runs took from the committed
    reports/study.json. Both change when the study grows, so the doc's lines are compared with
    what the plan prints now for that record (a fresh runs folder: no timing.json, so the clock
    is a job). The job script's lines are the machine's paths and not compared."""
    import json

    from deepdensity.launch.slurm_jobs import SlurmOptions
    from deepdensity.study.core.preset import load_study
    from deepdensity.study.run import slurm_runner

    name, study = load_study("default")
    options = SlurmOptions.parse(study.slurm, ["partition=short", "account=proj42", "time=02:00:00"])
    record = json.loads((ROOT / "reports" / "study.json").read_text())
    monkeypatch.chdir(tmp_path)
    # the plan's count of missing runs, as repro gives it: against the committed ledger
    from deepdensity.study.core.ledger import LEDGER_FILE, read_entries
    from deepdensity.study.plan.missing import missing_runs

    missing = missing_runs(study, read_entries(ROOT / "reports" / LEDGER_FILE), record)
    printed = slurm_runner.plan_lines(
        name, study, options, Path("runs/study-default"), None, False, None, record, len(missing)
    )
    documented = (ROOT / "docs" / "cluster.md").read_text()
    for head in ("  Slurm jobs:", "  Slurm clock job:", "  Slurm cost:"):
        line = next(line for line in printed if line.startswith(head))
        assert line + "\n" in documented, f"docs/cluster.md's {head.strip()!r} line should read:\n{line}"


def readme_answer_rows() -> list:
    """The rows of the README's table under "## The answer", as cells."""
    text = README.read_text()
    section = text[text.index("## The answer") : text.index("\n## ", text.index("## The answer") + 1)]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| the paper's")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_the_readmes_answer_is_the_committed_reports_claims():
    """The README's table of the six claims is reports/claims.json's (claim, the paper's result,
    ours, the verdict), in its order: a study that moves a verdict moves the README with it."""
    import json

    claims = json.loads((ROOT / "reports" / "claims.json").read_text())
    want = [[c["claim"], c["paper"], c["ours_brief"], f"**{c['verdict']}**"] for c in claims]
    assert readme_answer_rows() == want, "README.md's table should read:\n" + "\n".join(
        "| " + " | ".join(row) + " |" for row in want
    )


def test_the_readme_is_one_screen_with_the_answer_and_the_commands_first():
    lines = README.read_text().splitlines()
    first = "\n".join(lines[:40])
    assert len(lines) <= 100
    assert "## The answer" in first and len(readme_answer_rows()) == 6
    assert all(command in first for command in ("make install", "python train.py", "make repro"))
