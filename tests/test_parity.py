"""The parity invariant (design.md §2): training forward == streaming inference, for every cache-reusing layout.

For each architecture, layout and schedule, the logits of ONE training forward pass at every labelled position
equal the logits streaming inference computes when teacher-forced along the same schedule (float32, <= 1e-4),
including multi-token target words, the word-boundary rollback, and (expost, slot 4) a source that overflows
into a second and third slot. ``naive`` must NOT satisfy it.
"""

from __future__ import annotations

import pytest

from helpers import SOURCE, TARGET, teacher_forced_parity, tiny_interleaved_translator, tiny_translator
from simulmt.core.layouts import (Conversation, Expost, ExpostPositions, ExpostSeesEarlier, GroupPositions, GroupPositionsOverlap, Interleaved, NaiveReuse, PrefixRecompute,
                                  SeqPO)
from simulmt.core.placed import Role
from simulmt.finetune.schedules import read_n, wait_k
from tiny_models import ARCHS

TOLERANCE = 1e-4
X, Y = len(SOURCE.split()), len(TARGET.split())
SCHEDULES = {  # the schedules fine-tuning trains on (finetune/schedules.py)
    "wait-1": wait_k(1, X, Y),
    "wait-3": wait_k(3, X, Y),
    "read-3": read_n(3, X, Y),
}
LAYOUTS = {
    "expost": lambda: Expost(slot=4),
    "expost-positions": lambda: ExpostPositions(slot=4),  # later slots marked by positions only (issue 42, E3)
    "expost-sees-earlier": lambda: ExpostSeesEarlier(slot=4),  # new slots see earlier target (issue 42, E2)
    "gpe": lambda: GroupPositions(phi=300),
    "gpe-overlap": GroupPositionsOverlap,  # both groups from 0 (issue 42, E4)
    "conversation": Conversation,
    "seqpo": SeqPO,  # conversation that keeps empty steps (those are covered by tests/test_seqpo.py's rollouts)
    "prefix": PrefixRecompute,
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_training_forward_equals_streaming(arch, layout, schedule):
    tr = tiny_translator(arch, chat=True)
    run = teacher_forced_parity(tr, LAYOUTS[layout](), SOURCE, TARGET, SCHEDULES[schedule])
    assert run.labels >= Y + 1  # every target word's tokens and the end
    assert run.unmatched == 0, "a labelled training position has no streaming proposal with the same context"
    assert run.max_diff <= TOLERANCE
    assert run.session.result().prediction == TARGET  # teacher forcing wrote exactly the target
    assert run.session.result().delays == SCHEDULES[schedule]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arch", ARCHS)
def test_interleaved_parity(arch, schedule):
    """EASiST's interleaved layout, on models given its marker tokens (new embedding rows): the last chunk ends
    with end-of-translation, every other with end-of-write."""
    tr = tiny_interleaved_translator(arch)
    run = teacher_forced_parity(tr, Interleaved(), SOURCE, TARGET, SCHEDULES[schedule])
    assert run.labels >= Y + 1 and run.unmatched == 0
    assert run.max_diff <= TOLERANCE
    assert run.session.result().prediction == TARGET and run.session.result().delays == SCHEDULES[schedule]
    (example,) = run.examples
    ids = [t.token_id for t in example.tokens]
    delays = SCHEDULES[schedule]  # one target chunk per distinct delay, and one for the end after a final read
    chunks = len(set(delays)) + (max(delays) < X)
    assert ids.count(tr.fmt.end_of_read) == chunks and ids.count(tr.fmt.end_of_write) == chunks - 1
    assert ids.count(tr.fmt.end_of_translation) == 1 and example.tokens[-1].token_id == tr.fmt.end_of_translation


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_interleaved_parity_with_two_markers(arch):
    """An adapter trained with two markers (before end-of-translation): its translation ends as every chunk does."""
    tr = tiny_interleaved_translator(arch, two_markers=True)
    assert tr.fmt.end_of_translation is None
    schedule = SCHEDULES["read-3"]
    run = teacher_forced_parity(tr, Interleaved(), SOURCE, TARGET, schedule)
    assert run.unmatched == 0 and run.max_diff <= TOLERANCE and run.session.result().prediction == TARGET
    (example,) = run.examples
    ids = [t.token_id for t in example.tokens]
    chunks = len(set(schedule)) + (max(schedule) < X)
    assert ids.count(tr.fmt.end_of_read) == chunks and ids.count(tr.fmt.end_of_write) == chunks
    assert example.tokens[-1].token_id == tr.fmt.end_of_write


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_parity_with_plain_markers(arch):
    """Tokenizers without a chat template use plain-text markers; parity holds there too."""
    tr = tiny_translator(arch, chat=False)
    assert not tr.fmt.chat
    for delays in SCHEDULES.values():
        run = teacher_forced_parity(tr, Expost(slot=4), SOURCE, TARGET, delays)
        assert run.unmatched == 0 and run.max_diff <= TOLERANCE


def test_the_parity_cases_cover_what_they_claim():
    tr = tiny_translator("gemma3", chat=True)
    run = teacher_forced_parity(tr, Expost(slot=4), SOURCE, TARGET, SCHEDULES["wait-1"])
    (example,) = run.examples
    words = {}
    for t in example.tokens:
        if t.role is Role.TARGET:
            words[t.unit] = words.get(t.unit, 0) + 1
    assert max(words.values()) >= 3, "multi-token target words"
    slots = sum(1 for a, b in zip(example.tokens, example.tokens[1:])
                if a.role is not Role.SOURCE_MARKER and b.role is Role.SOURCE_MARKER)
    assert slots >= 2, "the source overflows into a 2nd and a 3rd slot"
    assert run.session.cache_crops >= 1 and run.session.refed_tokens >= 1, "the word-boundary rollback happened"
    window = tr.model.config.sliding_window
    assert len(example) > 4 * window, "Gemma 3: the sequence is longer than its sliding window"


@pytest.mark.parametrize("arch", ARCHS)
def test_naive_reuse_breaks_parity(arch):
    """The ablation is real: streaming positions collide with the cached target, training's do not."""
    tr = tiny_translator(arch, chat=True)
    for name in ("wait-1", "wait-3"):
        run = teacher_forced_parity(tr, NaiveReuse(), SOURCE, TARGET, SCHEDULES[name], match_positions=False)
        assert run.unmatched == 0
        assert run.max_diff > 1e-2
