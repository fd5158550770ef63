"""Guesses (stream.py, "Guesses") change the cost of streaming, never its output.

After a READ the stream feeds, with the new source, the target token it guesses the model will write next (and, for
a learned policy, the opener a WRITE would place). Every run here is made twice, with ``Execution.speculate`` on and
off: predictions, delays, every proposal's context, token and logits must be the same; only forwards and tokens
fed may differ, and they must add up (tokens fed = the same tokens + the guesses the layout did not place).
"""

from __future__ import annotations

import pytest
import torch

from helpers import (SOURCE, TARGET, forced_tokens, run_interleaved_alone, run_interleaved_batched,
                     tiny_interleaved_translator, tiny_translator)
from simulmt.core.engine import Engine, run_batched
from simulmt.core.layouts import (Conversation, Expost, ExpostPositions, ExpostSeesEarlier, GroupPositions,
                                  GroupPositionsOverlap, Interleaved, NaiveReuse, PrefixRecompute)
from simulmt.core.learned_policy import Learned, PolicyHead
from simulmt.core.policies import ReadN, Scheduled, WaitK, wait_k_delays
from simulmt.core.stream import Stream
from tiny_models import CORPUS, set_execution

TOLERANCE = 1e-5  # float32, relative to the largest logit
SOURCES = [line for line in CORPUS if line.split()][:4]
TEXT_MIX = [(Expost(slot=4), WaitK(1)), (Expost(slot=16), WaitK(3)), (PrefixRecompute(), WaitK(2)),
            (GroupPositions(phi=300), WaitK(2)), (Conversation(), ReadN(2, max_segment_words=2)),
            (NaiveReuse(), WaitK(2)), (ExpostPositions(slot=4), WaitK(1)), (ExpostSeesEarlier(slot=4), WaitK(1))]


def head_for(tr, seed: int = 1) -> PolicyHead:
    torch.manual_seed(seed)
    return PolicyHead(torch.randn(2, tr.model.config.hidden_size), torch.zeros(2))


def run(monkeypatch, tr, text, layout, policy, speculate: bool, **kwargs):
    set_execution(monkeypatch, tr, speculate=speculate)
    session = tr.session(layout, policy, record=True, **kwargs)
    session.run(text)
    return session


def assert_same_output(off, on):
    a, b = off.result(), on.result()
    assert (b.prediction, b.delays, b.error) == (a.prediction, a.delays, a.error)
    assert len(on.proposals) == len(off.proposals)
    for p, q in zip(off.proposals, on.proposals):
        assert p.context == q.context and p.token == q.token
        scale = max(1.0, float(p.logits.abs().max()))
        assert float((p.logits - q.logits).abs().max()) <= TOLERANCE * scale
    assert (a.speculated, a.speculated_kept) == (0, 0)
    assert 0 <= b.speculated_kept <= b.speculated
    assert b.tokens_fed == a.tokens_fed + b.speculated - b.speculated_kept
    assert b.forward_calls <= a.forward_calls
    assert (b.cache_crops, b.refed_tokens) == (a.cache_crops, a.refed_tokens)  # a wrong guess is not a crop


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_guesses_change_nothing_but_the_forwards_in_every_text_layout(monkeypatch, arch):
    tr = tiny_translator(arch)
    saved = kept = 0
    for i, (layout, policy) in enumerate(TEXT_MIX):
        text = SOURCES[i % len(SOURCES)]
        off = run(monkeypatch, tr, text, layout, policy, False)
        on = run(monkeypatch, tr, text, layout, policy, True)
        assert_same_output(off, on)
        saved += off.forward_calls - on.forward_calls
        kept += on.result().speculated_kept
        assert off.forward_calls - on.forward_calls == on.answers_from_guesses  # each answer used saved a forward
    assert kept > 0 and saved > 0


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_guesses_in_the_interleaved_layout_with_wait_k_and_a_learned_policy(monkeypatch, arch):
    """With a learned policy the forward that feeds what was read (for its hidden state) also feeds the opener
    and the draft: a WRITE then needs no forward of its own, a READ drops them."""
    tr = tiny_interleaved_translator(arch)
    layout = Interleaved()
    results = []
    for policy in (WaitK(2), Learned(0.5, head_for(tr)), Learned(0.3, head_for(tr, 2))):
        for text in SOURCES[:3]:
            off = run(monkeypatch, tr, text, layout, policy, False)
            on = run(monkeypatch, tr, text, layout, policy, True)
            assert_same_output(off, on)
            results.append((policy, off.result(), on.result()))
    learned = [(a, b) for p, a, b in results if isinstance(p, Learned)]
    assert sum(b.speculated_kept for _, b in learned) > 0
    assert sum(a.forward_calls - b.forward_calls for a, b in learned) > 0
    assert any(b.speculated > b.speculated_kept for _, _, b in results)  # wrong guesses happen, and cost no crop


