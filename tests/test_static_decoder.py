"""The decoder at static shapes (static_decoder.py: what a CUDA graph replays) gives what the plain packed forward
gives: predictions, delays and compute counts identical, logits within the engine's tolerance, with streams joining
and leaving, prompts shared, guesses and alternatives, sliding windows. On a CPU the padded call runs eagerly; with
``SIMULMT_TEST_DEVICE=cuda`` the same tests record and replay real CUDA graphs. And the stable cache underneath:
rows keep their slot in the store, a free slot is reused, growing keeps every key, the store outlives its rows.
"""

from __future__ import annotations

import pytest
import torch

from helpers import tiny_translator
from simulmt.core.batch_cache import BatchKVCache
from simulmt.core.engine import Engine, run_batched
from simulmt.core.execution import Execution
from simulmt.core.static_decoder import StaticDecoder, bucket
from test_engine import SOURCES, alone, assert_same, jobs, pushed
from tiny_models import TEST_DEVICE


def run_jobs(tr, static: StaticDecoder | None):
    """``jobs()`` alone and 4 at a time through the engine, with ``static`` as the runner's static decoder."""
    before = tr.runner.static
    tr.runner.static = static
    try:
        work = jobs()
        singles = [alone(tr, *job) for job in work]
        streams = pushed(tr, work)
        engine = Engine(tr.runner)
        assert engine.cache.stable == (static is not None)
        run_batched(streams, engine, batch_size=4)
        assert engine.stats.shared_tokens > 0 and not engine.streams
        return singles, streams
    finally:
        tr.runner.static = before


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2", "mistral"])
def test_static_shapes_give_what_the_plain_forward_gives(arch):
    tr = tiny_translator(arch)
    static = StaticDecoder(tr.runner, graphs=TEST_DEVICE == "cuda")
    plain_singles, plain_streams = run_jobs(tr, None)
    singles, streams = run_jobs(tr, static)
    assert static.served > 0 and len(static.buckets) > 1  # several shapes, most forwards static
    if static.graphs:
        assert static.recorded > 0
    for plain, static_run in zip(plain_singles + plain_streams, singles + streams):
        assert_same(plain, static_run)


def test_the_next_engine_takes_the_store_and_graphs_of_a_dropped_one():
    """One-sentence sessions (``translate``) each make an engine: the store, and the graphs recorded on it, pass
    from one to the next instead of being made again per sentence."""
    tr = tiny_translator("llama")
    before, tr.runner.static = tr.runner.static, StaticDecoder(tr.runner, graphs=TEST_DEVICE == "cuda")
    try:
        static = tr.runner.static
        first = tr.translate(SOURCES[0], "expost", "wait-k", k=2)
        generation = next(reversed(static.buckets))  # the store it ended with (it may have grown once on the way)
        tr.translate(SOURCES[0], "expost", "wait-k", k=2)  # at that store's size from the start: a shape or two more
        made, recorded, served = len(static.buckets[generation]), static.recorded, static.served
        again = tr.translate(SOURCES[0], "expost", "wait-k", k=2)
        assert next(reversed(static.buckets)) == generation and len(static.buckets[generation]) == made > 1
        assert static.recorded == recorded and again.prediction == first.prediction
        assert static.served - served == again.forward_calls  # the first forward too: the store was there already
    finally:
        tr.runner.static = before


def test_a_forward_the_static_decoder_cannot_take_runs_as_it_is():
    tr = tiny_translator("llama")
    static = StaticDecoder(tr.runner, graphs=False, max_rows=2)  # every prompt forward is larger
    _, streams = run_jobs(tr, static)
    plain_singles, _ = run_jobs(tr, None)
    assert static.served > 0
    for plain, stream in zip(plain_singles, streams):
        assert stream.result().prediction == plain.result().prediction


def test_buckets_are_powers_of_two():
    assert [bucket(n) for n in (1, 2, 3, 5, 16, 17)] == [1, 2, 4, 8, 16, 32]


