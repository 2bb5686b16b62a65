"""What the study's reports share: number and table formatting, the cells of one (mode, N),
what the study cost and what set its target. Their text is worded in deepdensity/study/templates
(utils/templates.py)."""

from __future__ import annotations

import csv
import math
import re
import textwrap
from pathlib import Path

from deepdensity.study.core.cells import median_time


def fmt(x, digits=2, missing="NaN") -> str:
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def md_table(header, rows) -> str:
    """A Markdown table, cells as given. Not tabulate's: it pads every column to its widest cell,
    and an evidence cell can run to hundreds of characters."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# A report's prose is wrapped to this width, so that a terminal shows it as written; tables,
# headings and code keep their lines (a Markdown table row cannot be broken).
PROSE_WIDTH = 110
_KEEP = re.compile(r"^(\||#|    |```)")
_BLOCK_START = re.compile(r"^([-+*] |\d+[.)] |#|>|\|)")


def wrap_prose(md: str, width: int = PROSE_WIDTH) -> str:
    """Markdown with each prose line longer than `width` wrapped at spaces: a list item's lines
    after its first indented under its text; table rows, headings, indented and fenced code as
    they are. The rendered Markdown reads the same (a paragraph's line breaks are spaces)."""
    out, fenced = [], False
    for line in md.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or len(line) <= width or _KEEP.match(line):
            out.append(line)
            continue
        lead = re.match(r"^(\s*(?:[-*] |\d+\. )?)", line).group(1)
        wrapped = textwrap.wrap(
            line, width, subsequent_indent=" " * len(lead), break_long_words=False, break_on_hyphens=False
        )
        for i, part in enumerate(wrapped):
            # a line may not begin with what Markdown reads as a list, a heading, a quote or a
            # table ('+ c log2 n' became a bullet): its first word goes back up a line
            while i and _BLOCK_START.match(part.strip() + " "):
                head, _, part = part.strip().partition(" ")
                out[-1] += " " + head
                part = " " * len(lead) + part if part else ""
            if part:
                out.append(part)
    return "\n".join(out)


def top_level_parts(text: str, sep: str = "; ") -> list:
    """`text` split at each `sep` outside parentheses: the items of a judge's evidence line
    ('N = 2: 3 of 8 missed (38%, 95% CI 0.09-0.76): inconclusive; N = 4: ...')."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        depth = max(0, depth + (ch == "(") - (ch == ")"))
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i = i + len(sep)
            continue
        i += 1
    parts.append(text[start:])
    return [p for p in parts if p]


def write_csv(path: Path, header, rows) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def cells_at(cells, mode, n) -> list:
    """The cells (one per seed) of `mode` at N = `n`."""
    return [c for c in cells if c.mode == mode and c.n == n]


def time_range(cells, mode, n) -> str:
    """Median time to target over the seeds and its range, or 'not reached'."""
    cs = cells_at(cells, mode, n)
    times = [c.time_to_target_s for c in cs]
    med = median_time(times)
    if med is None:
        return "not reached" if cs else ""
    return f"{med:.1f}" + (f" ({min(times):.1f}-{max(times):.1f})" if len(times) > 1 else "")


def epochs_listing(cells, mode, n, short: bool = False) -> str:
    """Epochs to target per seed, or '- (status, epochs run)' for a seed that missed; `short`:
    '-c3' (STATUS_LETTER and epochs run), so that 24 seeds fit a line."""
    return ", ".join(
        str(c.epochs_to_target)
        if c.reached
        else f"-{STATUS_LETTER.get(c.status, c.status)}{c.epochs}"
        if short
        else f"- ({c.status}, {c.epochs})"
        for c in cells_at(cells, mode, n)
    )


# a missed seed in the short epochs listing, by how it ended (scaling/rules.py RunStatus)
STATUS_LETTER = {"collapsed": "c", "stalled": "s", "max_epochs": "m", "diverged": "d"}


def passes_listing(cells, mode, n) -> str:
    """Passes to target per seed (to a pass's fraction where it was validated inside one), '-' where it missed."""
    return ", ".join(
        f"{c.passes_to_target:.4g}" if c.reached and c.passes_to_target is not None else "-"
        for c in cells_at(cells, mode, n)
    )


def cost_line(p: dict, besides: str) -> str:
    """What the study cost, from its record's provenance `p`: this invocation, and every run
    behind the report on its own clock, which is what the study costs to train here from
    nothing (`besides`: the runs past the cells counted too, where they ran)."""
    wall = p["runs_minutes"] / max(1, p["parallel_runs"])
    return (
        f"This invocation took {p['wall_minutes']} min, trained {p['trained']} run(s) and reused {p['reused']} "
        f"finished earlier, {p['parallel_runs']} at a time. The runs behind this report took "
        f"{p['runs_minutes']} min on their own clocks: training them all here from "
        f"nothing takes about {f'{wall / 60:.1f} h' if wall >= 90 else f'{wall:.0f} min'} at "
        f"{p['parallel_runs']} at a time, {besides} included where they ran."
    )


def target_source(record: dict, epochs: int) -> str:
    """What set the target, as a report says it."""
    cal = record.get("calibration") or {"source": "first seed"}
    if cal["source"] == "preset":
        return "fixed by the preset"
    if cal["source"] == "calibration seeds":
        return (
            f"the median of what the sequential runs of calibration seeds {', '.join(map(str, cal['seeds']))} "
            f"(seeds no cell uses) reach after {epochs} epochs ({', '.join(f'{v:.6g}' for v in cal['losses'])})"
        )
    return (
        f"what the first seed's sequential run reaches after {epochs} epochs, so that that seed reaches it by "
        f"construction"
    )
