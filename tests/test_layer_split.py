"""A decoder forward in two parts (simulmt/core/layer_split.py): part one and part two equal one whole forward, a
policy head on an inner layer reads that layer's output, and a READ that stops its forward there changes nothing in
what is written (the stopped tokens are fed again), alone or batched, on several architectures."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

from helpers import SOURCE, tiny_interleaved_translator
from simulmt.core import layer_split
from simulmt.core.batch_cache import BatchKVCache
from simulmt.core.engine import Engine
from simulmt.core.learned_policy import Learned, PolicyHead
from simulmt.core.packed_forward import PackedQueries, Wants
from simulmt.core.runner import ModelRunner
from simulmt.errors import SimulmtError
from tiny_models import ALIBI_ARCHS, ARCHS, CORPUS, make_model, set_execution

T = 7
IDS = list(range(5, 5 + T))


def layer_output(runner: ModelRunner, layer: int, call) -> torch.Tensor:
    """``call()`` run whole, with a hook keeping layer ``layer``'s output."""
    kept = {}

    def hook(module, args, out):
        kept["out"] = out[0] if isinstance(out, tuple) else out
    handle = runner.layers[layer].register_forward_hook(hook)
    try:
        call()
    finally:
        handle.remove()
    return kept["out"]


class ReadOn:
    """Decisions (packed_forward.py) that read on when ``stop`` says so, and want every row's logits."""

    def __init__(self, stop):
        self.stop = stop

    def all_read_on(self, features):
        return self.stop(features)

    def head_rows(self, features):
        return torch.ones(features.shape[0], dtype=torch.bool)


def packed(runner: ModelRunner, features_layer: int | None = None, stop=None):
    """One row of ``T`` tokens through ``forward_packed``: (logits of every token, features, the cache)."""
    cache = BatchKVCache()
    cache.add_row()
    q = cache.prepare([0], [T], torch.zeros(T, dtype=torch.bool))
    visible = torch.tril(torch.ones(T, T, dtype=torch.bool))
    distances = (q[:, None] - torch.arange(T)[None]).clamp(min=0).float() if runner.alibi is not None else None
    queries = PackedQueries(torch.tensor(IDS), torch.arange(T), visible, q, torch.arange(T), distances)
    logits, feats, _ = runner.forward_packed(queries, cache, Wants(True, features_layer,
                                                                   decisions=ReadOn(stop) if stop else None))
    return logits, feats, cache


@pytest.mark.parametrize("arch", ARCHS + ALIBI_ARCHS)
def test_two_parts_equal_one_forward_and_the_features_are_the_layers_output(arch):
    runner = ModelRunner(make_model(arch, 64))
    whole, last_hidden, _ = packed(runner)
    for layer in range(len(runner.layers)):
        logits, feats, _ = packed(runner, layer)
        assert torch.equal(logits, whole)
        reference = layer_output(runner, layer, lambda: packed(runner))[:, 0].float()
        assert torch.equal(feats, reference)
        assert not torch.equal(feats, last_hidden)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_training_forward_reads_the_same_layer(arch):
    runner = ModelRunner(make_model(arch, 64))
    visible = torch.tril(torch.ones(T, T, dtype=torch.bool))
    mine = runner.hidden_states(IDS, list(range(T)), visible, layer=1)
    reference = layer_output(runner, 1, lambda: runner.hidden_states(IDS, list(range(T)), visible))[0].float()
    assert torch.equal(mine, reference)
    n = len(runner.layers)
    with pytest.raises(SimulmtError, match=f"layers 0..{n - 1}"):
        runner.hidden_states(IDS, list(range(T)), visible, layer=n)


def test_a_stopped_forward_computes_only_the_layers_up_to_the_head():
    runner = ModelRunner(make_model("llama", 64))
    calls = []
    handles = [m.register_forward_hook(lambda mod, a, o, i=i: calls.append(i)) for i, m in enumerate(runner.layers)]
    seen = []
    logits, feats, cache = packed(runner, 0, stop=lambda f: seen.append(f.shape) or True)
    for h in handles:
        h.remove()
    assert logits is None and seen == [(T, feats.shape[1])]
    assert len(cache.keys) == 1  # only layer 0 wrote its keys and values
    assert calls == list(range(len(runner.layers)))  # (hooks fire on the layers that pass their input on, too)


def test_plans_are_per_thread():
    """While one thread's forward is split, another thread's forward through the same model is whole."""
    runner = ModelRunner(make_model("gemma3", 64))
    whole, _, _ = packed(runner)
    other = {}

    def call_with_a_neighbour():
        thread = threading.Thread(target=lambda: other.setdefault("logits", packed(runner)[0]))
        thread.start()
        thread.join()
    visible = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def call():
        call_with_a_neighbour()
        return runner.hidden_states(IDS, list(range(T)), visible)
    layer_split.run_to(runner.layers, 0, call)
    assert torch.equal(other["logits"], whole)


