"""Decoding never writes garbage: an early end under wait-k is a READ, special tokens and markup are never
proposed, a phrase cannot loop, and a sentence's target tokens are bounded (issue: quality on real talks).

Each test steers a tiny random model with a forward hook that adds a large bias to chosen logits, so the model
"wants" exactly the misbehaviour under test; each test fails without its fix.
"""

from __future__ import annotations

import pytest

from helpers import SOURCE
from simulmt.core.policies import WaitK
from simulmt.core.session import DecodeConfig, repeated_ngram_bans
from simulmt.translator import Translator
from simulmt.core.vocabulary import mark_special_tokens, special_token_ids
from tiny_models import make_model, make_tokenizer

X = len(SOURCE.split())


def steered(prefer, arch: str = "llama", extra_tokens: tuple[str, ...] = ()) -> Translator:
    """A tiny translator whose model adds +100 to the logit of ``prefer(last token fed)`` at every proposal."""
    tok = make_tokenizer(chat=True)
    if extra_tokens:
        tok = tok.__class__.from_pretrained(_saved(tok))  # a private copy: the cached tokenizer stays as it is
        tok.add_tokens(list(extra_tokens))
    tr = Translator(make_model(arch, len(tok)), tok, name=f"steered-{arch}")
    forward = tr.runner.forward_packed

    def steered_forward(queries, *args, **kwargs):
        answer = forward(queries, *args, **kwargs)
        for row, query in enumerate(queries.last.tolist()):
            target = prefer(int(queries.ids[query]))
            if target is not None:
                answer.logits[row, target] += 100.0
        return answer

    tr.runner.forward_packed = steered_forward  # the model side of the engine: one call per forward
    return tr


def _saved(tok, _cache={}):
    import tempfile

    if "dir" not in _cache:
        _cache["dir"] = tempfile.mkdtemp(prefix="simulmt-tok-")
        tok.save_pretrained(_cache["dir"])
    return _cache["dir"]


def word_ids(tr: Translator, n: int) -> list[int]:
    """``n`` distinct tokens that each start a word made of letters."""
    found = []
    for i in range(len(tr.tokenizer)):
        text = tr.tokenizer.decode([i]).strip()
        if tr.word_starts[i] and text.isalpha() and len(text) > 2 and text not in found:
            found.append(text)
            if len(found) == n:
                return [tr.tokenizer.convert_tokens_to_ids(tr.tokenizer.tokenize(" " + t))[0] for t in found]
    raise AssertionError("the tiny vocabulary has too few whole-word tokens")


def test_an_early_end_under_wait_k_is_a_read_not_a_forced_word():
    tr = steered(lambda last: None)
    end = tr.fmt.end_id
    tr = steered(lambda last: end)  # the model always wants to stop
    result = tr.translate(SOURCE, "expost", WaitK(3))
    # it stopped at every step before the source ended: each stop was a READ, then the sentence ended
    assert result.error is None
    assert result.prediction == "" and result.delays == []


def test_after_an_early_end_the_model_writes_again_once_it_has_read_more():
    tr0 = steered(lambda last: None)
    end, (das,) = tr0.fmt.end_id, word_ids(tr0, 1)
    opener_last = tr0.fmt.target_opener[-1]
    ends = []

    def prefer(last):  # the first proposal after the opener is an end, every other one a word
        if last == opener_last and not ends:
            ends.append(last)
            return end
        return das

    tr = steered(prefer)
    result = tr.translate(SOURCE, "expost", WaitK(1), config=DecodeConfig(no_repeat_ngram=0))
    assert result.prediction.split()[0] == tr0.tokenizer.decode([das]).strip()
    assert result.delays[0] >= 2  # the first proposal (at 1 word read) was an end: it read before writing
    assert result.delays == sorted(result.delays)
    assert all(d >= min(1 + j, X) for j, d in enumerate(result.delays))  # never earlier than wait-k


