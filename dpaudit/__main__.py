"""``python -m dpaudit``: the ``dpaudit`` command (``--help`` loads no torch)."""

import sys

from dpaudit.cli import main

if __name__ == "__main__":
    sys.exit(main())
