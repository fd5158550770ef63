"""Launcher configs shipped for GPU users (README, "Scaling out"): DeepSpeed ZeRO-2 and ZeRO-3 (``--deepspeed
zero2`` / ``zero3``, or the path) and an accelerate FSDP config (``accelerate launch --config_file``). The batch
size, accumulation, clipping and precision in the DeepSpeed files are "auto": the Trainer fills them in from
``simulmt finetune``'s own options, so one command line means the same run with or without DeepSpeed.

    python -m simulmt.finetune.configs fsdp     # prints the path of a shipped config
"""

from __future__ import annotations

import sys
from pathlib import Path

from simulmt.errors import SimulmtError

FOLDER = Path(__file__).resolve().parent
SHIPPED = {"zero2": FOLDER / "zero2.json", "zero3": FOLDER / "zero3.json", "fsdp": FOLDER / "fsdp.yaml"}


def path(name: str) -> Path:
    """A shipped config by name (zero2, zero3, fsdp)."""
    if name not in SHIPPED:
        raise SimulmtError(f"no shipped config {name!r}; shipped: {', '.join(SHIPPED)}")
    return SHIPPED[name]


def deepspeed_config(value: str) -> str:
    """``--deepspeed``: a shipped name (zero2, zero3) or a JSON file that exists."""
    if value in ("zero2", "zero3"):
        return str(path(value))
    if not Path(value).expanduser().is_file():
        raise SimulmtError(f"--deepspeed {value!r}: no such file (or name a shipped config: zero2, zero3)")
    return str(Path(value).expanduser())



def main(argv: list[str]) -> int:
    try:
        print(path(argv[0] if argv else ""))
    except SimulmtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
