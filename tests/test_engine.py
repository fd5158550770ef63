"""Batched == one stream: the engine advances many streams in one forward per round, with the results of each
stream run alone (predictions, delays, compute counts identical; logits of every proposal within 1e-5 of
the logit scale), on every
architecture of the parity suite, with layouts, policies and lengths mixed in one batch and streams joining and
leaving mid-run.
"""

from __future__ import annotations

import pytest
import torch

from helpers import tiny_translator
from simulmt.core.batch_cache import BatchKVCache
from simulmt.core.engine import Engine, run_batched
from simulmt.errors import SimulmtError
from simulmt.core.layouts import (Conversation, Expost, ExpostPositions, ExpostSeesEarlier, GroupPositions, GroupPositionsOverlap,
                                  NaiveReuse, PrefixRecompute)
from simulmt.core.policies import Offline, ReadN, WaitK
from simulmt.core.samplers import Greedy, Sampling
from simulmt.core.stream import Status
from tiny_models import ARCHS, CORPUS

TOLERANCE = 1e-5  # float32, relative to the largest logit (|logits| reach ~5 on the tiny models)
SOURCES = [line for line in CORPUS if line.split()][:12]
MIX = [  # (layout, policy): every layout, every policy, slots that overflow
    (Expost(slot=4), WaitK(1)),
    (Expost(slot=16), WaitK(3)),
    (PrefixRecompute(), WaitK(2)),
    (GroupPositions(phi=300), WaitK(2)),
    (Conversation(), ReadN(2, max_segment_words=2)),
    (Expost(slot=4), ReadN(3, max_segment_words=3)),
    (NaiveReuse(), WaitK(3)),
    (Expost(slot=8), Offline()),
    (ExpostPositions(slot=4), WaitK(2)),  # unmarked new slots (issue 42, E3)
    (GroupPositionsOverlap(), WaitK(1)),  # overlapping groups (issue 42, E4)
    (ExpostSeesEarlier(slot=4), WaitK(2)),  # new slots see earlier target (issue 42, E2)
]


def jobs():
    return [(SOURCES[i % len(SOURCES)] + (" " + SOURCES[(i + 5) % len(SOURCES)] if i % 3 == 0 else ""), *MIX[i % len(MIX)])
            for i in range(len(MIX) + 2)]


def alone(tr, text, layout, policy, sampler=None):
    session = tr.session(layout, policy, record=True, sampler=sampler)
    session.run(text)
    return session


def assert_same(single, batched, counts: bool = True):
    a, b = single.result(), batched.result()
    assert b.prediction == a.prediction
    assert b.delays == a.delays
    assert b.error == a.error
    if counts:
        assert_same_counts(a, b)
    assert len(single.proposals) == len(batched.proposals)
    for p, q in zip(single.proposals, batched.proposals):
        assert p.context == q.context and p.token == q.token
        scale = max(1.0, float(p.logits.abs().max()))
        assert float((p.logits - q.logits).abs().max()) <= TOLERANCE * scale


def assert_same_counts(a, b):
    assert (b.tokens_fed, b.forward_calls, b.cache_crops, b.refed_tokens, b.speculated, b.speculated_kept) == (
        a.tokens_fed, a.forward_calls, a.cache_crops, a.refed_tokens, a.speculated, a.speculated_kept)
    assert b.flops == pytest.approx(a.flops)


def pushed(tr, work) -> list:
    """A recording stream per (text, layout, policy), its whole source pushed."""
    streams = []
    for text, layout, policy in work:
        stream = tr.new_stream(layout, policy, record=True)
        stream.push(text.split(), finished=True)
        streams.append(stream)
    return streams


def assert_batched_equals_alone(tr, guess_rows: int | None = None) -> tuple[list, list]:
    """``jobs()`` run alone and through 4 engine rows (10 streams: they join and leave mid-run) give the same
    (compute counts too, unless crowded forwards leave out guesses: ``guess_rows``). Returns (alone, batched)."""
    work = jobs()
    singles = [alone(tr, *job) for job in work]
    streams = pushed(tr, work)
    engine = Engine(tr.runner, guess_rows=guess_rows)
    run_batched(streams, engine, batch_size=4)
    assert not engine.streams and engine.cache.rows == 0
    assert max(engine.stats.batch_sizes) == 4 and min(engine.stats.batch_sizes) < 4
    assert sum(engine.stats.batch_sizes.values()) == engine.stats.forwards  # a histogram: one count per size
    assert engine.stats.shared_tokens > 0  # later streams took their prompt from the prompt cache
    for single, stream in zip(singles, streams):
        assert_same(single, stream, counts=guess_rows is None)
    return singles, streams


