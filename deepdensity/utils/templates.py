"""Text worded by jinja2 templates: the study's reports and plans (deepdensity/study/templates),
where the wording a condition chooses reads as the text it becomes."""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parents[1] / "study" / "templates"

# Markdown and plain text, not HTML: nothing to escape. A field the template names and the
# caller did not pass is an error, not an empty string; block tags take their line's newline and
# indent with them, so that an {% if %} on a line of its own leaves no blank line behind.
ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def fill(template: str, **fields) -> str:
    """deepdensity/study/templates/`template` rendered with `fields`."""
    return ENV.get_template(template).render(fields)