def test_early_ends_are_counted_with_their_cause_and_banned_on_request():
    """Each end before the source finished is logged (words written, cause, after a new slot); with
    ``early_end="ban"`` none is proposed: a pure wait-k schedule."""
    tr = steered(lambda last: None)
    end = tr.fmt.end_id
    tr = steered(lambda last: end)  # the model always wants to stop
    read = tr.translate(SOURCE, "expost", WaitK(3))
    assert [cause for _, cause, _ in read.early_ends] == ["end"] * (X - 3)  # at every read point from k to X - 1
    assert all(words == 0 and not header for words, _, header in read.early_ends) and read.header_words == 0
    banned = tr.translate(SOURCE, "expost", WaitK(3), config=DecodeConfig(early_end="ban", no_repeat_ngram=0))
    assert banned.early_ends == [] and banned.prediction  # it wrote: its best token that is not an end
    assert banned.delays[:X - 3] == [3 + j for j in range(X - 3)]  # exactly wait-3 while source is left
    with pytest.raises(Exception, match="early_end"):
        DecodeConfig(early_end="never")


def test_an_end_forced_by_the_repeat_rule_is_logged_as_the_rules():
    tr0 = steered(lambda last: None)
    (das,) = word_ids(tr0, 1)
    tr = steered(lambda last: das)  # the same word again and again: the 4-gram rule ends it
    result = tr.translate(SOURCE, "expost", WaitK(1))
    causes = {cause for _, cause, _ in result.early_ends}
    assert "repeat" in causes and causes <= {"repeat", "end", "newline", "bound"}


@pytest.mark.parametrize("token", ["<start_of_image>", "</i>", "[multimodal]"])
def test_special_and_markup_tokens_are_never_proposed(token):
    tr0 = steered(lambda last: None, extra_tokens=(token,))
    special = tr0.tokenizer.convert_tokens_to_ids(token)
    assert special in special_token_ids(tr0.tokenizer)  # an added, unflagged markup token counts as special
    tr = steered(lambda last: special, extra_tokens=(token,))
    session = tr.session("expost", WaitK(3))
    session.run(SOURCE)
    written = [t for w in session.written for t in w.tokens]
    assert written and special not in written
    assert token not in session.result().prediction


def test_the_loader_flags_markup_tokens_as_special_in_the_tokenizer():
    tok = make_tokenizer(chat=True).__class__.from_pretrained(_saved(make_tokenizer(chat=True)))
    tok.add_tokens(["<start_of_image>", "<em>"])
    ids = tok.convert_tokens_to_ids(["<start_of_image>", "<em>"])
    assert tok.decode(ids, skip_special_tokens=True) != ""  # unflagged: decoded into the text
    assert mark_special_tokens(tok) == 2
    assert tok.decode(ids, skip_special_tokens=True) == ""
    assert set(ids) <= set(tok.all_special_ids)


def test_a_phrase_cannot_loop():
    tr0 = steered(lambda last: None)
    cycle = word_ids(tr0, 3)
    phrase = tr0.tokenizer.decode(cycle).strip()
    nxt = {a: b for a, b in zip(cycle, cycle[1:] + cycle[:1])}
    prefer = lambda last: nxt.get(last, cycle[0])  # noqa: E731  (a b c a b c ...)
    looping = steered(prefer).translate(SOURCE, "expost", WaitK(3), config=DecodeConfig(no_repeat_ngram=0))
    assert looping.prediction.count(phrase) >= 3  # without the guard it loops
    session = steered(prefer).session("expost", WaitK(3))
    session.run(SOURCE)
    tokens = session.target_tokens
    grams = [tuple(tokens[i:i + 4]) for i in range(len(tokens) - 3)]
    assert len(grams) == len(set(grams))  # no 4-token sequence twice
    assert session.result().prediction.count(phrase) <= 2


def test_repeated_ngram_bans_golden():
    assert repeated_ngram_bans([1, 2, 3, 1, 2], 3) == {3}
    assert repeated_ngram_bans([1, 2, 3, 1, 2], 4) == set()
    assert repeated_ngram_bans([1, 2, 3, 1, 2, 3], 4) == {1}
    assert repeated_ngram_bans([5, 5, 5], 2) == {5}
    assert repeated_ngram_bans([1, 2, 1, 3, 1], 2) == {2, 3}
    assert repeated_ngram_bans([1, 2], 0) == set()