@pytest.mark.parametrize("arch", ARCHS)
def test_batched_equals_one_stream_with_everything_mixed(arch):
    assert_batched_equals_alone(tiny_translator(arch))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_crowded_forwards_feed_no_guesses_and_change_no_output(arch):
    """``guess_rows`` (the service's setting): a shared forward of that many rows or more feeds no guesses. The
    same predictions, delays and logits as alone; fewer guessed tokens, so fewer computed in vain."""
    singles, streams = assert_batched_equals_alone(tiny_translator(arch), guess_rows=2)  # every shared forward
    guessed = [sum(s.result().speculated for s in run) for run in (singles, streams)]
    wasted = [sum(s.result().speculated - s.result().speculated_kept for s in run) for run in (singles, streams)]
    assert guessed[1] < guessed[0] and wasted[1] < wasted[0]
    assert sum(s.result().tokens_fed for s in streams) < sum(s.result().tokens_fed for s in singles)


def test_translate_many_equals_translate_in_input_order():
    tr = tiny_translator("qwen2")
    texts = SOURCES[:7] + [""]  # an empty line too
    one = [tr.translate(t, "expost", "wait-k", k=2) for t in texts]
    many = tr.translate_many(texts, "expost", "wait-k", k=2, batch_size=3)
    assert [m.prediction for m in many] == [o.prediction for o in one]
    assert [m.delays for m in many] == [o.delays for o in one]
    assert many[-1].prediction == "" and many[-1].tokens_fed == 0


def test_live_streams_push_words_and_join_mid_run():
    """Streams fed word by word, joining while others are half way, equal sessions fed word by word alone."""
    tr = tiny_translator("gemma3")  # sliding-window layers: per-layer-type masks over rows of different lengths
    texts = SOURCES[:3]
    policies = [WaitK(2), WaitK(1), ReadN(2, max_segment_words=2)]
    singles = []  # each alone, fed word by word too (given whole, a read's source is at hand: stream.py, read-ahead)
    for text, policy in zip(texts, policies):
        session = tr.session(Expost(slot=4), policy, record=True)
        for j, word in enumerate(text.split()):
            session.push([word], finished=j + 1 == len(text.split()))
            list(session.advance())
        singles.append(session)
    engine = Engine(tr.runner)
    streams = [tr.new_stream(Expost(slot=4), p, record=True) for p in policies]
    words = [t.split() for t in texts]
    written = [[] for _ in texts]
    for tick in range(max(len(w) for w in words) + 3):
        for i, stream in enumerate(streams):
            start = i * 2  # stream i joins at tick 2i
            if tick == start:
                engine.add(stream)
            if start <= tick and not stream.stream_finished:
                j = tick - start
                stream.push(words[i][j:j + 1], finished=j + 1 >= len(words[i]))
        for event in engine.run():
            assert event.error is None
            written[streams.index(event.stream)] += event.words
    assert not engine.streams
    for single, stream, ws in zip(singles, streams, written):
        assert_same(single, stream)
        assert [w.text for w in ws] == [w.text for w in single.written]


def test_seeded_sampling_is_the_same_alone_and_batched():
    tr = tiny_translator("llama")
    texts = SOURCES[:5]
    singles = [alone(tr, t, Expost(), WaitK(2), Sampling(temperature=1.0, top_p=0.9, seed=i))
               for i, t in enumerate(texts)]
    many = tr.translate_many(texts, Expost(), WaitK(2), batch_size=5,
                             samplers=lambda i: Sampling(temperature=1.0, top_p=0.9, seed=i))
    assert [m.prediction for m in many] == [s.result().prediction for s in singles]
    greedy = tr.translate_many(texts, Expost(), WaitK(2), batch_size=5)
    assert [g.prediction for g in greedy] != [m.prediction for m in many]  # it did sample


