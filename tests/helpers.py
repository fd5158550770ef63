"""Shared test helpers: tiny translators and the teacher-forced parity check."""

from __future__ import annotations

import functools

from simulmt.parity import ParityRun, forced_tokens, teacher_forced_parity  # noqa: F401 (re-exported for tests)
from simulmt.core.placed import Role
from simulmt.translator import Translator
from tiny_models import make_model, make_tokenizer

# 12 source words, 11 target words; many words are several tokens with the tiny tokenizer.
SOURCE = "The weather is nice today and the children play in the garden"
TARGET = "Das Wetter ist heute schön und die Kinder spielen im Garten"


@functools.lru_cache(maxsize=None)
def tiny_translator(arch: str = "llama", chat: bool = True) -> Translator:
    tok = make_tokenizer(chat=chat)
    return Translator(make_model(arch, len(tok)), tok, name=f"tiny-{arch}")


def positions_of_targets(tokens) -> list[int]:
    return [t.position for t in tokens if t.role is Role.TARGET]


