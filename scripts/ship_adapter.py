"""Copy a trained LoRA adapter from a ``simulmt finetune`` run into the package, as a shipped adapter.

    python scripts/ship_adapter.py RUN_DIR NAME

Writes ``simulmt/adapters/NAME/``: ``adapter_config.json`` (base model set to the packaged short name),
``adapter_model.safetensors`` with the weights in bfloat16 (half the size; the LoRA layers are cast back to the
model's dtype on load; added tokens' rows stay float32), the marker tokens' ``tokenizer_config.json`` and the
``policy_head.safetensors`` when the adapter has them, and ``training.json`` (the run's own record: command options, data, steps, time, dev
scores). The data card ``README.md`` is written by hand from ``training.json`` and the evaluation runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from simulmt.adapters import SHIPPED, save_bfloat16_weights
from simulmt.models import adapter_markers

ROOT = Path(__file__).resolve().parents[1]
#: small files an adapter may carry besides its weights: the tokenizer config that names added marker tokens
#: (``--recipe interleaved``; not tokenizer.json, 33 MB for Gemma, rebuilt from the base model on load) and a
#: policy head (``--recipe policy-head``)
EXTRA_FILES = ("tokenizer_config.json", "policy_head.safetensors")


def ship(run: Path, name: str) -> Path:
    if name not in SHIPPED:
        raise SystemExit(f"{name!r} is not in simulmt.adapters.SHIPPED ({', '.join(SHIPPED)}): register it first")
    adapter = run / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise SystemExit(f"no adapter in {adapter} (is the run finished?)")
    target = ROOT / "simulmt" / "adapters" / name
    target.mkdir(parents=True, exist_ok=True)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = SHIPPED[name]
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_bfloat16_weights(adapter / "adapter_model.safetensors", target / "adapter_model.safetensors")
    for extra in EXTRA_FILES:  # the interleaved markers' tokenizer config, a policy head
        wanted = (adapter / extra).is_file() and (extra != "tokenizer_config.json" or adapter_markers(adapter))
        # (a run without markers saves the base tokenizer's config: nothing the adapter needs)
        if wanted:
            shutil.copyfile(adapter / extra, target / extra)
        else:  # (an adapter shipped before under this name may have left one)
            (target / extra).unlink(missing_ok=True)
    if (run / "training.json").is_file():  # written after the evaluation at the end of the run
        shutil.copyfile(run / "training.json", target / "training.json")
    return target


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the finetune run directory (holds adapter/ and training.json)")
    parser.add_argument("name", help="the shipped adapter's name (a key of simulmt.adapters.SHIPPED)")
    args = parser.parse_args()
    print(ship(args.run, args.name))