def test_samplers_report_log_probabilities():
    scores = torch.tensor([0.0, 1.0, 2.0, float("-inf")])
    token, logprob = Greedy().choose(scores, 0)
    assert token == 2 and logprob == pytest.approx(float(torch.log_softmax(scores, -1)[2]))
    sampler = Sampling(temperature=0.5, top_p=0.5, seed=3)
    draws = {sampler.choose(scores, i)[0] for i in range(20)}
    assert draws == {2}  # top-p 0.5 keeps only the most likely token here (p = 0.87 at t = 0.5)
    with pytest.raises(SimulmtError):
        Sampling(temperature=0)
    tr = tiny_translator("llama")
    session = tr.session("expost", WaitK(2))
    session.run(SOURCES[0])
    assert session.target_logprobs == []  # off by default: a pass over the vocabulary per token
    session = tr.session("expost", WaitK(2))
    session.logprobs = True
    session.run(SOURCES[0])
    assert len(session.target_logprobs) == len(session.target_tokens) > 0
    assert all(lp <= 0 for lp in session.target_logprobs)

    class LookingGreedy(Greedy):  # chooses from the scores itself, not from the engine's best tokens
        picks_best = False
    looking = tr.session("expost", WaitK(2), sampler=LookingGreedy())
    looking.logprobs = True
    looking.run(SOURCES[0])
    assert looking.target_tokens == session.target_tokens
    assert looking.target_logprobs == pytest.approx(session.target_logprobs, abs=1e-5)


def test_a_forced_target_is_taken_without_reading_the_logits_unless_logprobs_are_kept(monkeypatch):
    """Teacher forcing writes the forced tokens whatever the scores: without ``logprobs`` no row of logits is taken
    out for it (a GPU benchmark forces real translations on random weights; a row per token would be a host copy),
    with them each token's log-probability under the model is kept."""
    from simulmt.core.requests import Answer
    from simulmt.finetune.parity import forced_tokens
    from simulmt.core.policies import Scheduled

    tr = tiny_translator("llama")
    greedy = tr.session("expost", WaitK(2))
    greedy.run(SOURCES[0])
    delays = greedy.result().delays
    target = " ".join(w.text for w in greedy.written)
    example = tr.training_examples(Expost(16), SOURCES[0], target, list(delays))[-1]
    forced = forced_tokens(example, tr.fmt.end_id)
    reads = []
    inner = Answer.logits

    def counted(answer):
        reads.append(answer.row)
        return inner.fget(answer)
    monkeypatch.setattr(Answer, "logits", property(counted))
    quiet = tr.session("expost", Scheduled(tuple(delays)), forced=forced)
    quiet.run(SOURCES[0])
    assert reads == [] and quiet.target_logprobs == []
    kept = tr.session("expost", Scheduled(tuple(delays)), forced=forced)
    kept.logprobs = True
    kept.run(SOURCES[0])
    assert len(reads) >= len(forced)  # a row per proposal (a token proposed before a read comes again)
    assert quiet.target_tokens == kept.target_tokens == [t for t, _ in forced[:-1]]
    assert len(kept.target_logprobs) == len(kept.target_tokens) and all(lp <= 0 for lp in kept.target_logprobs)


class FeaturePolicy(WaitK):
    """wait-k that records the hidden state it is shown (a learned READ/WRITE head would read it)."""

    wants_features = True
    seen: list = []

    def decide(self, state):
        if state.features is not None:
            FeaturePolicy.seen.append(state.features)
        return super().decide(state)


def test_policies_may_read_the_models_last_hidden_state():
    tr = tiny_translator("llama")
    FeaturePolicy.seen = []
    result = tr.translate(SOURCES[0], "expost", FeaturePolicy(2))
    assert result.prediction and FeaturePolicy.seen
    hidden = tr.model.config.hidden_size
    assert all(f.shape == (hidden,) for f in FeaturePolicy.seen)


def test_streams_receive_ordinary_tensors_from_an_inference_mode_forward():
    """The engine's forward runs in inference mode; what the streams keep (logits, hidden states) must not be
    inference tensors: a loss over them (GRPO's) saves them for backward."""
    tr = tiny_translator("llama")
    FeaturePolicy.seen = []
    session = alone(tr, SOURCES[0], Expost(slot=8), FeaturePolicy(2))
    assert tr.runner.execution.inference_mode and session.proposals and FeaturePolicy.seen
    received = [p.logits for p in session.proposals] + FeaturePolicy.seen
    assert not any(t.is_inference() for t in received)
    scale = torch.ones((), requires_grad=True)
    (received[0] * scale).logsumexp(-1).backward()  # saves the logits for backward: refused for inference tensors
    assert scale.grad is not None


