"""The component provider's entry point: the Pulumi language host runs this directory
(PulumiPlugin.yaml) as `python infra/component <engine address>`."""

import sys
from pathlib import Path

# Run by path, this directory comes first on sys.path: import the project's `infra` package instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parents[1]), *(p for p in sys.path if p and Path(p).resolve() != _HERE)]

from infra.component.provider import main  # noqa: E402

main(sys.argv[1:])
