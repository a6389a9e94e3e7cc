"""examples/<language>/ holds the program each component page shows, file for file: the pages' blocks
are what tests/e2e_local/test_component_package.py runs, and the examples are the same files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.program.settings import PROJECT_ROOT

PAGES = PROJECT_ROOT / "docs" / "how-to"
EXAMPLES = PROJECT_ROOT / "examples"
# The page's heading over each file's block (the YAML page shows its one file without one).
FILES = {
    "yaml": {"Pulumi.yaml": ""},
    "typescript": {
        name: f"### {name}" for name in ("Pulumi.yaml", "package.json", "tsconfig.json", "index.ts")
    },
    "go": {name: f"### {name}" for name in ("Pulumi.yaml", "go.mod", "main.go")},
}


def page_block(page: Path, heading: str) -> str:
    text = page.read_text()
    if heading:
        text = text.split(f"{heading}\n", 1)[1]
    found = re.search(r"```[a-z]*\n(.*?)```", text, re.S)
    assert found, f"no code block under {heading!r} in {page}"
    return found.group(1)


@pytest.mark.parametrize("language", sorted(FILES))
def test_each_example_is_its_pages_program_file_for_file(language: str) -> None:
    directory = EXAMPLES / language
    assert sorted(p.name for p in directory.iterdir()) == sorted(FILES[language])
    for name, heading in FILES[language].items():
        assert (directory / name).read_text() == page_block(PAGES / f"components-{language}.md", heading), (
            name
        )
