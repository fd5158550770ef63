"""Which decoder layer should a policy head read? Fit one head per layer on the same decisions and compare.

    python benchmarks/head_layers.py collect --adapter gemma-3-270m-interleaved-en-de --first 11501 --pairs 600 \
        --states runs/head-layers.pt                      # about 20 min on 2 CPU cores
    python benchmarks/head_layers.py fit --states runs/head-layers.pt
    python benchmarks/head_layers.py head --states runs/head-layers.pt --layer 4 --output DIR

``collect`` runs what ``simulmt finetune --recipe policy-head --head-labels oracle`` runs (the model's oracle labels
on Multi30k train pairs, the hidden states at the decision points; simulmt/finetune/policy_head.py), keeping the
output of every decoder layer besides the last hidden state, in float16. ``fit`` fits a head on each (the recipe's
class-balanced logistic regression, the same seed and held-out rows) and prints the held-out balanced accuracy.
``head`` writes the adapter with the head of one layer (``--head-layer`` of the recipe gives the same head from
float32 states). A head on layer l lets a READ stop its forward after layer l (simulmt/core/layer_split.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Pair:
    source: str
    target: str


def collect(args) -> None:
    from simulmt.adapters import resolve_adapter
    from simulmt.core.layouts import LAYOUTS
    from simulmt.finetune.policy_head import collect as collect_states
    from simulmt.models import load_model
    from simulmt.translator import Translator

    m30k = Path(args.data) / "multi30k"
    rows = [(m30k / f"train.{lang}").read_text(encoding="utf-8").splitlines()[args.first - 1:args.first - 1 + args.pairs]
            for lang in ("en", "de")]
    pairs = [Pair(s, t) for s, t in zip(*rows)]
    _, folder = resolve_adapter(args.adapter, args.model)
    loaded = load_model(args.model, str(folder), device="cpu")
    translator = Translator(loaded.model, loaded.tokenizer, source_lang="en", target_lang="de", name=args.adapter)
    runner = translator.runner
    outputs: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda m, a, o: outputs.append(o[0] if isinstance(o, tuple) else o))
             for layer in runner.layers]
    last_hidden = runner.hidden_states

    def every_layer(*a, **k):  # the last hidden state, then each layer's output, side by side: (T, (L + 1) * d)
        outputs.clear()
        final = last_hidden(*a, **k)
        return torch.cat([final] + [o[0].float() for o in outputs], dim=-1)
    runner.hidden_states = every_layer
    hidden, labels = collect_states(translator, LAYOUTS["interleaved"](), pairs, None, 0, progress=True, oracle=True)
    for h in hooks:
        h.remove()
    torch.save({"hidden": hidden.half(), "labels": labels, "layers": len(runner.layers), "adapter": args.adapter,
                "first": args.first, "pairs": args.pairs}, args.states)
    print(f"{hidden.shape[0]} decisions ({float(labels.float().mean()):.0%} WRITE) -> {args.states}")


def states_of(saved: dict, layer: int | None) -> torch.Tensor:
    width = saved["hidden"].shape[1] // (saved["layers"] + 1)
    column = 0 if layer is None else layer + 1
    return saved["hidden"][:, column * width:(column + 1) * width].float()


def fit(args) -> None:
    from simulmt.finetune.policy_head import fit_head

    saved = torch.load(args.states)
    print("| layer | held-out accuracy | balanced accuracy |\n|---|---:|---:|")
    for layer in [None] + list(range(saved["layers"])):
        _, f = fit_head(states_of(saved, layer), saved["labels"], seed=0)
        print(f"| {'last hidden state' if layer is None else layer} | {f.heldout_accuracy:.4f} | "
              f"{f.heldout_balanced_accuracy:.4f} |")


def head(args) -> None:
    from simulmt.adapters import resolve_adapter
    from simulmt.finetune.policy_head import fit_head

    saved = torch.load(args.states)
    info = {"layout": "interleaved", "labels": "oracle", "pairs": saved["pairs"], "adapter": saved["adapter"],
            "layer": args.layer, "states": "float16 (benchmarks/head_layers.py)"}
    policy_head, f = fit_head(states_of(saved, args.layer), saved["labels"], seed=0, info=info)
    _, folder = resolve_adapter(saved["adapter"], args.model)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for file in folder.iterdir():
        if file.is_file() and file.name != "policy_head.safetensors":
            shutil.copy2(file, out / file.name)
    policy_head.save(out)
    print(f"layer {args.layer}: held-out balanced accuracy {f.heldout_balanced_accuracy:.4f} -> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("collect", "fit", "head"))
    parser.add_argument("--states", required=True, help="the collected states (.pt)")
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--adapter", default="gemma-3-270m-interleaved-en-de")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--first", type=int, default=11501, help="first Multi30k train line (1-based)")
    parser.add_argument("--pairs", type=int, default=600)
    parser.add_argument("--layer", type=int, help="head: the layer")
    parser.add_argument("--output", help="head: the adapter folder to write")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    {"collect": collect, "fit": fit, "head": head}[args.command](args)


if __name__ == "__main__":
    main()