def test_a_stable_cache_keeps_each_rows_slot_and_reuses_free_ones():
    cache = BatchKVCache(capacity=16, stable=True)
    assert cache.generation != BatchKVCache(stable=True).generation  # graphs recorded on one are not another's
    generations = [cache.generation]
    for _ in range(3):
        cache.add_row()
    cache.prepare([0, 1, 2], [2, 1, 1], torch.tensor([False] * 4))
    keys = torch.arange(4, dtype=torch.float).reshape(4, 1, 1, 1).expand(4, 1, 1, 2)
    cache.update(keys, keys, 0)
    assert cache.slots == [0, 1, 2] and cache.slot_count == 3 and cache.scratch == 3
    store = cache.keys[0]
    cache.remove_row(1)  # nothing moves: row 1 (was row 2) keeps slot 2
    assert cache.slots == [0, 2] and cache.keys[0] is store and cache.lengths == [2, 1]
    cache.add_row()  # takes the free slot
    assert cache.slots == [0, 2, 1] and cache.keys[0] is store and cache.generation == generations[0]
    assert cache.copy_out(1, 1)[0][0].flatten().tolist() == [3.0, 3.0]  # row 1's key, read from slot 2
    cache.add_row()  # no slot free: the store doubles its slots, every key kept
    assert cache.slots == [0, 2, 1, 3] and cache.slot_count == 6 and cache.generation not in generations
    generations.append(cache.generation)
    assert torch.equal(cache.keys[0][:3], store[:3])
    cache.prepare([3], [20], torch.tensor([True] * 20))  # more keys than the capacity: it doubles
    assert cache.capacity == 32 and cache.generation not in generations
    assert torch.equal(cache.keys[0][:3, :, :16], store[:3])
    grown = cache.keys[0]
    for row in reversed(range(4)):
        cache.remove_row(row)
    assert cache.rows == 0 and cache.keys[0] is grown and cache._free == [0, 1, 2, 3]  # kept for the next streams


def test_a_bound_cache_writes_and_reads_through_the_given_buffers():
    cache = BatchKVCache(capacity=16, stable=True)
    cache.add_row()
    cache.prepare([0], [1], torch.tensor([False]))
    cache.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2), 0)  # creates the store: slot 0, scratch 1
    cache.prepare([0], [1], torch.tensor([False]))
    cache.bind(torch.tensor([0, cache.scratch]), torch.tensor([1, 0]), 16)  # one padded query
    k, _ = cache.update(torch.full((2, 1, 1, 2), 2.0), torch.full((2, 1, 1, 2), 2.0), 0)
    cache.unbind()
    assert k.shape == (2, 1, 16, 2)  # the bound key count, not the forward's
    assert cache.keys[0][0, 0, :2, 0].tolist() == [1.0, 2.0] and cache.keys[0][1, 0, 0, 0] == 2.0
    with pytest.raises(ValueError, match="stable"):
        BatchKVCache().bind(torch.tensor([0]), torch.tensor([0]), 16)


def test_speech_frames_go_through_the_same_static_forward():
    """Streams whose source is embeddings (speech frames) run at static shapes too, with the plain forward's
    output (the interleaved layout on Gemma 3, three streams of different block sizes)."""
    from helpers import tiny_interleaved_translator
    from simulmt.core.policies import WaitK
    from test_speech_stream import BLOCKS, blocks_for

    tr = tiny_interleaved_translator("gemma3")
    inputs = [blocks_for(tr, seed, sizes) for seed, sizes in enumerate([BLOCKS, [4, 4, 4], [9, 1, 3, 5, 2]])]
    results = {}
    for name, static in (("plain", None), ("static", StaticDecoder(tr.runner, graphs=TEST_DEVICE == "cuda"))):
        before, tr.runner.static = tr.runner.static, static
        try:
            for _ in range(2):  # the second engine takes the first one's store: every forward is static
                streams = []
                for blocks in inputs:
                    stream = tr.new_stream("interleaved", WaitK(2), record=True)
                    stream.push_embedded(blocks, finished=True)
                    streams.append(stream)
                served, engine = static.served if static else 0, Engine(tr.runner)
                run_batched(streams, engine, batch_size=3)
            results[name] = streams
            if static:
                assert static.served - served == engine.stats.forwards > 0
        finally:
            tr.runner.static = before
    for plain, static_run in zip(results["plain"], results["static"]):
        assert static_run.result().prediction  # (something was written)
        assert_same(plain, static_run)


def test_engines_on_two_threads_share_the_static_decoder_safely():
    """Two engines of one model on two threads (a server's sessions beside its hub) share the static decoder's
    buffers and store pool: one forward at a time, each with its own results."""
    import threading

    tr = tiny_translator("llama")
    halves = [SOURCES[:6], SOURCES[6:12]]
    expected = [[t.prediction for t in tr.translate_many(h, "expost", "wait-k", k=2, batch_size=3)] for h in halves]
    before, tr.runner.static = tr.runner.static, StaticDecoder(tr.runner, graphs=TEST_DEVICE == "cuda")
    got: dict[int, list[str]] = {}

    def work(i: int) -> None:
        for _ in range(3):
            got[i] = [t.prediction for t in tr.translate_many(halves[i], "expost", "wait-k", k=2, batch_size=3)]

    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [got[0], got[1]] == expected and tr.runner.static.served > 0
    finally:
        tr.runner.static = before


def test_benchmarks_record_whether_forwards_are_replayed_graphs():
    tr = tiny_translator("llama")
    if TEST_DEVICE == "cuda":  # on by default there
        assert tr.runner.device_label.endswith("+cuda-graphs")
    else:
        assert tr.runner.static is None and tr.runner.device_label == "cpu"


