"""How much of a one-token forward `torch.compile` can take away on this machine: Gemma 3's decoder written as a
plain layer loop over a static-capacity cache, timed eager, compiled, and as its matrix products alone.

    python benchmarks/compile_probe.py [--model gemma-3-270m] [--threads 2] [--runs 4]

A probe for the next step of README's "Host time of one forward", not the engine: float32 weights (fbgemm's packed
float16 op breaks a compiled graph: its packed weight is an opaque object), one stream, one token at a fixed
position, the cache a fixed 128 slots. Prints each timing per run (alternating, so that the machine's drift touches
all three alike) and the largest difference between the compiled and the eager output.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

CAPACITY = 128  # cache slots
POSITION = 40  # the token's position id and cache slot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m", help="a Gemma 3 text model (packaged name or folder)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--calls", type=int, default=60, help="forwards per timing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from simulmt.translator import Translator

    model = Translator.load(args.model, adapter="none", dtype="float32", fuse=False).model
    decoder, config = model.get_decoder(), model.config
    if not hasattr(config, "layer_types") or not hasattr(decoder.layers[0].self_attn, "q_norm"):
        raise SystemExit(f"{args.model} is not a Gemma 3 text model: this probe writes Gemma 3's layer by hand")
    layers, head_dim = decoder.layers, config.head_dim
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads

    def norm(x, weight):  # Gemma's RMSNorm: (x_hat * (1 + w)), in float32
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps) * (1.0 + weight)

    def rotate(x, cos, sin):
        return x * cos + torch.cat((-x[..., head_dim // 2:], x[..., : head_dim // 2]), -1) * sin

    def forward(h, rotary, keys, values, slot, masks):
        for i, layer in enumerate(layers):
            attn, kind = layer.self_attn, config.layer_types[i]
            cos, sin = rotary[kind]
            x = norm(h, layer.input_layernorm.weight)
            q = norm(F.linear(x, attn.q_proj.weight).view(1, heads, 1, head_dim), attn.q_norm.weight)
            k = norm(F.linear(x, attn.k_proj.weight).view(1, kv_heads, 1, head_dim), attn.k_norm.weight)
            v = F.linear(x, attn.v_proj.weight).view(1, kv_heads, 1, head_dim)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            keys[i].index_copy_(2, slot, k)
            values[i].index_copy_(2, slot, v)
            o = F.scaled_dot_product_attention(q.view(1, kv_heads, heads // kv_heads, head_dim), keys[i], values[i],
                                               attn_mask=masks[kind], scale=attn.scaling)
            h = h + norm(F.linear(o.reshape(1, heads * head_dim), attn.o_proj.weight),
                         layer.post_attention_layernorm.weight)
            x = norm(h, layer.pre_feedforward_layernorm.weight)
            gated = F.gelu(F.linear(x, layer.mlp.gate_proj.weight), approximate="tanh") * F.linear(
                x, layer.mlp.up_proj.weight)
            h = h + norm(F.linear(gated, layer.mlp.down_proj.weight), layer.post_feedforward_layernorm.weight)
        return norm(h, decoder.norm.weight)

    def products_only(h, *_):  # the same matrix products, nothing else
        for layer in layers:
            attn = layer.self_attn
            for weight in (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, layer.mlp.gate_proj.weight,
                           layer.mlp.up_proj.weight):
                F.linear(h, weight)
            F.linear(h.new_zeros(1, heads * head_dim), attn.o_proj.weight)
            F.linear(h.new_zeros(1, config.intermediate_size), layer.mlp.down_proj.weight)
        return h

    h = torch.randn(1, config.hidden_size)
    position = torch.tensor([[POSITION]])
    rotary = {kind: tuple(t.view(1, 1, 1, head_dim) for t in decoder.rotary_emb(h[None], position, kind))
              for kind in set(config.layer_types)}
    mask = torch.zeros(1, 1, 1, CAPACITY)
    mask[..., POSITION + 1:] = float("-inf")  # (a probe: the sliding window is wider than the 41 keys)
    keys = [torch.zeros(1, kv_heads, CAPACITY, head_dim) for _ in layers]
    values = [torch.zeros(1, kv_heads, CAPACITY, head_dim) for _ in layers]
    inputs = (h, rotary, keys, values, torch.tensor([POSITION]), {kind: mask for kind in rotary})

    def timed(fn) -> float:
        for _ in range(3):
            fn(*inputs)
        start = time.perf_counter()
        for _ in range(args.calls):
            fn(*inputs)
        return (time.perf_counter() - start) / args.calls * 1000

    with torch.inference_mode():
        eager_out = forward(*inputs)
        compiled = torch.compile(forward, dynamic=False, fullgraph=True)
        start = time.perf_counter()
        compiled_out = compiled(*inputs)
        print(f"compiled in {time.perf_counter() - start:.1f} s; largest output difference "
              f"{float((compiled_out - eager_out).abs().max()):.2e}")
        print("| run | eager ms | compiled ms | matrix products alone ms |\n|---:|---:|---:|---:|")
        for run in range(1, args.runs + 1):
            print(f"| {run} | {timed(forward):.2f} | {timed(compiled):.2f} | {timed(products_only):.2f} |")


if __name__ == "__main__":
    main()
