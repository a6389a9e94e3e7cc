"""CPU seconds per test (the test's own process and the processes it started), as a pytest plugin.

    mkdir -p /tmp/cpu && PYTEST_CPU_DIR=/tmp/cpu PYTHONPATH=bench .venv/bin/python -m pytest \\
        -p pytest_cpu -n auto --dist=loadfile
    .venv/bin/python bench/pytest_cpu.py /tmp/cpu

Each worker appends ``nodeid, own CPU s, children's CPU s, wall s`` per test to
``$PYTEST_CPU_DIR/cpu.<pid>.tsv`` (``getrusage``: a child's CPU counts once it has been waited for,
which every test does before it ends). Run as a script, it prints the total and the costliest files
and tests: where the suite's time goes when it is bound by CPU rather than by waiting.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before, started = _cpu(), time.monotonic()
    yield
    after = _cpu()
    out = Path(os.environ.get("PYTEST_CPU_DIR", ".")) / f"cpu.{os.getpid()}.tsv"
    with out.open("a") as handle:
        handle.write(
            f"{item.nodeid}\t{after[0] - before[0]:.2f}\t{after[1] - before[1]:.2f}\t"
            f"{time.monotonic() - started:.2f}\n"
        )


def main(directory: Path, top: int = 15) -> None:
    rows = []
    for path in directory.glob("cpu.*.tsv"):
        for line in path.read_text().splitlines():
            nodeid, own, children, wall = line.split("\t")
            rows.append((nodeid, float(own) + float(children), float(children), float(wall)))
    print(
        f"{len(rows)} tests: {sum(r[1] for r in rows):.0f} CPU s, "
        f"{sum(r[2] for r in rows):.0f} of it in processes they started"
    )
    by_file: Counter[str] = Counter()
    for nodeid, cpu, _, _ in rows:
        by_file[nodeid.split("::")[0]] += cpu
    for name, cpu in by_file.most_common(top):
        print(f"{cpu:8.1f} CPU s  {name}")
    print()
    for nodeid, cpu, _, wall in sorted(rows, key=lambda r: -r[1])[:top]:
        print(f"{cpu:8.1f} CPU s {wall:7.1f} s wall  {nodeid}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
