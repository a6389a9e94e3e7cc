"""`python -m infra.local --stack NAME`: see `infra.local.cli`."""

import sys

from infra.local.cli import main

sys.exit(main())
