"""The documentation's pages: README.md, CONTRIBUTING.md and every Markdown page under docs/."""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]


def page(relative: str) -> str:
    """A page's text, by its path from the repository's root."""
    return (ROOT / relative).read_text()


def headings(text: str) -> list[str]:
    """The page's Markdown headings (outside fenced blocks), as written."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+?)\s*#*$", line)):
            found.append(m.group(1))
    return found


def anchors(text: str) -> set[str]:
    """The ids the site (Python-Markdown's toc) gives the page's headings: `code` and links reduced
    to their text, then slugified; a repeated slug gets `_1`, `_2`, ..."""
    seen: dict[str, int] = {}
    ids = set()
    for heading in headings(text):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = slugify(plain, "-")
        ids.add(f"{slug}_{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return ids


def section(text: str, title: str) -> str:
    """The text under the heading `title`, up to the next heading of the same or a higher level."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", text, re.MULTILINE)
    assert match, f"no heading {title!r}"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(text, match.end())
    return text[match.end() : end.start() if end else len(text)]


def table(text: str, header: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first Markdown table whose header row starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def shell_blocks(text: str) -> list[str]:
    """The contents of the page's ```sh blocks."""
    return re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def paragraphs(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each prose paragraph: consecutive non-blank lines outside fenced
    blocks, tables, headings and admonition markers; a list item starts a new one."""
    found: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start, fenced = 0, False

    def close() -> None:
        if current:
            found.append((start, list(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
            continue
        if fenced or not stripped or line.startswith("#") or stripped.startswith(("|", "!!!", "<!--", "---")):
            close()
            continue
        if re.match(r"([-*+]|\d+\.) ", stripped):
            close()
        if not current:
            start = number
        current.append(line)
    close()
    return found
