"""``python -m tensorplan.cli``: the ``tensorplan`` command."""

import sys

from tensorplan.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
