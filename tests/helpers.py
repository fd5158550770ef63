"""Shared test helpers: tiny translators and the teacher-forced parity check."""

from __future__ import annotations

import functools
from dataclasses import dataclass


from simulmt.examples import IGNORE, TrainingExample
from simulmt.layouts import Layout
from simulmt.placed import Role
from simulmt.policies import Scheduled
from simulmt.session import StreamingSession
from simulmt.translator import Translator
from tiny_models import make_model, make_tokenizer

# 12 source words, 11 target words; many words are several tokens with the tiny tokenizer.
SOURCE = "The weather is nice today and the children play in the garden"
TARGET = "Das Wetter ist heute schön und die Kinder spielen im Garten"


@functools.lru_cache(maxsize=None)
def tiny_translator(arch: str = "llama", chat: bool = True) -> Translator:
    tok = make_tokenizer(chat=chat)
    return Translator(make_model(arch, len(tok)), tok, name=f"tiny-{arch}")


def read_n_delays(n: int, source_len: int, target_len: int) -> list[int]:
    """A read-n schedule: word j waits for the multiple of n covering its proportional source position."""
    out = []
    for j in range(target_len):
        need = (j * source_len) // target_len + 1
        out.append(min(n * -(-need // n), source_len))
    return out


@dataclass
class ParityRun:
    examples: list[TrainingExample]
    session: StreamingSession
    max_diff: float
    labels: int
    unmatched: int


def forced_tokens(example: TrainingExample, end_id: int) -> list[tuple[int, int]]:
    return [(t.token_id, t.unit) for t in example.tokens if t.role is Role.TARGET] + [(end_id, -1)]


def teacher_forced_parity(tr: Translator, layout: Layout, source: str, target: str, delays: list[int],
                          match_positions: bool = True) -> ParityRun:
    """Training forward vs streaming inference teacher-forced along ``delays``.

    Every labelled position of every training example is matched with the streaming proposal made from the same
    context (the same placed tokens in the cache, up to and including the proposing token) and their logits are
    compared. ``match_positions=False`` matches on token ids and roles only (for layouts whose positions differ
    between the two sides by design).
    """
    examples = tr.training_examples(layout, source, target, delays)
    session = tr.session(layout, Scheduled(tuple(delays)), forced=forced_tokens(examples[-1], tr.fmt.end_id),
                         record=True)
    session.run(source)

    def key(tokens):
        return tuple(tokens) if match_positions else tuple((t.token_id, t.role) for t in tokens)

    proposals = {key(p.context): p.logits for p in session.proposals}
    max_diff, labels, unmatched = 0.0, 0, 0
    for ex in examples:
        logits, _ = tr.runner.forward(ex.input_ids.tolist(), ex.position_ids.tolist(), ex.visible(layout), 0,
                                      cache=None, logits_to_keep=0)
        for i, label in enumerate(ex.labels):
            if label == IGNORE:
                continue
            labels += 1
            streamed = proposals.get(key(ex.tokens[: i + 1]))
            if streamed is None:
                unmatched += 1
                continue
            max_diff = max(max_diff, float((logits[i] - streamed).abs().max()))
    return ParityRun(examples, session, max_diff, labels, unmatched)


def positions_of_targets(tokens) -> list[int]:
    return [t.position for t in tokens if t.role is Role.TARGET]


