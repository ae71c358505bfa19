"""``python -m harness.cli``: the ``testbed`` command (how the harness starts its children)."""

import sys

from harness.cli import main

sys.exit(main())
