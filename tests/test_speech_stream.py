"""Source units that carry embeddings (speech blocks): the parity invariant holds for them too.

A speech block enters the stream as placed tokens whose ids are negative (row f of the stream's embeddings is id
-1 - f); the engine feeds those rows in place of token embeddings. One training forward over the laid-out sequence
(the same embeddings at the same places) gives the logits that streaming computes, teacher-forced along the same
schedule in blocks; batched streams give what one stream gives."""

from __future__ import annotations

import pytest
import torch

from helpers import TARGET, forced_tokens, tiny_interleaved_translator, tiny_translator
from simulmt.core.examples import IGNORE, build_examples
from simulmt.core.layouts import Conversation, Expost, Interleaved
from simulmt.core.placed import embedded_units, embedding_row
from simulmt.core.policies import Scheduled, WaitK
from simulmt.errors import SimulmtError

BLOCKS = [5, 3, 8, 2, 6, 4, 7]  # embeddings per block (an adapter gives one per 80 ms)
Y = len(TARGET.split())


def blocks_for(tr, seed: int = 0, sizes=BLOCKS) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d = tr.model.config.hidden_size
    return [torch.randn(n, d, generator=g) for n in sizes]


def units_of(blocks) -> list[tuple[int, ...]]:
    return embedded_units([b.shape[0] for b in blocks])


def schedule(kind: str) -> list[int]:
    x = len(BLOCKS)
    if kind == "wait-2":
        return [min(2 + j, x) for j in range(Y)]
    return [min(x, 3 * (1 + (j * x) // (3 * Y) + (j * x % (3 * Y) > 0))) for j in range(Y)]  # chunks of 3


LAYOUTS = {"interleaved": Interleaved, "conversation": Conversation, "expost": lambda: Expost(slot=8)}


@pytest.mark.parametrize("kind", ["wait-2", "chunks"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])
def test_training_forward_equals_streaming_with_embedded_units(arch, layout, kind):
    tr = tiny_interleaved_translator(arch)
    blocks = blocks_for(tr)
    delays = schedule(kind)
    assert delays == sorted(delays) and delays[-1] <= len(BLOCKS)
    lay = LAYOUTS[layout]()
    (example,) = build_examples(lay, tr.fmt, tr.tokenizer, units_of(blocks), TARGET.split(), delays)
    ids = example.input_ids.tolist()
    rows = torch.cat(blocks)[[embedding_row(i) for i in ids if i < 0]]
    sides = torch.tensor([t.role.target_side for t in example.tokens])
    logits, _ = tr.runner.forward(ids, example.position_ids.tolist(), example.visible(lay), 0, logits_to_keep=0,
                                  target_side=sides, embedded=rows)
    session = tr.session(lay, Scheduled(tuple(delays)), forced=forced_tokens(example, tr.fmt.end_id), record=True)
    session.push_embedded(blocks, finished=True, labels=[f"b{i}" for i in range(len(blocks))])
    for _ in session.advance():
        pass
    result = session.result()
    assert result.prediction == TARGET and result.delays == delays and result.source_length == len(BLOCKS)
    proposals = {p.context: p.logits for p in session.proposals}
    compared = 0
    for i, label in enumerate(example.labels):
        if label == IGNORE:
            continue
        streamed = proposals[tuple(example.tokens[: i + 1])]
        assert float((logits[i] - streamed).abs().max()) <= 1e-4
        compared += 1
    assert compared >= Y + 1
    assert sum(t.token_id < 0 for t in example.tokens) == sum(BLOCKS)


def test_embedded_streams_batched_equal_one_at_a_time():
    tr = tiny_interleaved_translator("gemma3")
    inputs = [blocks_for(tr, seed, sizes) for seed, sizes in enumerate([BLOCKS, [4, 4, 4], [9, 1, 3, 5, 2]])]
    alone = []
    for blocks in inputs:
        s = tr.session("interleaved", WaitK(2))
        s.push_embedded(blocks, finished=True)
        list(s.advance())
        alone.append(s.result())
    from simulmt.core.engine import Engine, run_batched

    streams = []
    for blocks in inputs:
        stream = tr.new_stream("interleaved", WaitK(2))
        stream.push_embedded(blocks, finished=True)
        streams.append(stream)
    run_batched(streams, Engine(tr.runner), batch_size=3)
    assert [(a.prediction, a.delays) for a in alone] == [(s.result().prediction, s.result().delays) for s in streams]
    assert all(a.prediction for a in alone)


def test_embedded_units_can_arrive_piece_by_piece():
    """A live stream: blocks pushed as they come, the policy waits for them (NEEDS_SOURCE) between pushes."""
    tr = tiny_translator("llama")
    blocks = blocks_for(tr)
    whole = tr.session("conversation", WaitK(2))
    whole.push_embedded(blocks, finished=True)
    list(whole.advance())
    live = tr.session("conversation", WaitK(2))
    for i, block in enumerate(blocks):
        live.push_embedded([block], finished=i == len(blocks) - 1)
        list(live.advance())
    assert live.result().prediction == whole.result().prediction and live.result().delays == whole.result().delays


def test_embedded_unit_errors():
    tr = tiny_translator("llama")
    s = tr.session("conversation", WaitK(2))
    with pytest.raises(SimulmtError, match="frames >= 1, hidden"):
        s.push_embedded([torch.zeros(0, 32)])
    with pytest.raises(SimulmtError, match="2 embedded units but 1 labels"):
        s.push_embedded([torch.zeros(2, 32), torch.zeros(1, 32)], labels=["a"])
    with pytest.raises(SimulmtError, match="embeddings given"):
        tr.runner.forward([1, -1], [0, 1], torch.ones(2, 2).tril().bool(), 0)
