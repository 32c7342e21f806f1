"""``python -m quotaplane.services.cli``: the ``quotaplane`` command without its console script."""

import sys

from quotaplane.services.cli import main

sys.exit(main())
