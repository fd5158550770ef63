"""Shared prompts (simulmt/core/prompt_cache.py): a new stream's prompt keys/values copied from the first stream
that brought them give the results of computing them, and only identical prompts are shared."""

from __future__ import annotations

import pytest
import torch

from helpers import tiny_translator
from simulmt.core.batch_cache import BatchKVCache
from simulmt.core.engine import Engine, run_batched
from simulmt.core.placed import PlacedToken, Role
from simulmt.core.prompt_cache import PromptCache, SharedPrompt, prompt_key
from simulmt.translator import Translator
from test_engine import SOURCES, assert_same


def _tokens(*roles_ids):
    return tuple(PlacedToken(i, n, role) for n, (role, i) in enumerate(roles_ids))


def test_prompt_key_takes_the_leading_prompt_tokens_only():
    P, S, M = Role.PROMPT, Role.SOURCE, Role.TARGET_MARKER
    assert prompt_key(_tokens((P, 5), (P, 6), (P, 7), (S, 9), (M, 3))) == ((5, 0), (6, 1), (7, 2))
    assert prompt_key(_tokens((P, 5), (P, 6))) is None  # nothing after the prompt: no token to give logits
    assert prompt_key(_tokens((P, 5), (S, 9))) is None  # too short to be worth a copy
    assert prompt_key(_tokens((S, 9), (P, 5), (P, 6), (S, 9))) is None  # not at the start
    assert prompt_key(_tokens((P, 5), (P, -1), (P, 6), (S, 9))) is None  # an embedded frame ends the shared part


def test_prompt_cache_keeps_the_most_recently_used():
    cache = PromptCache(capacity=2)
    entry = SharedPrompt([torch.zeros(1, 3, 2)], [torch.zeros(1, 3, 2)])
    cache.put(((1, 0),), entry)
    cache.put(((2, 0),), entry)
    assert cache.get(((1, 0),)) is entry  # used: now the most recent
    cache.put(((3, 0),), entry)
    assert cache.get(((2, 0),)) is None and cache.get(((1, 0),)) is entry and len(cache) == 2
    assert entry.length == 3 and cache.memory_bytes() == 2 * 2 * 6 * 4


def test_batch_cache_copies_a_prefix_into_an_empty_row_only():
    cache = BatchKVCache(capacity=2)
    cache.add_row()
    cache.add_row()
    cache.prepare([0, 1], [1, 1], torch.tensor([False, False]))
    cache.update(torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4), 0)
    keys, values = [torch.arange(20.0).view(1, 5, 4)], [-torch.arange(20.0).view(1, 5, 4)]
    with pytest.raises(ValueError, match="not empty"):
        cache.copy_in(0, keys, values)
    cache.crop(1, 0)
    cache.copy_in(1, keys, values)  # grows the capacity (2 -> 16) as needed, marks the keys source-side
    assert cache.lengths == [1, 5] and not cache.target_side[1, :5].any()
    out_k, out_v = cache.copy_out(1, 5)
    assert torch.equal(out_k[0], keys[0]) and torch.equal(out_v[0], values[0])
    assert torch.equal(cache.keys[0][0, :, 0], torch.ones(1, 4))  # the other row is untouched


@pytest.mark.parametrize("arch", ["gemma3", "bloom"])  # sliding-window layers; ALiBi (distances over the copy)
def test_shared_prompts_give_the_results_of_computing_them(arch):
    tr = tiny_translator(arch)
    french = Translator(tr.model, tr.tokenizer, target_lang="fr")  # the same model, another prompt
    texts = SOURCES[:6]
    runs = []
    for share in (False, True):
        streams = []
        for i, text in enumerate(texts):
            stream = (french if i % 3 == 0 else tr).new_stream("expost" if i % 2 else "conversation", "wait-k",
                                                               k=1 + i % 3, record=True)
            stream.push(text.split(), finished=True)
            streams.append(stream)
        engine = Engine(tr.runner, share_prompts=share)
        run_batched(streams, engine, batch_size=2)
        runs.append((engine, streams))
    (plain, alone), (sharing, shared) = runs
    assert plain.stats.shared_tokens == 0 and sharing.stats.shared_tokens > 0
    assert sharing.stats.tokens + sharing.stats.shared_tokens == plain.stats.tokens
    prompts = {prompt_key(s.fed) for s in shared}
    assert len(prompts) == 2 and len(sharing.prompts) == 2  # German and French: kept apart
    for a, b in zip(alone, shared):
        assert_same(a, b)
