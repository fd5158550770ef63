"""Host time per forward, with a model whose arithmetic costs next to nothing: what a GPU cannot hide.

On a lent H200 the engine ran Gemma-3-270M at 45 ms per target token offline and 17 target tokens/s for one
stream, slower than this 2-core CPU: the GPU waits for the host. This measures the host's share anywhere, on the
CPU: a Gemma 3 model with Gemma-3-270M's 18 layers and layer types but tiny widths, so that a forward's time is
the Python, the dispatch of its ops and the engine's own work per round (masks, positions, cache gathers,
decoding rules). Printed side by side, in one run:

* ``hf``: the model's own forward with a ``DynamicCache``, one token per step (the floor of eager transformers);
* ``engine``: ``translate_many`` of a few sentences, one stream, ms per forward (``forward_calls`` counted):
  the engine's own work per round is the difference.

Measured here (2-core CPU, 1 thread): hf 7.3 ms, engine 9.4 ms (expost wait-3) and 10.8 ms (offline) per forward.

    python benchmarks/host_overhead.py [--threads 1] [--sentences 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def tiny_gemma(vocab_size: int):
    import transformers

    config = transformers.Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=18, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, sliding_window=512, max_position_embeddings=4096,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)])
    torch.manual_seed(0)
    return transformers.Gemma3ForCausalLM(config).eval()


@torch.no_grad()
def hf_ms(model, steps: int = 64) -> float:
    from transformers import DynamicCache

    from simulmt.core.runner import cache_argument

    cache = DynamicCache()
    cached = {cache_argument(model): cache}
    model(input_ids=torch.arange(10, 42)[None], use_cache=True, **cached)
    token = torch.tensor([[7]])
    for timed in (False, True):
        start = time.perf_counter()
        for _ in range(steps):
            model(input_ids=token, use_cache=True, **cached)
        if timed:
            return (time.perf_counter() - start) * 1000 / steps
    raise AssertionError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from helpers import SOURCE
    from simulmt.translator import Translator
    from tiny_models import make_tokenizer

    tok = make_tokenizer(chat=True)
    model = tiny_gemma(len(tok))
    tr = Translator(model, tok, name="tiny-gemma3-18-layers")
    sentences = [" ".join(SOURCE.split()[: 6 + i % 5]) for i in range(args.sentences)]
    print(f"model: gemma3, 18 layers, hidden 64 ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
          f"parameters), {args.threads} thread(s)")
    print(f"hf forward, DynamicCache, 1 token:        {hf_ms(model):6.2f} ms")
    for label, kwargs in (("engine, expost wait-3, 1 stream", dict(layout="expost", policy="wait-k", k=3)),
                          ("engine, offline, 1 stream", dict(layout="prefix", policy="offline"))):
        tr.translate_many(sentences[:2], batch_size=1, **kwargs)  # warm-up
        start = time.perf_counter()
        results = tr.translate_many(sentences, batch_size=1, **kwargs)
        ms = (time.perf_counter() - start) * 1000
        forwards = sum(r.forward_calls for r in results)
        print(f"{label + ':':41s} {ms / forwards:6.2f} ms per forward ({forwards} forwards, "
              f"{sum(len(r.prediction.split()) for r in results)} words)")


if __name__ == "__main__":
    main()
