"""Docs that cannot drift from the code: the README's help listing is the command table's,
the resumable settings in docs/training.md are the code's, and docs/layout.md names
every module of the package (and no module that is gone). A change to one without the other
fails here, with the text to paste."""
import re

from deepdensity import cli
from deepdensity.training.runs import RESUMABLE
from tests.support import ROOT

README = ROOT / "README.md"
LAYOUT = ROOT / "docs" / "layout.md"
PACKAGE = ROOT / "deepdensity"


def fenced_after(text: str, first_line: str) -> str:
    """The rest of the code block whose first line is `first_line`."""
    start = text.index("```\n" + first_line + "\n") + len("```\n" + first_line + "\n")
    return text[start:text.index("```", start)]


def test_the_readme_help_listing_is_the_command_table():
    assert fenced_after(README.read_text(), "$ deepdensity --help") == cli.usage() + "\n"


def test_the_resumable_settings_in_the_docs_are_the_codes():
    text = (ROOT / "docs" / "training.md").read_text()
    start = text.index("<!-- resumable settings:")
    block = text[text.index("\n", start) + 1:text.index("<!-- end of resumable settings -->")]
    want = "".join(f"  - `{key}`: {why}\n" for key, why in RESUMABLE.items())
    assert block.rstrip(" ") == want, f"docs/training.md should list:\n{want}"


def layout_block() -> str:
    text = LAYOUT.read_text()
    return fenced_after(text[text.index("# Layout"):], "train.py                  thin entry: python train.py / "
                                                        "horovodrun ... python train.py")


def test_the_readme_layout_names_every_module():
    layout = layout_block()
    modules = sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    missing = [str(m) for m in modules if not re.search(rf"(?<![\w.]){re.escape(m.name)}", layout)]
    assert missing == [], f"docs/layout.md does not name {', '.join(missing)}"


def test_the_readme_layout_names_no_module_that_is_gone():
    names = set(re.findall(r"\b(\w+\.py)\b", layout_block()))
    present = {p.name for p in PACKAGE.rglob("*.py")} | {p.name for p in (ROOT / "tests").rglob("*.py")} | {"train.py"}
    assert sorted(names - present) == []
