"""What the decoder needs to know about a vocabulary: which tokens start a word, which are special.

*Special* tokens are never proposed as target text (only the end tokens of the prompt format may end a segment)
and never decoded into it. A token is special when the tokenizer says so (its special tokens, or an added token
flagged special), or when it is an added token that is markup, e.g. ``<start_of_image>``, ``<em>``, ``</i>`` or
``[multimodal]``: GGUF files store such tokens as "user-defined", so a converted tokenizer does not flag them,
and a base model trained on web pages likes to write them once it has nothing left to say.
"""

from __future__ import annotations

import re
import weakref

import torch

from simulmt.core.sentence_ends import has_terminal

_MARKUP = re.compile(r"^(<[^<>\s]+>|\[[^\[\]\s]+\])$")
WORD_START_PREFIXES = ("▁", "Ġ", " ", "<0x20>", "Ċ", "\n", "\t")


def special_token_ids(tokenizer) -> frozenset[int]:
    """Ids of the tokens that are special in the model's vocabulary (see the module docstring)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for token_id, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(added, "special", False) or _MARKUP.match(str(added)):
            ids.add(int(token_id))
    return frozenset(ids)


def mark_special_tokens(tokenizer) -> int:
    """Flag as special, in the tokenizer itself, the markup tokens it leaves unflagged, so that
    ``decode(..., skip_special_tokens=True)`` drops them everywhere. Returns how many were flagged."""
    flagged = set(getattr(tokenizer, "all_special_ids", []) or [])
    extra = [added for token_id, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
             if int(token_id) not in flagged and _MARKUP.match(str(added))]
    if extra:
        tokenizer.add_special_tokens({"extra_special_tokens": extra}, replace_extra_special_tokens=False)
        forget(tokenizer)
    return len(extra)


def token_table(ids, vocab_size: int) -> torch.Tensor:
    """Boolean (vocab_size,) table, True at ``ids`` (ids beyond the model's vocabulary are ignored)."""
    table = torch.zeros(vocab_size, dtype=torch.bool)
    table[[i for i in ids if 0 <= i < vocab_size]] = True
    return table


def piece_table(tokenizer, vocab_size: int, test) -> torch.Tensor:
    """Boolean per token id: ``test(piece)`` of the token's vocabulary piece (special tokens: False)."""
    table = torch.zeros(vocab_size, dtype=torch.bool)
    special = special_token_ids(tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), vocab_size))))
    for i, piece in enumerate(pieces):
        if piece and i not in special and test(piece):
            table[i] = True
    return table


def word_start_table(tokenizer, vocab_size: int) -> torch.Tensor:
    """Boolean per token id: does the token begin a new word (a leading space / ▁ / Ġ)?"""
    return piece_table(tokenizer, vocab_size, lambda piece: piece.startswith(WORD_START_PREFIXES))


def sentence_end_table(tokenizer, vocab_size: int) -> torch.Tensor:
    """Boolean per token id: does the piece end in a sentence's terminal (``sentence_ends.has_terminal``)?"""
    return piece_table(tokenizer, vocab_size, has_terminal)


_MEMOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {kind: {key: value}}
WORDS_KEPT = 1 << 16  # entries memoised per tokenizer and kind (then computed each time)


def memo(tokenizer, kind: str) -> dict:
    """A tokenizer's memo of one kind (``word_text``'s, ``source_units``'s): words come again and again in a talk,
    and a tokenizer call costs 25-100 us, per stream and word. Gone with the tokenizer."""
    try:
        return _MEMOS.setdefault(tokenizer, {}).setdefault(kind, {})
    except TypeError:  # (a tokenizer that cannot be weakly referenced: nothing kept)
        return {}


def forget(tokenizer) -> None:
    """Drop a tokenizer's memos: call it after changing the tokenizer (tokens added or flagged special), since
    what was encoded or decoded before may read otherwise now."""
    _MEMOS.pop(tokenizer, None)


def remember(table: dict, key, value):
    """``table[key] = value`` while the memo holds fewer than ``WORDS_KEPT`` entries; returns ``value``."""
    if len(table) < WORDS_KEPT:
        table[key] = value
    return value


def word_text(tokenizer, tokens: tuple[int, ...]) -> str:
    """A written word's text: its tokens decoded without the special tokens, stripped (memoised)."""
    table = memo(tokenizer, "word_text")
    text = table.get(tokens)
    if text is None:
        text = remember(table, tokens, tokenizer.decode(list(tokens), skip_special_tokens=True).strip())
    return text