def test_a_teacher_forced_guess_is_always_right(monkeypatch):
    """Teacher forcing knows the next token: every guess of it after a READ is placed, and each saves the forward
    of its own. (Read-ahead, off here, guesses that a word ends, which teacher forcing does not tell.)"""
    tr = tiny_translator("llama")
    layout = Expost(slot=16)
    delays = wait_k_delays(1, len(SOURCE.split()), len(TARGET.split()))
    forced = forced_tokens(tr.training_examples(layout, SOURCE, TARGET, delays)[0], tr.fmt.end_id)
    set_execution(monkeypatch, tr, read_ahead=False)
    off = run(monkeypatch, tr, SOURCE, layout, Scheduled(tuple(delays)), False, forced=forced)
    on = run(monkeypatch, tr, SOURCE, layout, Scheduled(tuple(delays)), True, forced=forced)
    assert_same_output(off, on)
    b = on.result()
    assert b.speculated > 0 and b.speculated_kept == b.speculated
    assert off.forward_calls - on.forward_calls == on.answers_from_guesses > 0


def test_batched_streams_guess_as_one_stream_does():
    """A batch with guesses in several rows at once: every stream equals itself run alone."""
    tr = tiny_interleaved_translator("llama")
    head = head_for(tr)
    jobs = [(SOURCES[i % len(SOURCES)], Learned(0.5, head) if i % 2 else WaitK(1 + i % 3)) for i in range(6)]
    alone = run_interleaved_alone(tr, jobs)
    streams = run_interleaved_batched(tr, jobs)
    for a, b in zip(alone, streams):
        ra, rb = a.result(), b.result()
        assert (rb.prediction, rb.delays) == (ra.prediction, ra.delays)
        assert (rb.forward_calls, rb.tokens_fed, rb.speculated, rb.speculated_kept) == (
            ra.forward_calls, ra.tokens_fed, ra.speculated, ra.speculated_kept)
        assert len(a.proposals) == len(b.proposals)
        for p, q in zip(a.proposals, b.proposals):
            assert p.context == q.context and p.token == q.token
            assert float((p.logits - q.logits).abs().max()) <= TOLERANCE * max(1.0, float(p.logits.abs().max()))
    assert sum(s.result().speculated for s in streams) > 0


