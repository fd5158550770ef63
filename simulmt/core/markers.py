"""The interleaved layout's marker tokens, ``<|end-of-read|>``, ``<|end-of-write|>`` and
``<|end-of-translation|>``, added to a model.

EASiST (Fu et al.) interleaves source chunks and target chunks with two new special tokens: the end-of-read token
says "the source chunk is over, write now" (the layout places it: a policy decided to write), the end-of-write
token says "this target chunk is over, read more" (the model predicts it). A vocabulary does not have them, so
they are added: to the tokenizer as special tokens (never written into the text, never proposed unless they end
a segment) and to the model as new rows of its embedding (and tied LM head), initialised to the mean of the
others (exactly, so a reload gives the same rows). Fine-tuning trains exactly those rows (``trainable_token_indices`` in the LoRA config,
``simulmt.finetune``), and the tokenizer saved with the adapter carries the tokens, so loading the adapter
(``simulmt.models``) grows the base model the same way before the adapter's weights are applied.

The third marker is simulmt's, not EASiST's. With two markers the translation ends as every chunk does, with
``<|end-of-write|>``, so a model cannot tell "I have caught up with the source" from "the translation is complete":
trained on chunks, it ended every translation with the first chunk it wrote after the source was complete (on
Multi30k val at wait-7, 0.59 of the reference's words). With ``<|end-of-translation|>`` ending the last chunk in
training, decoding can forbid ``<|end-of-write|>`` once the source is complete (there is nothing left to read), and
the model ends the translation itself. Adapters trained with two markers keep their two (``MARKERS_V1``).
"""

from __future__ import annotations

import torch

from simulmt.errors import SimulmtError
from simulmt.core.prompt_format import END_OF_READ, END_OF_TRANSLATION, END_OF_WRITE, marker_id
from simulmt.core.vocabulary import forget

MARKERS = (END_OF_READ, END_OF_WRITE, END_OF_TRANSLATION)  # what a new interleaved adapter is trained with
MARKERS_V1 = (END_OF_READ, END_OF_WRITE)  # adapters trained before the end-of-translation marker


def has_interleaved_markers(tokenizer) -> bool:
    return all(marker_id(tokenizer, m) is not None for m in MARKERS_V1)


def add_interleaved_markers(model, tokenizer, markers: tuple[str, ...] = MARKERS) -> tuple[int, ...]:
    """Add ``markers`` to ``tokenizer`` (those missing, in order) and make ``model``'s embedding big enough for
    them. Returns their ids, in order. Idempotent."""
    missing = [m for m in markers if marker_id(tokenizer, m) is None]
    if missing:
        tokenizer.add_special_tokens({"extra_special_tokens": missing}, replace_extra_special_tokens=False)
        forget(tokenizer)
    grow_embeddings(model, len(tokenizer))
    return tuple(marker_id(tokenizer, m) for m in markers)


@torch.no_grad()
def grow_embeddings(model, size: int) -> None:
    """Give ``model`` at least ``size`` embedding rows. The new rows (input and, if not tied, output) are exactly
    the mean of the old ones: deterministic, so that an adapter's trained deltas for them (saved without the
    embedding matrix) land on the same rows when it is loaded again. Never shrinks: a model may have more rows
    than its tokenizer has tokens (padding to a multiple)."""
    rows = model.get_input_embeddings().weight.shape[0]
    if size <= rows:
        return
    if not hasattr(model.get_output_embeddings(), "weight"):
        raise SimulmtError("the model's LM head is packed (float16-packed): add the marker tokens before packing")
    model.resize_token_embeddings(size, mean_resizing=False)
    tables = {id(m.weight): m.weight for m in (model.get_input_embeddings(), model.get_output_embeddings())
              if m is not None}
    for weight in tables.values():
        weight[rows:] = weight[:rows].mean(dim=0, keepdim=True)
