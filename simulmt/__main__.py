"""``python -m simulmt``: the command line (see :mod:`simulmt.cli`)."""

import sys

from simulmt.cli import main

sys.exit(main())