@pytest.mark.parametrize("arch", ["gemma3", "mistral", "llama"])
def test_an_alternative_the_layout_places_takes_the_guess_s_place(monkeypatch, arch):
    """The draft's alternatives (the model's next choices) sit at the draft's position without seeing it; when the
    layout places one, its keys move into the draft's cache slot and its answer is used. gemma3 and mistral slide
    their attention windows (6 and 8 keys, shorter than these sentences): an alternative's window is the draft's."""
    from simulmt.core.batch_cache import BatchKVCache

    moves = []
    move = BatchKVCache.move
    monkeypatch.setattr(BatchKVCache, "move", lambda cache, row, a, b: (moves.append(a - b), move(cache, row, a, b)))
    tr, tri = tiny_translator(arch), tiny_interleaved_translator(arch)
    for t in (tr, tri):  # (with the whole source at hand a read-ahead would stand in for drafts)
        set_execution(monkeypatch, t, read_ahead=False)
    jobs = [(tr, layout, policy) for layout, policy in TEXT_MIX] + [
        (tri, Interleaved(), WaitK(1)), (tri, Interleaved(), Learned(0.5, head_for(tri))),
        (tri, Interleaved(), Learned(0.3, head_for(tri, 2)))]
    kept = {}
    for alternatives in (0, 2):
        for t in (tr, tri):
            set_execution(monkeypatch, t, alternatives=alternatives)
        kept[alternatives] = 0
        for i, (t, layout, policy) in enumerate(jobs):
            for text in (SOURCES[i % len(SOURCES)], SOURCES[(i + 1) % len(SOURCES)]):
                off = run(monkeypatch, t, text, layout, policy, False)
                on = run(monkeypatch, t, text, layout, policy, True)
                assert_same_output(off, on)
                assert off.forward_calls - on.forward_calls == on.answers_from_guesses
                kept[alternatives] += on.result().speculated_kept
    assert moves and set(moves) <= {1, 2}  # alternatives were placed (one or two slots after the draft)
    assert kept[2] > kept[0]


def test_a_learned_policy_that_reads_on_costs_no_lm_head(monkeypatch):
    """The forward that feeds a unit for the policy's decision also feeds the guesses, whose logits are wanted
    only if the policy writes: on a READ the engine skips the LM head (``ForwardRequest.logits_if``)."""
    tr = tiny_interleaved_translator("llama")
    hidden = tr.model.config.hidden_size
    reads = Learned(0.5, PolicyHead(torch.zeros(2, hidden), torch.tensor([10.0, -10.0])))  # p(WRITE) ~ 0
    received = []
    receive = Stream.receive
    monkeypatch.setattr(Stream, "receive", lambda self, logits, *a, **k: (
        received.append((self.source_finished, self.pending.speculative, logits is None)),
        receive(self, logits, *a, **k)))
    off = run(monkeypatch, tr, SOURCES[0], Interleaved(), reads, False)
    received.clear()
    on = run(monkeypatch, tr, SOURCES[0], Interleaved(), reads, True)
    assert_same_output(off, on)
    decisions = [r for r in received if not r[0]]  # forwards before the whole source was read: the policy's
    assert len(decisions) == len(SOURCES[0].split()) - 1 and all(s > 0 for _, s, _ in decisions)  # (with guesses)
    assert all(no_logits for _, _, no_logits in decisions)
    assert not any(no_logits for finished, _, no_logits in received if finished)


def test_a_forward_shared_by_several_streams_feeds_no_alternatives(monkeypatch):
    """Alternatives' rows would cost every stream of a shared forward: the engine serves such a round without them
    (each stream is told what was served); the outputs are those of each stream alone with its alternatives."""
    tr = tiny_interleaved_translator("gemma3")
    # (with the whole source at hand a read-ahead would stand in for drafts)
    set_execution(monkeypatch, tr, alternatives=2, read_ahead=False)
    jobs = [(SOURCES[i % len(SOURCES)], WaitK(1 + i % 2)) for i in range(4)]
    alone = [run(monkeypatch, tr, text, Interleaved(), policy, True) for text, policy in jobs]
    assert any(s.result().speculated > s.result().speculated_kept + 1 for s in alone)  # alternatives were fed
    fed = []
    receive = Stream.receive
    monkeypatch.setattr(Stream, "receive", lambda self, logits, flops, features=None, served=None, **k: (
        fed.append((self.pending.alternatives, served.alternatives)),
        receive(self, logits, flops, features, served, **k)))
    streams = run_interleaved_batched(tr, jobs)
    assert any(posted > 0 and got == 0 for posted, got in fed)  # posted, and served without them
    for a, b in zip(alone, streams):
        ra, rb = a.result(), b.result()
        assert (rb.prediction, rb.delays) == (ra.prediction, ra.delays)
        for p, q in zip(a.proposals, b.proposals):
            assert p.context == q.context and p.token == q.token


