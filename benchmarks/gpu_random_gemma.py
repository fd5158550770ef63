"""A Gemma-3-270M-shaped model with random weights, saved as a checkpoint folder, for timing the CUDA path where
the real weights cannot travel (a lent GPU machine that reaches no hub and takes 64 MiB of files per call).

The speed of a forward does not depend on the weights' values, only on their shapes, so this model gives the
engine's real per-forward and per-round costs. What it writes does depend on them: random weights rarely propose
the end, so each sentence runs to the engine's length bounds (2 x source tokens + 16), longer than a real
translation; per-token figures stay comparable, per-sentence ones do not.

    python benchmarks/gpu_random_gemma.py CONFIG_DIR OUT_DIR

CONFIG_DIR holds ``config.json``, the tokenizer files (``tokenizer.json`` or ``tokenizer.json.xz``) and
``tokenizer_config.json`` of the converted packaged model (``~/.cache/simulmt/models/gemma-3-270m``).
"""

from __future__ import annotations

import lzma
import shutil
import sys
from pathlib import Path

import torch


def main(config_dir: str, out_dir: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    src, out = Path(config_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer_config.json", "generation_config.json", "tokenizer.json"):
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    if (src / "tokenizer.json.xz").is_file():
        (out / "tokenizer.json").write_bytes(lzma.decompress((src / "tokenizer.json.xz").read_bytes()))
    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"random {config.model_type} with {params / 1e6:.1f}M parameters saved in {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
