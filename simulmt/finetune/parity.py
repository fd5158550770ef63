"""Check the parity invariant for a model and a layout: training forward == streaming inference.

``teacher_forced_parity`` lays out a sentence pair along a schedule (the training side), streams the same source
with the same target forced along the same schedule (the inference side, KV cache, rollbacks and all), and
compares the logits at every labelled position with those of the streaming proposal made from the same context.
Use it when adding a layout or trying a new architecture; ``benchmarks/parity_report.py`` prints a table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from simulmt.core.examples import IGNORE, TrainingExample
from simulmt.core.layouts import Layout
from simulmt.core.placed import Role
from simulmt.core.policies import Scheduled
from simulmt.core.session import StreamingSession
from simulmt.translator import Translator


@dataclass
class ParityRun:
    examples: list[TrainingExample]
    session: StreamingSession
    max_diff: float  # max |logit difference| over all labelled positions
    labels: int  # labelled positions compared
    unmatched: int  # labelled positions with no streaming proposal from the same context


def forced_tokens(example: TrainingExample, end_id: int) -> list[tuple[int, int]]:
    """(token id, target word) of every target token of a full example, then the end token."""
    return [(t.token_id, t.unit) for t in example.tokens if t.role is Role.TARGET] + [(end_id, -1)]


def teacher_forced_parity(tr: Translator, layout: Layout, source: str, target: str, delays: list[int],
                          match_positions: bool = True) -> ParityRun:
    """``match_positions=False`` matches contexts on token ids and roles only, for layouts whose positions differ
    between the two sides by design (``naive``)."""
    examples = tr.training_examples(layout, source, target, delays)
    session = tr.session(layout, Scheduled(tuple(delays)), forced=forced_tokens(examples[-1], tr.fmt.end_id),
                         record=True)
    session.run(source)

    def key(tokens):
        return tuple(tokens) if match_positions else tuple((t.token_id, t.role) for t in tokens)

    proposals = {key(p.context): p.logits for p in session.proposals}
    max_diff, labels, unmatched = 0.0, 0, 0
    for ex in examples:
        sides = torch.tensor([t.role.target_side for t in ex.tokens])
        logits, _ = tr.runner.forward(ex.input_ids.tolist(), ex.position_ids.tolist(), ex.visible(layout), 0,
                                      cache=None, logits_to_keep=0, target_side=sides,
                                      distance=layout.visibility.distance)
        for i, label in enumerate(ex.labels):
            if label == IGNORE:
                continue
            labels += 1
            streamed = proposals.get(key(ex.tokens[: i + 1]))
            if streamed is None:
                unmatched += 1
                continue
            max_diff = max(max_diff, float((logits[i] - streamed.to(logits.device)).abs().max()))
    return ParityRun(examples, session, max_diff, labels, unmatched)
