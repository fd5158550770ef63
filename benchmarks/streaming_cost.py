"""What streaming costs: kept for its old command line, now a thin wrapper over ``simulmt bench``.

``simulmt bench`` (simulmt/bench/command.py) measures every layout against offline decoding in one run, both freely and
on the same output (each layout's output replayed through offline decoding). This script forwards its arguments,
defaulting to the model and layouts the first version compared (gemma-3-270m; expost and prefix)::

    python benchmarks/streaming_cost.py --source ../shared/data/iwslt17/tst2017.en-de.en --lines 20
    # == simulmt bench --model gemma-3-270m --layouts expost,prefix --source ... --lines 20
"""

from __future__ import annotations

import sys

from simulmt import cli

DEFAULTS = {"--model": "gemma-3-270m", "--layouts": "expost,prefix"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    given = {a.split("=", 1)[0] for a in argv}
    for option, value in DEFAULTS.items():
        if option not in given:
            argv += [option, value]
    return cli.main(["bench", *argv])


if __name__ == "__main__":
    raise SystemExit(main())
