"""Markdown for the generated pages: tables with short cells, and the heading slugs links use."""

from __future__ import annotations

import re
from collections.abc import Sequence


def cell(text: object) -> str:
    """One table cell: on one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = [f"| {' | '.join(head)} |", f"|{'|'.join('---' for _ in head)}|"]
    lines += [f"| {' | '.join(cell(value) for value in row)} |" for row in rows]
    return "\n".join(lines) + "\n"


def code(value: object) -> str:
    """A value in backticks (a value holding a backtick is written with double ones)."""
    text = str(value)
    return f"``{text}``" if "`" in text else f"`{text}`"


def slug(title: str) -> str:
    """The anchor mkdocs (python-markdown's toc) gives a heading: lower case, punctuation dropped,
    spaces to '-'."""
    text = re.sub(r"[^\w\s-]", "", title.lower()).strip()
    return re.sub(r"[-\s]+", "-", text)