def test_a_copied_model_runs_its_own_layers():
    model = make_model("llama", 64)
    runner = ModelRunner(model)
    packed(runner, 0)  # installs the layers' plan-aware forward
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(1.5)
    a, _, _ = packed(runner)
    b, _, _ = packed(ModelRunner(twin))
    b0, _, _ = packed(ModelRunner(twin), 0)
    assert not torch.allclose(a, b) and torch.equal(b, b0)


def head_on(tr, layer: int | None, scale: float = 0.3) -> PolicyHead:
    torch.manual_seed(0)
    d = tr.model.config.hidden_size
    return PolicyHead(torch.randn(2, d) * scale, torch.zeros(2), {"layer": layer})


@pytest.mark.parametrize("arch", ["llama", "gemma3", "bloom"])
def test_stopping_at_the_head_changes_nothing_written_alone_or_batched(arch, monkeypatch):
    tr = tiny_interleaved_translator(arch)
    policy = Learned(0.5, head_on(tr, 0))
    sources = CORPUS[:6]
    set_execution(monkeypatch, tr, stop_at_head=False)
    whole = [tr.translate(s, "interleaved", policy) for s in sources]
    set_execution(monkeypatch, tr, stop_at_head=True)
    alone = [tr.translate(s, "interleaved", policy) for s in sources]
    batched = tr.translate_many(sources, "interleaved", policy, batch_size=6)
    written = [(t.prediction, t.delays) for t in whole]
    assert [(t.prediction, t.delays) for t in alone] == written == [(t.prediction, t.delays) for t in batched]
    assert len({tuple(d) for _, d in written}) > 1  # the head decides, not a constant
    assert sum(t.stopped_forwards for t in alone) > 0 == sum(t.stopped_forwards for t in whole)
    assert [t.forward_calls for t in alone] == [t.forward_calls for t in whole]
    for stopped, plain in zip(alone, whole):  # each stopped forward's tokens come again
        assert stopped.tokens_fed > plain.tokens_fed or not stopped.stopped_forwards


def test_streams_whose_heads_read_different_layers_do_not_share_a_forward():
    tr = tiny_interleaved_translator("llama")
    streams = [tr.new_stream("interleaved", Learned(0.5, head_on(tr, layer))) for layer in (0, 1)]
    for stream in streams:
        stream.push(SOURCE.split(), finished=True)
    engine = Engine(tr.runner)
    for stream in streams:
        engine.add(stream)
    with pytest.raises(SimulmtError, match="different layers"):
        engine.run()


def test_the_head_keeps_its_layer(tmp_path):
    head = PolicyHead(torch.zeros(2, 4), torch.zeros(2), {"layer": 3})
    head.save(tmp_path)
    assert PolicyHead.load(tmp_path).layer == 3
    assert PolicyHead(torch.zeros(2, 4), torch.zeros(2)).layer is None


def test_only_decision_forwards_are_split_and_a_copied_prompt_may_stop(monkeypatch):
    """Forwards that decide nothing run whole and give a head on an inner layer no features (its decisions then ask
    for a forward of their own); a first forward that computes the prompt never stops (the prompt would be computed
    twice), one whose prompt was copied from the engine's prompt cache may."""
    tr = tiny_interleaved_translator("llama")
    policy = Learned(0.5, head_on(tr, 0))
    splits, served = [], []
    real_run_to, real_forward = layer_split.run_to, Engine._forward
    monkeypatch.setattr(layer_split, "run_to", lambda *a: splits.append(1) or real_run_to(*a))

    def spy(self, requests):
        out = real_forward(self, requests)
        served.append(([r.decides for _, r in out.requests], [r.keep for _, r in out.requests], out.shared,
                       out.logits is None))
        return out
    monkeypatch.setattr(Engine, "_forward", spy)
    engine = Engine(tr.runner)
    streams = []
    for source in CORPUS[:2]:  # one after the other: the second finds the first one's prompt
        stream = tr.new_stream("interleaved", policy)
        stream.push(source.split(), finished=True)
        engine.add(stream)
        engine.run()
        streams.append(stream)
    assert all(s.done for s in streams)
    assert len(splits) == sum(any(d) for d, *_ in served) < len(served)
    decides, keep, shared, stopped = served[0]
    assert decides == [True] and keep == [0] and shared == [0] and not stopped  # computes the prompt: whole
    copied = [x for x in served if x[1] == [0] and x[2][0] > 0]
    assert copied and all(x[0] == [True] for x in copied)
    assert sum(x[3] for x in served) > 0
