"""A tokenizer that answers the words of a corpus from one batched call: laying out training data, fast.

A recipe lays out a pair word by word (``source_units``, ``word_tokens``: each word is encoded on its own, with its
leading space, as plain text), which is one tokenizer call per word: 68,584 calls for 3,000 pairs, seconds per
thousand pairs, hours for a corpus. ``Pretokenized`` encodes every distinct word of the corpus (with and without
its leading space) in one batched call (a fast tokenizer runs it in Rust, on every core) and then answers those
encodes from a table; any other call goes to the tokenizer itself. The ids are the same as the word-by-word
encodes (tests/test_finetune.py); a tokenizer that cannot encode a batch the way ``text_ids`` encodes a word is
used as it is.
"""

from __future__ import annotations

from collections.abc import Iterable


class Pretokenized:
    def __init__(self, tokenizer, texts: Iterable[str]):
        self.tokenizer = tokenizer
        unique = list(dict.fromkeys(texts))
        self._ids: dict[str, list[int]] = {}
        try:
            encoded = tokenizer(unique, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        except (TypeError, ValueError):  # (``text_ids`` falls back for such a tokenizer, word by word)
            return
        self._ids = dict(zip(unique, encoded))

    @classmethod
    def for_pairs(cls, tokenizer, pairs) -> "Pretokenized":
        """Every word of the pairs' sources and targets (and the targets their context shows), as a first word and as
        a word after a space."""
        words = {w for pair in pairs for text in (pair.source, pair.target, pair.context_target or "")
                 for w in text.split()}
        return cls(tokenizer, [t for w in sorted(words) for t in (w, " " + w)])

    def __call__(self, text, add_special_tokens: bool = True, split_special_tokens: bool = False, **kwargs):
        if isinstance(text, str) and not add_special_tokens and split_special_tokens and not kwargs:
            ids = self._ids.get(text)
            if ids is not None:
                return {"input_ids": list(ids)}
        return self.tokenizer(text, add_special_tokens=add_special_tokens,
                              split_special_tokens=split_special_tokens, **kwargs)

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __getattr__(self, name: str):  # everything else is the tokenizer's
        return getattr(self.tokenizer, name)