def test_target_tokens_are_bounded_not_only_words():
    tr0 = steered(lambda last: None)
    (piece,) = [i for i in range(len(tr0.tokenizer)) if not tr0.word_starts[i] and i not in tr0.fmt.stop_ids
                and not tr0.special[i]][:1]
    tr = steered(lambda last: piece)  # never ends a word, never ends the sentence
    config = DecodeConfig(no_repeat_ngram=0, max_tokens_per_word=1000, max_tokens_a=1.0, max_tokens_b=5)
    session = tr.session("expost", WaitK(2), config=config)
    session.run("one two three")
    source_tokens = session.state.source_tokens
    assert len(session.target_tokens) == config.max_target_tokens(source_tokens)
    assert session.done and session.result().error is None


def test_teacher_forcing_follows_the_forced_tokens_past_every_decoding_bound():
    """A replay (bench's "same output" check, the parity suite) forces a whole output through another policy: the
    forced tokens, not the bounds, say where words and the sentence end. Here the output has 8 words where the word
    cap allows 3 (an output streamed under another policy may pass the cap before its source ends), and one word
    longer than the per-word token cap."""
    from helpers import forced_tokens, tiny_translator
    from simulmt.core.layouts import Expost
    from simulmt.core.policies import Offline
    from simulmt.finetune.schedules import offline

    tr = tiny_translator("llama")
    source, target = "two words", "eins zwei drei vier fünf sechs sieben achtundachtzigtausendneunhundert"
    example = tr.training_examples(Expost(16), source, target, offline(2, 8))[-1]
    longest = max(sum(t.unit == j for t in example.tokens if t.role.value == "target") for j in range(8))
    config = DecodeConfig(max_len_a=1.0, max_len_b=1, max_tokens_per_word=max(1, longest - 1))
    free = tr.session(Expost(16), Offline(), config=config).run(source)
    assert len(free.prediction.split()) <= 3  # the bounds hold when the model decodes freely
    forced = tr.session(Expost(16), Offline(), config=config, forced=forced_tokens(example, tr.fmt.end_id))
    assert forced.run(source).prediction == target


def interleaved_steered_to_end_of_write(markers: tuple[str, ...], one_word_chunks: bool = False) -> Translator:
    """A tiny interleaved translator (with ``markers``) whose model always wants to end its chunk
    (``one_word_chunks``: after writing one word; right after end-of-read it wants that word)."""
    import copy

    from simulmt.core.markers import add_interleaved_markers

    tok = copy.deepcopy(make_tokenizer(chat=True))  # the shared tokenizer must not get the markers
    model = make_model("llama", len(tok))
    add_interleaved_markers(model, tok, markers)
    tr = Translator(model, tok, name="steered-interleaved")
    forward, eow = tr.runner.forward_packed, tr.fmt.end_of_write

    words = word_ids(tr, 7)  # the word written after end-of-read varies with its position (no repeated phrase)

    def steered_forward(queries, *args, **kwargs):
        answer = forward(queries, *args, **kwargs)
        for row, query in enumerate(queries.last.tolist()):
            opened = int(queries.ids[query]) == tr.fmt.end_of_read
            word = words[int(queries.positions[query]) % len(words)]
            answer.logits[row, word if one_word_chunks and opened else eow] += 100.0
        return answer

    tr.runner.forward_packed = steered_forward
    return tr


@pytest.mark.parametrize("policy", ["offline", "wait-k"])
def test_end_of_write_cannot_end_the_translation_once_the_source_is_complete(policy):
    """With the end-of-translation marker, end-of-write (read more) is not proposed once nothing is left to read:
    a model that always wants it still writes a translation, and ends it otherwise. Adapters with two markers
    end as before: at the first end-of-write after the source is complete."""
    from simulmt.core.markers import MARKERS, MARKERS_V1

    new = interleaved_steered_to_end_of_write(MARKERS)
    session = new.session("interleaved", policy, record=True, k=3)
    session.run(SOURCE)
    result = session.result()
    assert result.prediction and result.error is None
    eow = [p for p in session.proposals if p.token == new.fmt.end_of_write]
    if policy == "offline":  # every proposal comes after the whole source was read
        assert not eow
    else:  # end-of-write proposed while source was left is a READ; the last proposal is not one
        assert len(eow) <= len(SOURCE.split()) and session.proposals[-1].token != new.fmt.end_of_write
    old = interleaved_steered_to_end_of_write(MARKERS_V1)
    session = old.session("interleaved", policy, record=True, k=3)
    session.run(SOURCE)
    assert session.proposals[-1].token == old.fmt.end_of_write
    assert len(session.result().prediction.split()) < len(result.prediction.split())


