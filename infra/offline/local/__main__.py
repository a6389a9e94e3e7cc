"""`python -m infra.offline.local --stack NAME`: see `infra.offline.local.cli`."""

import sys

from infra.offline.local.cli import main

sys.exit(main())
