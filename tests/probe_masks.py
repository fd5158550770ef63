"""Probe: custom 4-D attention masks + explicit position ids + incremental KV cache.

Run with ``python tests/probe_masks.py`` (not collected by pytest).

For every architecture in tiny_models.ARCHS and attn_implementation in (eager, sdpa):
  (A) one full forward with an additive float mask (1,1,T,T) and explicit non-monotonic
      position ids;
  (B) chunked incremental forward with a config-less DynamicCache, mask row blocks
      (1,1,chunk,kv_len) and one rollback (cache crop) followed by re-feeding;
and reports max |logits_A - logits_B|.  Extra checks: logits_to_keep=1, agreement of the
custom-mask path with the model's own causal(/sliding) mask, which mask forms (plain tensor
vs dict keyed by layer type) each model accepts, and fully-masked rows.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_models import ARCHS, make_model, make_tokenizer  # noqa: E402
from simulmt.core.runner import cache_argument  # noqa: E402

NEG = torch.finfo(torch.float32).min
T = 20
CHUNKS = (5, 1, 3, 1, 4, 2, 1, 3)  # sums to 20
ROLLBACK_AFTER = 14  # after feeding this many tokens ...
ROLLBACK_TO = 10  # ... crop the cache back to this length and re-feed from here


def build_inputs(vocab_size: int, seed: int = 123):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, vocab_size, (1, T), generator=g)
    # Interleave "target" and "source" segments with their own position ranges:
    # tgt 20..25, src 5..8, tgt 26..28, src 9..11, tgt 29..32
    pos = list(range(20, 26)) + list(range(5, 9)) + list(range(26, 29)) + list(range(9, 12)) + list(range(29, 33))
    assert len(pos) == T
    position_ids = torch.tensor([pos])
    # Lower-triangular (in sequence index) visibility: self always visible, earlier keys random.
    vis = torch.rand(T, T, generator=g) < 0.6
    vis = torch.tril(vis, diagonal=-1) | torch.eye(T, dtype=torch.bool)
    return ids, position_ids, vis


def additive(vis: torch.Tensor) -> torch.Tensor:
    return torch.where(vis, 0.0, NEG).to(torch.float32)[None, None]


def sliding(vis: torch.Tensor, window: int) -> torch.Tensor:
    q = torch.arange(vis.shape[0])[:, None]
    k = torch.arange(vis.shape[1])[None, :]
    return vis & ((q - k) < window)


def needs_dict(model) -> bool:
    lt = getattr(model.config, "layer_types", None)
    return lt is not None and len(set(lt)) > 1


def mask_arg(model, vis: torch.Tensor, form: str):
    """form: 'tensor' or 'dict'."""
    full = additive(vis)
    if form == "tensor":
        return full
    d = {"full_attention": full}
    if "sliding_attention" in set(getattr(model.config, "layer_types", None) or []):
        d["sliding_attention"] = additive(sliding(vis, model.config.sliding_window))
    return d


def slice_mask(mask, rows: slice, kv_len: int):
    if isinstance(mask, dict):
        return {k: v[:, :, rows, :kv_len] for k, v in mask.items()}
    return mask[:, :, rows, :kv_len]


@torch.no_grad()
def full_forward(model, ids, pos, mask, **kw):
    return model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=False, **kw).logits[0]


@torch.no_grad()
def incremental(model, ids, pos, mask):
    cache = transformers.DynamicCache()  # no config -> plain DynamicLayers, no window truncation
    out = torch.full((T, model.config.vocab_size), float("nan"))
    start = 0
    rolled = False
    chunks = list(CHUNKS)
    while start < T:
        n = chunks.pop(0) if chunks else 1
        end = min(start + n, T)
        assert cache.get_seq_length() == start
        lg = model(
            input_ids=ids[:, start:end],
            position_ids=pos[:, start:end],
            attention_mask=slice_mask(mask, slice(start, end), end),
            use_cache=True,
            **{cache_argument(model): cache},
        ).logits[0]
        out[start:end] = lg
        start = end
        if not rolled and start >= ROLLBACK_AFTER:
            rolled = True
            # transformers 5.x: crop() takes a NEGATIVE number of tokens to remove
            # (positive values raise ValueError).
            cache.crop(-(start - ROLLBACK_TO))
            assert cache.get_seq_length() == ROLLBACK_TO
            out[ROLLBACK_TO:start] = float("nan")
            start = ROLLBACK_TO
            chunks = [3, 1] + chunks
    return out


def try_run(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"


def main():
    torch.set_printoptions(precision=3)
    vocab = len(make_tokenizer())
    ids, pos, vis = build_inputs(vocab)
    print(f"T={T} positions={pos[0].tolist()}")
    print(f"visible keys per row: {vis.sum(1).tolist()}")
    rows = []
    for arch in ARCHS:
        for impl in ("eager", "sdpa"):
            t0 = time.time()
            model = make_model(arch, vocab, attn_implementation=impl)
            t_make = time.time() - t0
            form = "dict" if needs_dict(model) else "tensor"
            mask = mask_arg(model, vis, form)

            a = full_forward(model, ids, pos, mask)
            b = incremental(model, ids, pos, mask)
            diff_ab = (a - b).abs().max().item()

            last = model(input_ids=ids, position_ids=pos, attention_mask=mask, logits_to_keep=1).logits
            diff_keep = (last[0, -1] - a[-1]).abs().max().item() if last.shape[1] == 1 else float("inf")

            # Custom-mask path vs model's own masking: plain causal + arange positions.
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            ar = torch.arange(T)[None]
            with torch.no_grad():
                own = model(input_ids=ids, position_ids=ar).logits[0]
            diff_own = (full_forward(model, ids, ar, mask_arg(model, causal, form)) - own).abs().max().item()

            # Which mask forms are accepted?
            plain, err_plain = try_run(lambda: full_forward(model, ids, pos, additive(vis)))
            dct, err_dict = try_run(
                lambda: full_forward(model, ids, pos, {lt: additive(vis) for lt in set(model.config.layer_types)})
                if getattr(model.config, "layer_types", None)
                else full_forward(model, ids, pos, {"full_attention": additive(vis)})
            )
            if form == "dict":
                # plain tensor is silently applied to ALL layers (sliding window ignored)
                tensor_note = "ok(no window!)" if plain is not None else "ERR"
                tensor_note += f" d={((plain - a).abs().max().item() if plain is not None else float('nan')):.2f}"
            else:
                tensor_note = "ok" if plain is not None else "ERR"
            dict_note = "ok" if dct is not None else err_dict

            # Fully masked row (row 7 sees nothing, not even itself).
            vis_dead = vis.clone()
            vis_dead[7] = False
            dead = full_forward(model, ids, pos, mask_arg(model, vis_dead, form))
            nan_dead = bool(torch.isnan(dead).any())

            rows.append((arch, impl, form, diff_ab, diff_keep, diff_own, tensor_note, dict_note, nan_dead, t_make))

    hdr = f"{'arch':8} {'impl':6} {'form':6} {'A-vs-B':>9} {'keep=1':>9} {'vs-own':>9}  {'tensor?':22} {'dict?':40} {'deadrowNaN':10} make_s"
    print(hdr)
    print("-" * len(hdr))
    for arch, impl, form, dab, dk, do, tn, dn, nd, tm in rows:
        print(f"{arch:8} {impl:6} {form:6} {dab:9.2e} {dk:9.2e} {do:9.2e}  {tn:22} {dn[:40]:40} {str(nd):10} {tm:.3f}")

    # Bool-mask fully-masked row in raw torch SDPA (for reference).
    q = torch.randn(1, 1, 3, 8)
    m = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])[None, None]
    o = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=m)
    of = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=torch.where(m, 0.0, NEG))
    print(
        f"raw SDPA fully-masked row: bool mask -> NaN={bool(torch.isnan(o).any())}, "
        f"row={o[0, 0, 1].tolist()[:3]}; float finfo.min mask -> NaN={bool(torch.isnan(of).any())}"
    )
    worst = max(r[3] for r in rows)
    print(f"worst A-vs-B diff: {worst:.2e}", "OK" if worst < 1e-4 else "MISMATCH")


if __name__ == "__main__":
    main()
