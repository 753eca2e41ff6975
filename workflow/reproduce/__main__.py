"""``python -m reproduce``: the pipeline commands."""

import sys

from reproduce.cli import main

sys.exit(main())
