"""The batched best tokens (best_tokens.py) are ``torch.argmax`` of each masked row, ties and empty sets included,
and greedy decoding from them writes what greedy decoding from the scores writes."""

import pytest
import torch

from helpers import tiny_interleaved_translator, tiny_translator
from test_engine import SOURCES
from simulmt.core.best_tokens import BLOCK, BestTokens
from simulmt.core.layouts import Expost, Interleaved
from simulmt.core.policies import ReadN, WaitK
from simulmt.core.samplers import Greedy


def masked_argmax(logits: torch.Tensor, excluded: torch.Tensor) -> list[int]:
    x = logits[:, : len(excluded)].masked_fill(excluded, float("-inf"))
    return [int(torch.argmax(r)) if bool((r > float("-inf")).any()) else -1 for r in x]


@pytest.mark.parametrize("vocab", [7, BLOCK, 3 * BLOCK, 3 * BLOCK + 77])
def test_best_tokens_are_the_first_argmax_of_each_masked_row(vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randint(-3, 4, (9, vocab + 5), generator=g).float()  # many ties; columns past the vocabulary
    logits[0, :vocab] = 2.0  # a row of ties only
    logits[1, vocab:] = 100.0  # the best logits are past the vocabulary: never chosen
    sets = [torch.rand(vocab, generator=g) < p for p in (0.0, 0.02, 0.5)]
    sets.append(torch.ones(vocab, dtype=torch.bool))  # everything excluded: -1
    sets.append(torch.arange(vocab) % BLOCK < 3)  # a few tokens in every block
    for dense in (False, True):  # by blocks, and the masked rows whole
        got = BestTokens(sets, dense=dense)(logits)
        assert got.shape == (9, len(sets))
        for j, excluded in enumerate(sets):
            assert got[:, j].tolist() == masked_argmax(logits, excluded)
        assert BestTokens(sets, dense=dense)(logits[:, :vocab].to(torch.bfloat16)).tolist() == got.tolist()  # (exact
        # in bfloat16)
    assert BestTokens(sets).dense  # (a set excludes tokens in every block: the rows whole)
    one = [torch.arange(vocab) == vocab - 1]  # one token excluded: one block of the rest to take again
    assert BestTokens(one).dense == (vocab <= BLOCK)  # (by blocks where there are several)
    assert BestTokens(one)(logits)[:, 0].tolist() == masked_argmax(logits, one[0])


class LookingGreedy(Greedy):
    """Greedy decoding that chooses from the masked scores itself (the decoding before best_tokens.py)."""

    picks_best = False


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_greedy_from_the_batched_best_tokens_writes_what_the_scores_say(arch):
    tr = tiny_translator(arch)
    jobs = [(Expost(), WaitK(2)), (Expost(), ReadN(2))]
    for layout, policy in jobs:
        fast = tr.translate_many(SOURCES, layout, policy, batch_size=4)
        slow = tr.translate_many(SOURCES, layout, policy, batch_size=4, samplers=lambda i: LookingGreedy())
        assert [f.prediction for f in fast] == [s.prediction for s in slow]
        assert [f.delays for f in fast] == [s.delays for s in slow]
        assert [f.forward_calls for f in fast] == [s.forward_calls for s in slow]


def test_greedy_by_blocks_writes_what_the_scores_say():
    """The tiny models' vocabulary is one block, so the engine takes the masked rows whole; the block path (what
    Gemma 3's 262k vocabulary takes) forced here must write the same."""
    tr = tiny_translator("llama")  # (shared by tests: its vocabulary's best tokens are put back after)
    vocabulary, before = tr.vocabulary, tr.vocabulary._best
    blocks = BestTokens([vocabulary.banned, vocabulary.banned | vocabulary.stops], dense=False)
    object.__setattr__(vocabulary, "_best", blocks)
    try:
        fast = tr.translate_many(SOURCES, Expost(), WaitK(2), batch_size=4)
        assert vocabulary._best is blocks
    finally:
        object.__setattr__(vocabulary, "_best", before)
    slow = tr.translate_many(SOURCES, Expost(), WaitK(2), batch_size=4, samplers=lambda i: LookingGreedy())
    assert [f.prediction for f in fast] == [s.prediction for s in slow]
    assert [f.delays for f in fast] == [s.delays for s in slow]


def test_interleaved_greedy_from_the_batched_best_tokens_writes_what_the_scores_say():
    tr = tiny_interleaved_translator("llama")
    fast = tr.translate_many(SOURCES, Interleaved(), ReadN(1), batch_size=3)
    slow = tr.translate_many(SOURCES, Interleaved(), ReadN(1), batch_size=3, samplers=lambda i: LookingGreedy())
    assert [f.prediction for f in fast] == [s.prediction for s in slow]
    assert [f.delays for f in fast] == [s.delays for s in slow]