def test_an_end_of_write_held_while_source_was_left_is_proposed_again_once_the_source_ends():
    """A live stream that had read every word it was given and wanted to read more (its end-of-write held, as wait-k
    reads after a word): when the source then ends
    with no new word, its held end-of-write is not taken as the end; the translation equals the one of the whole
    source given at once."""
    from simulmt.core.markers import MARKERS

    tr = interleaved_steered_to_end_of_write(MARKERS, one_word_chunks=True)
    whole = tr.session("interleaved", "wait-k", k=3)
    whole.run(SOURCE)
    live = tr.session("interleaved", "wait-k", k=3)
    for word in SOURCE.split():  # word by word: after each word it writes, it wants to read the next
        live.push([word])
        list(live.advance())
    live.push([], finished=True)
    list(live.advance())
    assert live.result().prediction == whole.result().prediction


def test_the_decoding_rules_work_where_the_logits_are():
    """On a GPU the logits stay on the device that computed them, and the rules' tables go there (once): the CUDA
    path failed on this until a lent GPU ran the tests (SIMULMT_TEST_DEVICE=cuda). Here the meta device stands in
    for any device that is not the CPU."""
    import torch

    tok = make_tokenizer(chat=True)
    tr = Translator(make_model("llama", len(tok)), tok, name="tiny-llama")
    stream = tr.new_stream(policy="wait-k", k=3)
    stream.push(SOURCE.split()[:2])
    scores = stream._allowed(torch.zeros(tr.model.config.vocab_size, device="meta"), stream._rules())
    assert scores.device.type == "meta" and scores.shape == (tr.model.config.vocab_size,)
    v = tr.vocabulary
    best = v.best(torch.zeros(3, tr.model.config.vocab_size, device="meta"))  # every row's best tokens, there
    assert best.device.type == "meta" and best.shape == (3, 2)
    for name in ("banned", "stops", "inside_word"):
        assert v.bias(name).device.type == "cpu"
        assert v.bias(name, "meta").device.type == "meta" and v.bias(name, "meta").shape == v.bias(name).shape
        assert v.bias(name, torch.device("meta")) is v.bias(name, "meta")  # copied once


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_bans_kept_as_the_target_grows_are_the_golden_bans_at_every_proposal(n, monkeypatch):
    from simulmt.core.stream import Stream

    tr0 = steered(lambda last: None)
    cycle = word_ids(tr0, 3)
    nxt = {a: b for a, b in zip(cycle, cycle[1:] + cycle[:1])}
    seen = []
    propose = Stream._propose

    def checked(self, answer):
        seen.append((set(self._repeat_bans()), repeated_ngram_bans(self.target_tokens, n)))  # (a copy: it grows)
        return propose(self, answer)

    monkeypatch.setattr(Stream, "_propose", checked)
    steered(lambda last: nxt.get(last, cycle[0])).translate(SOURCE, "expost", WaitK(3),
                                                            config=DecodeConfig(no_repeat_ngram=n))
    assert len(seen) > 5 and any(golden for _, golden in seen)  # (the looping model meets the rule)
    assert all(kept == golden for kept, golden in seen)


def test_a_written_words_text_is_its_decoded_tokens_memoised_per_tokenizer(monkeypatch):
    from simulmt.core import vocabulary

    tok = make_tokenizer(chat=True)
    vocabulary._MEMOS.pop(tok, None)  # (a tokenizer shared with other tests: its memo starts empty here)
    ids = tuple(tok(" Hallo Welt", add_special_tokens=False)["input_ids"])
    special = (tok.eos_token_id, *ids)
    assert vocabulary.word_text(tok, ids) == tok.decode(list(ids), skip_special_tokens=True).strip()
    assert vocabulary.word_text(tok, special) == vocabulary.word_text(tok, ids)  # special tokens left out
    calls = []
    monkeypatch.setattr(tok, "decode", lambda *a, **k: calls.append(a) or "x")
    assert vocabulary.word_text(tok, ids) != "x" and not calls  # memoised: not decoded again
    monkeypatch.setattr(vocabulary, "WORDS_KEPT", len(vocabulary.memo(tok, "word_text")))
    assert vocabulary.word_text(tok, ids[:1]) == "x" and vocabulary.word_text(tok, ids[:1]) == "x"
    assert len(calls) == 2  # a full memo keeps no more: decoded each time


