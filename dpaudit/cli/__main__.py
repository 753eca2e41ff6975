"""``python -m dpaudit.cli``: the ``dpaudit`` command."""

import sys

from dpaudit.cli import main

sys.exit(main())
