"""A learned policy's p(WRITE) for every row of a forward at once (head_scores.py): the same numbers as row by row,
the same decisions as the policy computing them itself, and one product per forward instead of one per stream."""

from __future__ import annotations

import pytest
import torch

from helpers import tiny_interleaved_translator
from simulmt.core.decisions import Action, StreamState
from simulmt.core.engine import Engine, run_batched
from simulmt.core.head_scores import HeadScores
from simulmt.core.layouts import Expost, Interleaved
from simulmt.core.learned_policy import Learned, PolicyHead
from simulmt.errors import SimulmtError
from tiny_models import CORPUS


def test_head_scores_are_each_rows_p_write_computed_for_all_rows_when_first_asked():
    g = torch.Generator().manual_seed(0)
    a = PolicyHead(torch.randn(2, 6, generator=g), torch.randn(2, generator=g))
    b = PolicyHead(torch.randn(2, 6, generator=g), torch.randn(2, generator=g))
    features = torch.randn(7, 6, generator=g)
    scores = HeadScores([a, None, b, a], [2, 1, 3, 1]).of(features)  # rows 0-1: a; 2: none; 3-5: b; 6: a
    assert scores.products == 0  # nothing computed until asked
    assert scores.at(2) is None and scores.products == 0
    got = [scores.at(r) for r in (0, 1, 3, 4, 5, 6)]
    assert scores.products == 2  # one product per head, for all its rows, at the first question
    one = [float(h.p_write(features[r])) for h, r in [(a, 0), (a, 1), (b, 3), (b, 4), (b, 5), (a, 6)]]
    assert got == pytest.approx(one, abs=1e-6)
    # p(WRITE) = softmax(W h + b)[1], by hand for one row
    logits = a.weight @ features[6] + a.bias
    assert scores.at(6) == pytest.approx(float(torch.exp(logits[1]) / torch.exp(logits).sum()), abs=1e-6)
    # other features: computed again, once
    other = torch.randn(7, 6, generator=g)
    assert scores.of(other).at(0) == pytest.approx(float(a.p_write(other[0])), abs=1e-6) and scores.products == 4
    assert scores.of(other) is scores and scores.products == 4
    # every row one head's: no rows picked, the same values
    whole = HeadScores([a, a], [3, 4]).of(features)
    assert [whole.at(r) for r in range(7)] == pytest.approx([float(a.p_write(f)) for f in features], abs=1e-6)
    with pytest.raises(SimulmtError, match="before of"):
        HeadScores([a], [1]).at(0)


def test_the_learned_policy_decides_on_the_engines_score_as_on_the_hidden_state():
    head = PolicyHead(torch.tensor([[0.0, 0.0], [1.0, -1.0]]), torch.zeros(2))
    policy = Learned(0.6, head)
    hidden = torch.tensor([0.4, 0.0])  # p(WRITE) = sigmoid(0.4) = 0.599: a READ at tau 0.6
    at = StreamState(source_read=2, source_finished=False, target_words=0, features=hidden)
    p = float(head.p_write(hidden))
    assert policy.decide(at) is Action.READ
    assert policy.decide(StreamState(2, False, 0, score=p)) is Action.READ
    assert policy.decide(StreamState(2, False, 0, score=0.61)) is Action.WRITE
    # the score, where given, is what is compared (the engine's, for every row at once)
    assert policy.decide(StreamState(2, False, 0, features=hidden, score=0.9)) is Action.WRITE


def _run(tr, layout, policy, batch_size: int):
    streams = []
    for source in CORPUS[:6]:
        stream = tr.new_stream(layout, policy)
        stream.push(source.split(), finished=True)
        streams.append(stream)
    engine = Engine(tr.runner)
    run_batched(streams, engine, batch_size=batch_size)
    return [(s.result().prediction, s.result().delays, s.result().tokens_fed) for s in streams], engine


@pytest.mark.parametrize("layout,layer", [(Interleaved(), None), (Expost(slot=16), None), (Interleaved(), 0)],
                         ids=["interleaved", "expost", "interleaved-inner-layer"])
def test_one_head_product_per_forward_and_the_same_decisions_as_stream_by_stream(layout, layer, monkeypatch):
    """(A head on an inner layer: the features of that layer's output, the scores only in forwards where a stream
    decides there.)"""
    tr = tiny_interleaved_translator("gemma3")
    torch.manual_seed(3)
    head = PolicyHead(torch.randn(2, tr.model.config.hidden_size), torch.tensor([0.0, 0.3]),
                      {} if layer is None else {"layer": layer})
    policy = Learned(0.5, head)
    calls, made = [], []
    p_write, init = PolicyHead.p_write, HeadScores.__init__

    def counted(self, hidden):
        calls.append(hidden.shape[0] if hidden.dim() == 2 else 1)
        return p_write(self, hidden)

    def registered(self, *args):
        init(self, *args)
        made.append(self)

    monkeypatch.setattr(PolicyHead, "p_write", counted)
    monkeypatch.setattr(HeadScores, "__init__", registered)
    batched, engine = _run(tr, layout, policy, batch_size=6)
    assert 0 < len(calls) <= engine.stats.forwards  # at most one product a forward (one head), not one per stream
    assert len(made) <= engine.stats.forwards and all(s.products <= 1 for s in made)  # a forward's scores: one
    # product at most (a forward with an inner layer's head has scores only where a stream decides at that layer)
    if layer is None:  # a forward whose streams decide nothing on its features computes none (the inner layer's are
        assert any(s.products == 0 for s in made)  # made only where some stream decides)
    assert max(calls) > 1  # rows of several streams in one product
    products = len(calls)
    alone, _ = _run(tr, layout, policy, batch_size=1)  # batched == one stream
    assert [(p, d) for p, d, _ in alone] == [(p, d) for p, d, _ in batched]
    # the policy computing p(WRITE) itself, stream by stream, decides the same at every point
    calls.clear()
    with monkeypatch.context() as m:
        m.setattr(HeadScores, "at", lambda self, row: None)  # (no score: the policy computes p(WRITE) itself)
        by_stream, engine = _run(tr, layout, policy, batch_size=6)
    assert by_stream == batched
    assert set(calls) == {1} and len(calls) >= products  # (a product of one row per stream and decision, as before)
    delays = {tuple(d) for _, d, _ in batched}
    assert len(delays) > 1 or any(0 < d[0] < len(s.split()) for (_, d, _), s in zip(batched, CORPUS))
