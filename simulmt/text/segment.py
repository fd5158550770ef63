"""Sentences of a long line: split a word list at sentence ends, cut any sentence at a word bound; merge back.

A line may hold more than a sentence (a talk pasted on one line, 40,000 words). Translated as one stream it would
run for hours before it ran out of the model's context. So a line is split into sentences, each sentence is
translated on its own (bounded: at most ``max_words`` source words, so at most ``a * max_words + b`` target words
of at most ``max_tokens_per_word`` tokens each, see :class:`simulmt.core.session.DecodeConfig`), and the sentences'
translations are merged into the line's (:func:`simulmt.core.translation.merge_translations`), with delays
counted over the whole line as a stream would see them.

Where a sentence ends: :func:`simulmt.core.sentence_ends.ends_sentence` (a talk uses the same rule, talk.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS, ends_sentence
from simulmt.errors import SimulmtError


def split_sentences(words: Sequence[str], max_words: int = DEFAULT_MAX_WORDS) -> list[list[str]]:
    """``words`` (of one line) -> sentences, each at most ``max_words`` words; no words lost, none added."""
    if max_words < 1:
        raise SimulmtError(f"max_words must be at least 1, got {max_words}")
    sentences, current = [], []
    for i, word in enumerate(words):
        current.append(word)
        following = words[i + 1] if i + 1 < len(words) else None
        if len(current) >= max_words or ends_sentence(word, following):
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences


__all__ = ["split_sentences"]
