"""The Claims section of the default study's REPORT.md, a claim at a time: its verdict under
each clock and definition of failure, and its evidence cell by cell, read off the judge's text."""

from __future__ import annotations

import re

from deepdensity.study.core import clocks
from deepdensity.study.report.render import md_table, top_level_parts

# A cell as the judge names it in its evidence: 'N = 4', 'N = 2 vs weak', '2 x eta'.
_CELL = re.compile(r"^(N = \d+(?: vs [\w ]+)?|\d+ x eta): ")
# a parenthesis closing a claim's evidence, after its last cell: '... p = 0.00019 (one-sided
# Mann-Whitney, Holm over 15 of 15)', '... (not run at N = 32)'
_TRAILING_NOTE = re.compile(r" \(([^()]*(?:\([^()]*\)[^()]*)*)\)$")


def claim_section(c: dict, others: list, first_look: str = "", still_open: tuple = ()) -> str:
    """One claim of the Claims section: its verdict, the paper's words and the rule, the verdict
    under the other clocks and the other definition of failure (and at the first look, where a
    second look followed: `first_look`), then its evidence cell by cell beside whether more
    seeds could change it, the evidence that is no cell's, and the cells still open after both
    looks (`still_open`, report/two_looks.py)."""
    judged = md_table(
        ["judged under", "verdict"],
        [
            [f"{clocks.label(clocks.PAPER)} (the verdict)", f"**{c['verdict']}**"],
            *([["the first look alone (its seeds, 95 %)", first_look]] if first_look else []),
            ["failure = collapsed or non-finite", c["verdict_sensitivity"]],
            *([o.label, c["verdicts"][o.name]] for o in others),
            ["break-even (rho)", c["break_even"]],
        ],
    )
    parts = top_level_parts(c["ours"])
    tail = _TRAILING_NOTE.search(parts[-1]) if parts else None
    if tail and _CELL.match(parts[-1]):  # the claim's own note after its last cell: not that cell's
        parts[-1:] = [parts[-1][: tail.start()], tail.group(1)]
    ours, notes = _by_cell(parts)
    more, more_lead = {}, c["more_seeds"]
    lead, sep, rest = c["more_seeds"].partition(": ")
    if sep and _CELL.match(rest):
        more_lead = lead
        more, loose = _by_cell(top_level_parts(rest))
        more.update(dict.fromkeys(loose, ""))
    blocks = [
        f"### {c['claim']}: **{c['verdict']}**",
        f"- the paper: {c['paper']}\n- the rule: {c['rule']}",
        judged.rstrip("\n"),
    ]
    if ours or more:
        blocks.append(
            md_table(
                ["cell", "ours", "could more seeds change it?"],
                [[cell, ours.get(cell, "-"), more.get(cell, "-")] for cell in {**ours, **more}],
            ).rstrip("\n")
        )
    if notes:
        text = "; ".join(notes)
        blocks.append(f"{text[0].upper()}{text[1:]}.")
    if still_open:
        blocks.append(
            "Still inconclusive after both looks: "
            + "; ".join(still_open)
            + '. The rules give no cell a third look (docs/decision-rules.md, "Second look"): the table\'s '
            "last column says what more seeds could do, not that they will be run."
        )
    if more_lead not in ("yes", "-"):
        blocks.append(f"Could more seeds change it? {more_lead}" + (" (the table's last column)." if more else "."))
    return "\n\n".join(blocks) + "\n"


def _by_cell(parts: list) -> tuple:
    """({cell: its text} of the parts that name a cell, [the parts that do not])."""
    cells, rest = {}, []
    for part in parts:
        cell = _CELL.match(part)
        if cell:
            cells[cell.group(1)] = part[cell.end() :]
        else:
            rest.append(part)
    return cells, rest