def test_a_policy_error_in_a_shared_forward_fails_its_stream_alone():
    """The engine asks a learned policy whether it writes (to skip the LM head) inside a forward shared with other
    streams: a policy that cannot decide fails its own stream, at its own step, not the round."""
    tr = tiny_interleaved_translator("llama")
    streams = []
    for i, policy in enumerate([WaitK(2), Learned(0.5), WaitK(1)]):  # the learned one has no head: it cannot decide
        stream = tr.new_stream(Interleaved(), policy)
        stream.push(SOURCES[i].split(), finished=True)
        streams.append(stream)
    run_batched(streams, Engine(tr.runner), batch_size=3)
    assert streams[1].error is not None and "policy head" in str(streams[1].error)
    for i in (0, 2):
        assert streams[i].error is None and streams[i].done and streams[i].result().prediction


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_read_whose_source_is_here_is_fed_with_the_last_target_token(monkeypatch, arch):
    """Read-ahead: with the whole source at hand, wait-k's reads between target words are fed, as a guess, in the
    forward of the word's last token (what the READ closes, the unit, the next opener): the same output, fewer
    forwards, each saved forward an answer used at a guessed token. Live, word by word, no read is at hand: nothing
    is fed ahead."""
    tr = tiny_interleaved_translator(arch)
    saved = 0
    for text in SOURCES[:3]:
        for k in (1, 2):
            set_execution(monkeypatch, tr, read_ahead=False)
            off = run(monkeypatch, tr, text, Interleaved(), WaitK(k), True)
            set_execution(monkeypatch, tr, read_ahead=True)
            on = run(monkeypatch, tr, text, Interleaved(), WaitK(k), True)
            a, b = off.result(), on.result()
            assert (b.prediction, b.delays) == (a.prediction, a.delays)
            assert [(p.context, p.token) for p in off.proposals] == [(p.context, p.token) for p in on.proposals]
            saved += a.forward_calls - b.forward_calls
            assert b.forward_calls <= a.forward_calls
    assert saved > 0
    live = tr.session(Interleaved(), WaitK(1), record=True)
    fed = []
    receive = Stream.receive
    monkeypatch.setattr(Stream, "receive", lambda self, *a, **k: (
        fed.append([t.role.name for t in self.pending.tokens]), receive(self, *a, **k)))
    for word in SOURCES[0].split():  # one word at a time: the stream waits for each
        live.push([word])
        list(live.advance())
    mid_word = [roles for roles in fed if roles[0] == "TARGET"]
    assert mid_word and all(set(roles) == {"TARGET"} for roles in mid_word)  # no source fed after a target token


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_read_ahead_guess_is_answered_at_its_last_token_alone(monkeypatch, arch):
    """What a read places before the next target (the marker a READ closes, the unit, the opener) asks for no
    proposal: a read-ahead guess gets LM head rows at the list's last token and the guess's last, not at each guessed
    token. Every forward's logits have exactly the rows its requests' answers name, and the outputs are those of
    streaming without guesses."""
    tr = tiny_interleaved_translator(arch)
    requests, rows = [], []
    receive = Stream.receive
    monkeypatch.setattr(Stream, "receive",
                        lambda self, *a, **k: (requests.append(self.pending), receive(self, *a, **k)))
    forward = tr.runner.forward_packed

    def counted(queries, cache, wants):
        out = forward(queries, cache, wants)
        rows.append((len(queries.ids), queries.last.tolist(), None if out[0] is None else out[0].shape[0]))
        return out
    monkeypatch.setattr(tr.runner, "forward_packed", counted)
    for text in SOURCES[:3]:
        off = run(monkeypatch, tr, text, Interleaved(), WaitK(1), False)
        start = len(requests)
        on = run(monkeypatch, tr, text, Interleaved(), WaitK(1), True)
        assert_same_output(off, on)
        assert on.result().forward_calls < off.result().forward_calls
        ahead = [r for r in requests[start:] if r.speculative and not r.inner_answers]
        assert ahead and all(r.speculative >= 2 and r.answered == 2 for r in ahead)  # guesses of several tokens
        assert on.result().forward_calls + on.answers_from_guesses == off.result().forward_calls  # answers used
    # one stream, one request per forward: the LM head rows are the request's answers, at the queries it names (a
    # read-ahead guess: the list's last token and the guess's last, not the tokens between)
    assert [n for _, _, n in rows] == [r.answered if r.logits else None for r in requests]
    assert [last for _, last, _ in rows] == [[fed + at for at in r.answer_offsets()] for (fed, _, _), r in
                                             zip(rows, requests)]
    assert any(len(last) == 2 and last[1] - last[0] > 1 for _, last, _ in rows)  # (tokens between: not answered)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_layout_s_read_keeps_list_skips_only_guesses_that_could_not_be_right(monkeypatch, arch):
    """``Layout.read_keeps_list`` spares the placing of a read-ahead guess where the read would take placed tokens
    back.
    Asked to say True everywhere (as a layout that does not know), every stream feeds the same tokens in the same
    forwards: no guess it skipped would have been used. And where it says False, the guess made anyway is empty."""
    tr = tiny_translator(arch)
    said_false = 0
    for i, (layout, policy) in enumerate(TEXT_MIX + [(Expost(slot=2), WaitK(1)), (GroupPositionsOverlap(), WaitK(1))]):
        text = SOURCES[i % len(SOURCES)]
        hinted = run(monkeypatch, tr, text, layout, policy, True)
        told = type(layout).read_keeps_list
        asked = []

        def always(self, state, unit, moving_last=False):
            asked.append(told(self, state, unit, moving_last))
            return True
        monkeypatch.setattr(type(layout), "read_keeps_list", always)
        empty_guesses = []
        guess = Stream._reading_guess

        def watched(self):
            asked.clear()
            out = guess(self)
            if asked and not asked[0]:
                empty_guesses.append(out[0] == ())
            return out
        monkeypatch.setattr(Stream, "_reading_guess", watched)
        plain = run(monkeypatch, tr, text, layout, policy, True)
        monkeypatch.undo()
        a, b = hinted.result(), plain.result()
        assert (a.prediction, a.delays) == (b.prediction, b.delays)
        assert (a.forward_calls, a.tokens_fed, a.speculated, a.speculated_kept) == (
            b.forward_calls, b.tokens_fed, b.speculated, b.speculated_kept)
        assert all(empty_guesses)
        said_false += len(empty_guesses)
    assert said_false > 0  # (the hint did skip guesses)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_expost_reads_ahead_by_placing_its_last_target_token_again(monkeypatch, arch):
    """Expost moves the last target token after the source a read places, so its read-ahead guess places that
    token again after the new source: where the word ends, the first copy leaves the cache row and the read costs
    no forward of its own. The output is the same as without it (and without any guess), in fewer forwards, on
    one stream and batched."""
    tr = tiny_translator(arch)
    for layout, policy in [(Expost(slot=16), WaitK(3)), (Expost(slot=4), WaitK(1)), (GroupPositions(phi=300), WaitK(2))]:
        texts = SOURCES
        before = [run(monkeypatch, tr, text, layout, policy, True) for text in texts]  # (opt-in: off by default)
        set_execution(monkeypatch, tr, moved_guesses=True)
        now = [run(monkeypatch, tr, text, layout, policy, True) for text in texts]
        off = [run(monkeypatch, tr, text, layout, policy, False) for text in texts]
        for a, b, c in zip(before, now, off):
            assert_same_output(c, b)
            ra, rb = a.result(), b.result()
            assert (rb.prediction, rb.delays) == (ra.prediction, ra.delays)
            assert (rb.cache_crops, rb.refed_tokens) == (ra.cache_crops, ra.refed_tokens)
        saved = sum(a.forward_calls - b.forward_calls for a, b in zip(before, now))
        assert saved > 0, layout.describe()
        streams = []
        for text in texts:
            stream = tr.new_stream(layout, policy)
            stream.push(text.split(), finished=True)
            streams.append(stream)
        batched = run_batched(streams, Engine(tr.runner), batch_size=3)
        for s, b in zip(batched, now):
            assert (s.result().prediction, s.result().delays) == (b.result().prediction, b.result().delays)
        monkeypatch.undo()
