"""`python -m infra.offline.local --stack NAME`: see `infra.offline.local.scheduler`."""

import sys

from infra.offline.local.scheduler import main

sys.exit(main())
