"""What the study's reports share (report/render.py): prose wrapped for a terminal, tables
left whole, and a judge's evidence split into its items."""

import textwrap

from deepdensity.study.report.render import PROSE_WIDTH, top_level_parts, wrap_prose


def test_long_prose_is_wrapped_and_tables_headings_and_code_are_not():
    long = " ".join(f"word{i}" for i in range(60))  # about 400 characters
    md = "\n".join(
        [
            "# " + long,
            "",
            long,
            "",
            "- " + long,
            "",
            "| " + long + " |",
            "",
            "```",
            long,
            "```",
            "",
            "    " + long,
            "short line",
        ]
    )
    lines = wrap_prose(md).split("\n")
    assert lines[0] == "# " + long and "| " + long + " |" in lines and lines.count(long) == 1, "code kept"
    assert "    " + long in lines and lines[-1] == "short line"
    paragraph = lines[2 : lines.index("", 2)]
    assert len(paragraph) == 4 and all(len(line) <= PROSE_WIDTH for line in paragraph), paragraph
    item = lines.index(next(line for line in lines if line.startswith("- word0")))
    assert lines[item + 1].startswith("  word") and len(lines[item]) <= PROSE_WIDTH, "under the item's text"
    # nothing lost or reordered: the words read back as written (textwrap, an independent reference)
    assert " ".join(wrap_prose(long).split()) == long
    assert wrap_prose(long) == "\n".join(textwrap.wrap(long, PROSE_WIDTH))


def test_a_line_at_the_width_and_a_word_longer_than_it_are_kept():
    at = "x" * PROSE_WIDTH
    assert wrap_prose(at) == at
    path = "tests/" + "y" * 200
    assert wrap_prose(f"see {path} here") == f"see\n{path}\nhere", "a long word is never broken"


def test_evidence_splits_at_top_level_separators_only():
    text = (
        "N = 2: 3 of 8 missed (38%, 95% CI 0.09-0.76): inconclusive; N > 1 is derived (a; b (c; d)); run for real: done"
    )
    assert top_level_parts(text) == [
        "N = 2: 3 of 8 missed (38%, 95% CI 0.09-0.76): inconclusive",
        "N > 1 is derived (a; b (c; d))",
        "run for real: done",
    ]
    assert top_level_parts("") == [] and top_level_parts("one") == ["one"]


def test_no_wrapped_line_begins_as_markdown_would_read_a_list_a_heading_a_quote_or_a_table():
    """A line that began '+ c log2 n' rendered as a bullet and lost its '+'. At every width,
    the words read back as written and no line after the first begins with a block marker."""
    text = (
        "the clock's a + c log2 n fits, the speedup - 1 at N = 2, step 12. then # of ranks > 1 and "
        "| pipes | in prose, 3) a closing count and * a star "
    ) * 3
    for width in range(20, 90):
        lines = wrap_prose(text, width).split("\n")
        assert " ".join(" ".join(lines).split()) == " ".join(text.split()), width
        starts = [
            line
            for line in lines[1:]
            if line.lstrip()[:2] in ("+ ", "- ", "* ", "# ", "> ", "| ")
            or line.lstrip().split(" ")[0].rstrip(".)").isdigit()
            and line.lstrip().split(" ")[0][-1] in ".)"
        ]
        assert starts == [], (width, starts)
