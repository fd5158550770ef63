"""``python -m simulmt.finetune.configs NAME``: print the path of a shipped launcher config."""

import sys

from simulmt.finetune.configs import main

sys.exit(main(sys.argv[1:]))
