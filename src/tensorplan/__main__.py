"""``python -m tensorplan``: the same as the ``tensorplan`` command."""

import sys

from tensorplan.cli import main

if __name__ == "__main__":
    sys.exit(main())