def test_a_failing_stream_leaves_the_others_untouched():
    tr = tiny_translator("llama")  # 512 positions
    texts = [SOURCES[0], " ".join(["garden"] * 400), SOURCES[1]]
    many = tr.translate_many(texts, "expost", "wait-k", k=2, batch_size=3)
    assert many[1].error and "context of 512" in many[1].error
    assert [many[0].prediction, many[2].prediction] == [tr.translate(t, "expost", "wait-k", k=2).prediction
                                                        for t in (texts[0], texts[2])]


def test_a_finished_streams_cache_is_freed_at_once():
    tr = tiny_translator("llama")
    engine = Engine(tr.runner)
    streams = [tr.new_stream("expost", "wait-k", k=2) for _ in range(3)]
    for stream, text in zip(streams, SOURCES[:3]):
        stream.push(text.split())  # not finished: they stay and wait for source
        engine.add(stream)
    engine.run()
    full = engine.cache.memory_bytes()
    assert engine.cache.rows == 3 and full > 0
    engine.remove(streams[1])
    if engine.cache.stable:  # (CUDA graphs: rows keep their place; the slot waits for the next stream)
        assert engine.cache.rows == 2 and engine.cache.memory_bytes() == full and engine.cache._free == [1]
    else:
        assert engine.cache.rows == 2 and engine.cache.memory_bytes() < full
    streams[0].push([], finished=True)
    events = engine.run()
    assert any(e.stream is streams[0] and e.status is Status.DONE for e in events)
    assert engine.cache.rows == 1 and engine.streams == [streams[2]]


def test_cache_rows_keep_their_own_lengths():
    cache = BatchKVCache(capacity=4)
    for _ in range(3):
        cache.add_row()
    q = cache.prepare([0, 2], [3, 1], torch.tensor([True, False, True, True]))
    assert q.tolist() == [0, 1, 2, 0]  # packed: one query per token, each at its own row's next index
    assert cache.lengths == [3, 0, 1]
    keys = torch.arange(4 * 1 * 1 * 2, dtype=torch.float).reshape(4, 1, 1, 2)
    k, v = cache.update(keys, keys, 0)
    assert k.shape == (4, 1, 3, 2)  # every query sees its own row's keys
    assert torch.equal(k[2, 0], keys[:3, 0, 0]) and torch.equal(k[3, 0, 0], keys[3, 0, 0])
    assert cache.key_sides().tolist() == [[True, False, True]] * 3 + [[True, False, False]]
    cache.crop(0, 1)
    assert cache.lengths == [1, 0, 1]
    with pytest.raises(ValueError):
        cache.crop(1, 2)
    cache.remove_row(1)
    assert cache.rows == 2 and cache.lengths == [1, 1] and cache.keys[0].shape[0] == 2


def test_an_architecture_whose_logits_are_not_its_head_is_refused():
    """The engine applies the LM head itself: a model that scales its logits otherwise is caught at load."""
    from simulmt.core.runner import ModelRunner
    from tiny_models import make_model, make_tokenizer

    model = make_model("llama", len(make_tokenizer(chat=True)))
    ModelRunner(model)  # a plain model passes
    model.register_forward_hook(lambda module, args, output: output.__class__(logits=output.logits * 2.0))
    with pytest.raises(SimulmtError, match="does not support this architecture"):
        ModelRunner(model)


@pytest.mark.parametrize("arch", ["gemma3", "llama"])
def test_the_cache_goes_by_the_name_the_model_takes_it_under(arch):
    """transformers renamed ``past_key_values`` to ``cache`` (5.24 warns on every forward, 5.40 drops the old name):
    the runner passes the name the model's forward has, so decoding warns nothing about it."""
    import warnings

    from simulmt.core.runner import cache_argument

    tr = tiny_translator(arch)
    assert cache_argument(tr.model) in {"cache", "past_key_values"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr.translate(CORPUS[0], layout="expost", policy="wait-k", k=2)
        tr.translate(CORPUS[0], layout="prefix", policy="wait-k", k=2)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
