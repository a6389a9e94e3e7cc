"""docs/ENGINE.md and docs/ADMISSION.md: readable (no line over the limit outside code blocks), every
behaviour a section with its upstream file, its tests and its status on a real cluster, and every test
they name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.stackconfig import ROOT

PAGES = ("docs/ENGINE.md", "docs/ADMISSION.md")
LONGEST_LINE = 400
FIELDS = ("**Upstream:**", "**Pinned by:**", "**On a real cluster:**")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def sections(text: str) -> dict[str, str]:
    """Each `### ` section's body by its heading."""
    parts = re.split(r"^### (.+)\n", text, flags=re.MULTILINE)
    return {parts[i]: re.split(r"^## ", parts[i + 1], flags=re.MULTILINE)[0] for i in range(1, len(parts), 2)}


def named_tests(text: str) -> list[tuple[str | None, str]]:
    """(file or None, test name) for every test a page names: `path::name`, `::name` (the last path
    named before it), or a bare `test_...` name."""
    found: list[tuple[str | None, str]] = []
    last: str | None = None
    for match in re.finditer(r"`((?:tests/[\w/]+\.py)?)(?:::)?(test_\w+)?`", text):
        path, name = match.group(1) or None, match.group(2)
        if path:
            last = path
        if name:
            found.append((path or (last if "::" in match.group(0) else None), name))
    return found


@pytest.mark.parametrize("page", PAGES)
def test_no_line_outside_code_blocks_is_longer_than_the_limit(page: str) -> None:
    long = [line[:60] for line in prose_lines((ROOT / page).read_text()) if len(line) > LONGEST_LINE]
    assert long == []


@pytest.mark.parametrize("page", PAGES)
def test_no_table_row_is_a_paragraph(page: str) -> None:
    rows = [line for line in prose_lines((ROOT / page).read_text()) if line.startswith("|")]
    assert [row[:60] for row in rows if len(row) > 250] == []


def test_every_engine_behaviour_has_its_upstream_tests_and_real_cluster_status() -> None:
    found = sections((ROOT / "docs/ENGINE.md").read_text())
    assert len(found) >= 90  # one section per behaviour (98 when written)
    missing = {heading: [f for f in FIELDS if f not in body] for heading, body in found.items()}
    assert {heading: fields for heading, fields in missing.items() if fields} == {}


def test_every_engine_behaviour_names_a_test_and_a_status() -> None:
    text = (ROOT / "docs/ENGINE.md").read_text()
    for heading, body in sections(text).items():
        pinned = re.search(r"\*\*Pinned by:\*\*\s+(.+?)(?=\n- \*\*|\n\n)", body, re.DOTALL)
        status = re.search(r"\*\*On a real cluster:\*\* (\S.*)", body)
        assert pinned and pinned.group(1).strip(), heading  # a test, or "none" and why
        assert status, heading


def test_every_admission_part_names_its_upstream_code() -> None:
    found = sections((ROOT / "docs/ADMISSION.md").read_text())
    assert "PyTorchJob pods" in found and "Pod Security" in found
    assert {heading for heading, body in found.items() if "**Upstream:**" not in body} == set()


def test_the_engine_intro_keeps_the_pins_the_tier_ran() -> None:
    intro = (ROOT / "docs/ENGINE.md").read_text().split("\n## ", 1)[0]
    for pin in ("v3.274.1", "v4.25.0", "v1.33.13", "v1.9.4"):
        assert pin in intro


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^(async )?def {name}\(", path.read_text(), re.MULTILINE) is not None


@pytest.mark.parametrize("page", PAGES)
def test_every_test_a_page_names_exists(page: str) -> None:
    tests = sorted((ROOT / "tests").rglob("test_*.py"))
    missing = []
    for path, name in named_tests((ROOT / page).read_text()):
        where = [ROOT / path] if path else tests
        if not (where[0].is_file() if path else True) or not any(_defines(p, name) for p in where):
            missing.append(f"{path or '*'}::{name}")
    assert missing == []
