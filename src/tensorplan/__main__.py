"""``python -m tensorplan``: the same as the ``tensorplan`` command."""

import sys

from tensorplan.cli import main

sys.exit(main())