@pytest.mark.parametrize("arch, attn", [("bloom", "eager"), ("falcon", "eager"), ("falcon", "sdpa")])
def test_alibi_models_go_through_the_static_forward_with_their_bias_per_head(arch, attn):
    """ALiBi models (SimulMask's): masks with a bias per head, from each layout's distance rule, padded like the
    others; SimulMask, its stock ablation and expost mixed in the same forwards give the plain forward's output."""
    from simulmt.core.layouts import Expost, SimulMask, SimulMaskStock
    from simulmt.core.policies import ReadN, WaitK
    from test_simulmask import SOURCE, alibi_translator

    tr = alibi_translator(arch, attn)
    sources = [SOURCE, "Where is the train station?", "The children are playing in the garden.", SOURCE]
    mix = [(SimulMask(), WaitK(1)), (SimulMaskStock(), WaitK(2)), (Expost(slot=4), WaitK(1)),
           (SimulMask(), ReadN(2, max_segment_words=2))]
    results = {}
    for name, static in (("plain", None), ("static", StaticDecoder(tr.runner, graphs=TEST_DEVICE == "cuda"))):
        tr.runner.static = static
        for _ in range(2):  # the second engine starts on the first one's store: its every forward is static
            streams = []
            for text, (layout, policy) in zip(sources, mix):
                stream = tr.new_stream(layout, policy, record=True)
                stream.push(text.split(), finished=True)
                streams.append(stream)
            served, engine = static.served if static else 0, Engine(tr.runner)
            run_batched(streams, engine, batch_size=3)
        results[name] = streams
        if static:
            assert static.served - served == engine.stats.forwards and static.failed is None
    tr.runner.static = None
    for plain, static_run in zip(results["plain"], results["static"]):
        assert static_run.result().prediction
        assert_same(plain, static_run)


def test_a_model_whose_forward_cannot_be_recorded_runs_eagerly(monkeypatch):
    """A recording that fails (here made to) turns graphs off for the model with a warning; the forward that
    found it, and every later one, runs as it is: the same results."""
    tr = tiny_translator("llama")
    plain = tr.translate(SOURCES[0], "expost", "wait-k", k=2)
    static = StaticDecoder(tr.runner, graphs=False)
    static.graphs = True  # as on a GPU, with a recording that fails

    def refuse(b, cache):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(static, "_record", refuse)
    tr.runner.static = static
    try:
        with pytest.warns(UserWarning, match="CUDA graphs are off"):
            got = tr.translate(SOURCES[0], "expost", "wait-k", k=2)
        again = tr.translate(SOURCES[0], "expost", "wait-k", k=2)
    finally:
        tr.runner.static = None
    assert "not permitted" in static.failed and static.served == 1  # one try, then never again
    assert got.prediction == again.prediction == plain.prediction and got.delays == plain.delays


def test_a_slot_freed_before_the_store_exists_is_not_the_scratch_slot():
    """Two rows join, one leaves before any forward, the first forward makes the store: every slot given out so far
    has its place in it, and the scratch slot is none of them (a padded query's key would overwrite a row's)."""
    cache = BatchKVCache(capacity=16, stable=True)
    cache.add_row()
    cache.add_row()
    cache.remove_row(1)
    cache.prepare([0], [1], torch.tensor([False]))
    cache.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2), 0)
    cache.add_row()  # takes the free slot 1
    assert cache.slots == [0, 1] and cache.scratch == 2 and cache.slot_count == 2
    cache.prepare([1], [1], torch.tensor([False]))
    cache.update(torch.full((1, 1, 1, 2), 5.0), torch.full((1, 1, 1, 2), 5.0), 0)
    cache.add_row()  # no slot free: the store grows, every row's keys kept
    assert cache.slots == [0, 1, 2] and cache.scratch == 4
    assert cache.keys[0][1, 0, 0].tolist() == [5.0, 5.0] and cache.keys[0][0, 0, 0].tolist() == [1.0, 1.0]


def test_a_stable_store_made_in_inference_mode_serves_an_engine_without_it():
    """The store and the buffers pass from engine to engine: they are ordinary tensors, which an engine that does
    not run in inference mode may write."""
    tr = tiny_translator("llama")
    before, tr.runner.static = tr.runner.static, StaticDecoder(tr.runner, graphs=TEST_DEVICE == "cuda")
    execution = tr.runner.execution
    try:
        first = tr.translate(SOURCES[0], "expost", "wait-k", k=2)  # (the engine runs in inference mode)
        stream = tr.new_stream("expost", "wait-k", k=2)
        stream.push(SOURCES[0].split(), finished=True)
        tr.runner.execution = Execution(inference_mode=False)
        engine = Engine(tr.runner)
        served = tr.runner.static.served
        run_batched([stream], engine, batch_size=1)
        assert tr.runner.static.served > served and stream.result().prediction == first.prediction
    finally:
        tr.runner.static, tr.runner.execution = before, execution
