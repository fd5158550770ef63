"""The interleaved layout's marker tokens, ``<|end-of-read|>`` and ``<|end-of-write|>``, added to a model.

EASiST (Fu et al.) interleaves source chunks and target chunks with two new special tokens: the end-of-read token
says "the source chunk is over, write now" (the layout places it: a policy decided to write), the end-of-write
token says "this target chunk is over, read more" (the model predicts it). A vocabulary does not have them, so
they are added: to the tokenizer as special tokens (never written into the text, never proposed unless they end
a segment) and to the model as two new rows of its embedding (and tied LM head), initialised to the mean of the
others (exactly, so a reload gives the same rows). Fine-tuning trains exactly those rows (``trainable_token_indices`` in the LoRA config,
``simulmt.finetune``), and the tokenizer saved with the adapter carries the two tokens, so loading the adapter
(``simulmt.models``) grows the base model the same way before the adapter's weights are applied.
"""

from __future__ import annotations

import torch

from simulmt.core.prompt_format import END_OF_READ, END_OF_WRITE, marker_id

MARKERS = (END_OF_READ, END_OF_WRITE)


def has_interleaved_markers(tokenizer) -> bool:
    return all(marker_id(tokenizer, m) is not None for m in MARKERS)


def add_interleaved_markers(model, tokenizer) -> tuple[int, int]:
    """Add the two markers to ``tokenizer`` (if missing) and make ``model``'s embedding big enough for them.
    Returns their ids (end-of-read, end-of-write). Idempotent."""
    missing = [m for m in MARKERS if marker_id(tokenizer, m) is None]
    if missing:
        tokenizer.add_special_tokens({"extra_special_tokens": missing}, replace_extra_special_tokens=False)
    grow_embeddings(model, len(tokenizer))
    eor, eow = (marker_id(tokenizer, m) for m in MARKERS)
    return eor, eow


@torch.no_grad()
def grow_embeddings(model, size: int) -> None:
    """Give ``model`` at least ``size`` embedding rows. The new rows (input and, if not tied, output) are exactly
    the mean of the old ones: deterministic, so that an adapter's trained deltas for them (saved without the
    embedding matrix) land on the same rows when it is loaded again. Never shrinks: a model may have more rows
    than its tokenizer has tokens (padding to a multiple)."""
    rows = model.get_input_embeddings().weight.shape[0]
    if size <= rows:
        return
    model.resize_token_embeddings(size, mean_resizing=False)
    tables = {id(m.weight): m.weight for m in (model.get_input_embeddings(), model.get_output_embeddings())
              if m is not None}
    for weight in tables.values():
        weight[rows:] = weight[:rows].mean(dim=0, keepdim=True)
