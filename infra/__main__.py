"""Pulumi entry point (`main: infra/` in Pulumi.yaml)."""

import sys
from pathlib import Path

# Pulumi runs this directory's __main__.py by path, which puts infra/ itself first on sys.path.
# Import the program as the `infra` package instead (as the tests and `python -m infra.review.render` do),
# so module names here can never shadow the standard library.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if p and Path(p).resolve() != _HERE)]

from infra.program.stack import main  # noqa: E402

main()
