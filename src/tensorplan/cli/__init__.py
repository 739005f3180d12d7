"""The command line: ``tensorplan plan|run|dsa|bench|diff|pte``, one module per command
(``plan.py`` ...), what they share in ``options.py``, what a TARGET names in ``targets.py``,
and the parser and exit codes in ``main.py``."""

from tensorplan.cli.main import COMMANDS, main

__all__ = ["COMMANDS", "main"]