def test_source_words_are_tokenized_once_per_tokenizer_with_the_ids_of_a_plain_call(monkeypatch):
    from simulmt.core import prompt_format

    from simulmt.core import vocabulary

    tr = steered(lambda last: None)
    vocabulary._MEMOS.pop(tr.tokenizer, None)  # (a tokenizer shared with other tests: its memo starts empty here)
    words = ["Zwei", "Hunde", "Zwei", "<eos>", "spielen."]
    calls = []
    text_ids = prompt_format.text_ids
    monkeypatch.setattr(prompt_format, "text_ids", lambda tok, t: calls.append(t) or text_ids(tok, t))
    units = prompt_format.source_units(tr.tokenizer, tr.fmt, words)
    assert units == [text_ids(tr.tokenizer, (" " if i or tr.fmt.source_first_space else "") + w)
                     for i, w in enumerate(words)]  # (a control token's string is spelled out, as text_ids does)
    assert prompt_format.source_units(tr.tokenizer, tr.fmt, words, first_index=1) == [units[2]] + units[1:]
    assert len(calls) == len(set(calls)) == 4 + (not tr.fmt.source_first_space)  # each text once


def test_the_sentence_end_table_and_words_golden():
    from simulmt.core.sentence_ends import has_terminal
    from simulmt.core.vocabulary import sentence_end_table

    tok = make_tokenizer(chat=True)
    table = sentence_end_table(tok, len(tok))
    for text in (".", "?", "!"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert table[ids[-1]], text  # the piece of the mark itself
    assert not table[tok(" garden", add_special_tokens=False)["input_ids"]].any()
    assert not table[sorted(special_token_ids(tok))].any()
    assert [has_terminal(w) for w in ("Ende.", "wirklich?", '"Ja!"', "19.", "Hund,", "z", "...")] == \
        [True, True, True, True, False, False, True]


@pytest.mark.parametrize("k", [1, 3])
def test_a_sentence_end_waits_for_the_sources_under_the_rule(k):
    """A model that wants a full stop after every word: with ``sentence_end="source"`` the target ends no sentence
    while the source read so far has ended none (SOURCE has no full stop)."""
    tr0 = steered(lambda last: None)
    stop = tr0.tokenizer(".", add_special_tokens=False)["input_ids"][-1]
    words = word_ids(tr0, 2)
    prefer = lambda last: stop if last in words else words[0]  # noqa: E731  (a word, a full stop, a word, ...)

    def run(rule: str):
        session = steered(prefer).session("expost", WaitK(k), config=DecodeConfig(sentence_end=rule))
        session.run(SOURCE)
        return session

    free, ruled = run("allow"), run("source")
    before_end = lambda s: [w.text for w in s.written if w.delay < X]  # noqa: E731  (source unfinished)
    assert any(t.endswith(".") for t in before_end(free))  # the model does want them
    assert before_end(ruled) and not any(t.endswith(".") for t in before_end(ruled))


def test_the_sentence_end_rule_counts_the_sources_sentences_and_spares_numbers():
    tr = steered(lambda last: None)
    session = tr.session("expost", WaitK(3), config=DecodeConfig(sentence_end="source"))
    s = session
    s.push("It rains. The children play in the garden".split())
    while s.state.units_read < 1:  # "It"
        s._read()
    assert s._ahead_of_source()  # nothing read ends a sentence yet, the target has ended none: it would be ahead
    s._read()  # "rains."
    assert not s._ahead_of_source()  # the source has ended one sentence, the target none
    s.target_sentences = 1
    assert s._ahead_of_source()
    s.current = tr.tokenizer(" 19", add_special_tokens=False)["input_ids"]
    assert not s._ahead_of_source()  # a number's full stop ("am 19. April") is not a sentence end
