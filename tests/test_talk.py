"""A talk as one stream (simulmt.core.talk): sentences cut from the words as they come, earlier pairs as context.

* without context, a talk's sentences are those of the line splitter translated one by one (same words, delays on
  the talk's clock);
* with context, each sentence equals a fresh stream whose prompt holds that context (predictions, delays, and
  every proposal's logits): keeping the cache row across sentences changes nothing but the cost;
* the contexts a talk uses are those of ``context_prompts`` (the rule training uses), on the talk's own output;
* batched talks equal each talk alone; a talk fed word by word equals one given whole, the cuts one word late;
* a long talk runs in a bounded cache row.
"""

from __future__ import annotations

import pytest

from helpers import tiny_translator
from simulmt.core.engine import Engine, run_batched
from simulmt.core.layouts import Conversation, Expost, GroupPositions, PrefixRecompute
from simulmt.core.policies import ReadN, WaitK
from simulmt.core.session import DecodeConfig
from simulmt.core.talk import ContextWindow, context_prompts
from simulmt.errors import SimulmtError
from simulmt.core.translation import merge_translations
from simulmt.text.segment import split_sentences
from tiny_models import CORPUS

SENTENCES = [line.rstrip(".") + "." for line in CORPUS if line.split()][:6]
TALK = " ".join(SENTENCES)
TOLERANCE = 1e-5
LAYOUTS = [Expost(slot=8), PrefixRecompute(), Conversation(), GroupPositions(phi=200)]


def run_talk(tr, layout, policy, window, words=TALK.split(), **kwargs):
    talk = tr.new_talk(layout, policy, window=window, record=True, **kwargs)
    engine = Engine(tr.runner)
    engine.add(talk)
    talk.push(words, finished=True)
    while engine.streams:
        for event in engine.step():
            if event.error is not None:
                raise event.error
    return talk


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: x.name)
def test_without_context_a_talk_is_its_sentences_one_by_one(arch, layout):
    tr = tiny_translator(arch)
    talk = run_talk(tr, layout, WaitK(2), ContextWindow(pairs=0))
    sentences = [" ".join(s) for s in split_sentences(TALK.split())]
    assert len(sentences) == len(SENTENCES) == len(talk.sentences)
    alone = merge_translations(tr.translate_many(sentences, layout, WaitK(2)))
    result = talk.result()
    assert result.prediction == alone.prediction and result.delays == alone.delays
    assert result.source == TALK and result.source_length == len(TALK.split())
    assert result.delays == sorted(result.delays) and result.delays[-1] <= result.source_length


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: x.name)
def test_each_sentence_equals_a_fresh_stream_with_its_context(arch, layout):
    tr = tiny_translator(arch)
    window = ContextWindow(pairs=2, tokens=120)
    talk = run_talk(tr, layout, WaitK(2), window)
    assert len(talk.recorded) == len(SENTENCES)
    prompts = {len(fmt.prompt) for fmt, *_ in talk.recorded}
    assert len(prompts) > 2  # the context grew and was cut back
    pairs = [(source, target) for _, source, target, _ in talk.recorded]
    expected = context_prompts(layout, tr.fmt, pairs, window)  # the training rule, on the talk's own pairs
    for (fmt, _, _, proposals), context, sentence, part in zip(talk.recorded, expected, SENTENCES, talk.sentences):
        assert fmt.prompt == tr.fmt.prompt + context
        fresh = tr.new_stream(layout, WaitK(2), record=True, fmt=fmt)
        fresh.push(sentence.split(), finished=True)
        run_batched([fresh], Engine(tr.runner), 1)
        assert fresh.result().prediction == part.prediction and fresh.result().delays == part.delays
        assert len(fresh.proposals) == len(proposals)
        for p, q in zip(fresh.proposals, proposals):
            assert p.context == q.context and p.token == q.token
            scale = max(1.0, float(p.logits.abs().max()))
            assert float((p.logits - q.logits).abs().max()) <= TOLERANCE * scale


def test_an_interleaved_talk_equals_fresh_streams_with_its_context():
    """The interleaved layout renders a finished pair as its own chunk (``<|end-of-read|>`` ... end)."""
    from helpers import tiny_interleaved_translator
    from simulmt.core.layouts import Interleaved

    tr = tiny_interleaved_translator("llama", two_markers=True)
    window = ContextWindow(pairs=2, tokens=120)
    talk = run_talk(tr, Interleaved(), WaitK(2), window, " ".join(SENTENCES[:4]).split())
    assert tr.fmt.end_of_read in talk.recorded[1][0].prompt
    for (fmt, _, _, proposals), sentence, part in zip(talk.recorded, SENTENCES, talk.sentences):
        fresh = tr.new_stream(Interleaved(), WaitK(2), record=True, fmt=fmt)
        fresh.push(sentence.split(), finished=True)
        run_batched([fresh], Engine(tr.runner), 1)
        assert fresh.result().prediction == part.prediction and fresh.result().delays == part.delays
        assert [p.token for p in fresh.proposals] == [p.token for p in proposals]


@pytest.mark.parametrize("layout", LAYOUTS[:3], ids=lambda x: x.name)  # (gpe: a growing context passes phi)
def test_the_cache_row_keeps_the_context_across_sentences(layout):
    """While the window grows, a sentence does not compute the prompt and context of the sentence before it again:
    only the newest pair (as context) and its own tokens."""
    tr = tiny_translator("llama")
    window = ContextWindow(pairs=8, tokens=4000)  # never overflows here
    talk = run_talk(tr, layout, WaitK(2), window, " ".join(SENTENCES[:4]).split())  # (within 512 positions)
    for i in range(1, 4):
        fmt, before = talk.recorded[i][0], talk.recorded[i - 1][0]
        fresh = tr.new_stream(layout, WaitK(2), fmt=fmt)
        fresh.push(SENTENCES[i].split(), finished=True)
        run_batched([fresh], Engine(tr.runner), 1)
        assert fresh.result().prediction == talk.sentences[i].prediction
        assert fresh.result().tokens_fed - talk.sentences[i].tokens_fed == len(before.prompt)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_batched_talks_equal_each_talk_alone(arch):
    tr = tiny_translator(arch)
    window = ContextWindow(pairs=2, tokens=100)
    texts = [TALK, " ".join(SENTENCES[2:] + SENTENCES[:2]), " ".join(SENTENCES[:3]), ""]
    work = [(Expost(slot=8), WaitK(2)), (PrefixRecompute(), WaitK(3)), (Conversation(), ReadN(2, max_segment_words=3)),
            (Expost(slot=8), WaitK(1))]
    alone = [run_talk(tr, layout, policy, window, text.split()).result() for text, (layout, policy) in zip(texts, work)]
    talks = []
    for text, (layout, policy) in zip(texts, work):
        talk = tr.new_talk(layout, policy, window=window)
        talk.push(text.split(), finished=True)
        talks.append(talk)
    run_batched(talks, Engine(tr.runner), batch_size=3)
    for a, talk in zip(alone, talks):
        b = talk.result()
        assert (b.prediction, b.delays, b.tokens_fed) == (a.prediction, a.delays, a.tokens_fed)
    assert talks[-1].result().prediction == ""


def test_a_talk_fed_word_by_word_cuts_where_one_given_whole_does():
    tr = tiny_translator("llama")
    window = ContextWindow(pairs=2, tokens=200)
    whole = run_talk(tr, Expost(slot=8), WaitK(2), window)
    talk = tr.new_talk(Expost(slot=8), WaitK(2), window=window)
    engine = Engine(tr.runner)
    engine.add(talk)
    words, written = TALK.split(), []
    for i, word in enumerate(words):
        talk.push([word], finished=i + 1 == len(words))
        written += [w for e in engine.run() for w in e.words]
    assert not engine.streams
    assert [len(s.source.split()) for s in talk.sentences] == [len(s.source.split()) for s in whole.sentences]
    assert [w.index for w in written] == list(range(len(written)))  # numbered over the talk
    assert [w.delay for w in written] == sorted(w.delay for w in written)
    result = talk.result()
    assert result.source == TALK and len(result.prediction.split()) == len(result.delays)


def test_context_window_evicts_half_at_once():
    window = ContextWindow(pairs=4, tokens=100)
    assert window.evict([10, 10, 10, 10]) == 0
    assert window.evict([10, 10, 10, 10, 10]) == 3  # 5 pairs > 4: keep 2
    assert window.evict([60, 30]) == 0  # 90 tokens fit
    assert window.evict([60, 30, 20]) == 1  # 110 > 100: keep at most 50 tokens and 2 pairs
    assert window.evict([120]) == 1  # a pair longer than the window is not kept
    assert ContextWindow(pairs=0).evict([1, 2]) == 2
    with pytest.raises(SimulmtError, match="at least 0"):
        ContextWindow(pairs=-1)


def test_a_talk_cuts_long_unpunctuated_input_at_max_words():
    tr = tiny_translator("llama")
    words = TALK.replace(".", "").replace("?", "").split()
    talk = run_talk(tr, Expost(slot=8), WaitK(2), ContextWindow(pairs=1), words, max_words=7)
    assert [len(s.source.split()) for s in talk.sentences[:-1]] == [7] * (len(talk.sentences) - 1)
    assert talk.result().source == " ".join(words)
    with pytest.raises(SimulmtError, match="teacher-forced"):
        tr.runner and __import__("simulmt.core.talk").core.talk.Talk(
            tr.tokenizer, tr.fmt, Expost(), WaitK(2), tr.vocabulary, forced=[(1, 0)])


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def long_talk(tr, sentences: int, window: ContextWindow) -> tuple[int, int, list[int]]:
    """A talk of ``sentences`` sentences: (most tokens its row held, most positions, resident memory at each tenth
    of the talk)."""
    words = " ".join(SENTENCES[i % len(SENTENCES)] for i in range(sentences)).split()
    talk = tr.new_talk(Expost(slot=8), WaitK(2), window=window, config=DecodeConfig(max_len_a=1.0, max_len_b=2))
    engine = Engine(tr.runner)
    engine.add(talk)
    talk.push(words, finished=True)
    most, furthest, memory = 0, 0, []
    while engine.streams:
        engine.step()
        if engine.streams:
            most = max(most, int(engine.cache.lengths[0]))
            furthest = max(furthest, max(t.position for t in talk.fed))
            if len(talk.sentences) >= (len(memory) + 1) * sentences // 10:
                memory.append(resident_bytes())
    assert talk.result().source_length == len(words) and len(talk.sentences) == sentences
    return most, furthest, memory


def test_a_long_talk_runs_in_a_bounded_cache_row():
    tr = tiny_translator("llama")
    window = ContextWindow(pairs=3, tokens=160)
    most, furthest, _ = long_talk(tr, 150, window)  # about 1,000 words
    bound = len(tr.fmt.prompt) + window.tokens + 64 * 3  # the window, and one sentence of at most ~64 tokens each side
    assert most <= bound and furthest <= bound


@pytest.mark.slow
def test_a_two_hour_talk_keeps_its_cache_and_memory_flat():
    """18,000 words (two hours at 150 words a minute): the row never grows past the window and a sentence, and
    the process's memory does not grow with the talk beyond its output (a few MB of words and delays)."""
    tr = tiny_translator("llama")
    window = ContextWindow(pairs=3, tokens=160)
    most, furthest, memory = long_talk(tr, 2700, window)
    bound = len(tr.fmt.prompt) + window.tokens + 64 * 3
    assert most <= bound and furthest <= bound
    assert memory[-1] - memory[1] < 48 * 2**20, [m // 2**20 for m in memory]


TARGETS = ["Das Wetter ist schön.", "Ich möchte Kaffee, bitte.", "Wo ist der Bahnhof?", "Mein Bruder arbeitet.",
           "Wir gehen ins Kino.", "Die Kinder spielen."]


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])
@pytest.mark.parametrize("recipe", ["expost", "prefix"])
def test_training_with_context_lays_out_a_talks_prompts_and_keeps_parity(arch, recipe):
    """Training with context (finetune --context-pairs): each pair's prompt holds the pairs before it in its
    document by the talk's rule, and the training forward of such an example equals streaming with that prompt
    (which a talk's sentence equals: test_each_sentence_equals_a_fresh_stream_with_its_context)."""
    import copy

    from simulmt.core.prompt_format import source_units, word_tokens
    from simulmt.finetune import data
    from simulmt.finetune.recipes import Recipe
    from simulmt.finetune.schedules import Schedule
    from simulmt.finetune.parity import teacher_forced_parity

    tr = tiny_translator(arch)
    window = ContextWindow(pairs=2, tokens=80)
    pairs = [data.Pair(s, t, "one" if i < 4 else "two") for i, (s, t) in enumerate(zip(SENTENCES, TARGETS))]
    r = Recipe(recipe, Schedule("wait-k", (2,)), slot=8)
    formats = data.context_formats(r.layout(), tr.fmt, tr.tokenizer, pairs, window)
    ids = [(tuple(t for u in source_units(tr.tokenizer, tr.fmt, p.source.split()) for t in u),
            tuple(t for j, w in enumerate(p.target.split())
                  for t in word_tokens(tr.tokenizer, w, j > 0 or tr.fmt.target_first_space))) for p in pairs]
    expected = (context_prompts(r.layout(), tr.fmt, ids[:4], window)
                + context_prompts(r.layout(), tr.fmt, ids[4:], window))  # context never crosses documents
    assert [f.prompt for f in formats] == [tr.fmt.prompt + c for c in expected]
    assert formats[4].prompt == tr.fmt.prompt and len(formats[3].prompt) > len(tr.fmt.prompt)
    built = data.build_dataset(r, tr.fmt, tr.tokenizer, pairs, 1024, seed=0, context=window)
    plain = data.build_dataset(r, tr.fmt, tr.tokenizer, pairs, 1024, seed=0)
    assert built.stats.label_tokens == plain.stats.label_tokens and built.stats.tokens > plain.stats.tokens
    for i in (1, 3):  # a sentence with context: training forward == streaming with that prompt
        with_context = copy.copy(tr)
        with_context.fmt = formats[i]
        delays = [min(2 + j, len(pairs[i].source.split())) for j in range(len(pairs[i].target.split()))]
        run = teacher_forced_parity(with_context, r.layout(), pairs[i].source, pairs[i].target, delays)
        assert run.unmatched == 0 and run.labels > 0
        assert run.max_diff <= 1e-4
        assert run.examples[-1].tokens[:len(formats[i].prompt)] == run.session.fed[:len(formats[i].prompt)]


def test_a_failed_sentence_a_bad_word_and_a_step_after_the_end_lose_nothing():
    """A sentence too long for the context fails alone (its words still counted, and read on the talk's clock);
    a word that is not text is refused when pushed, the talk goes on; stepping a finished talk adds nothing."""
    tr = tiny_translator("llama")
    long = "Weather " + " ".join(["weather"] * 599) + "."
    words = (SENTENCES[0] + " " + long + " " + SENTENCES[1]).split()
    talk = tr.talk_session("expost", "wait-k", k=2, max_words=1000)
    with pytest.raises(SimulmtError, match="not valid text"):
        talk.push(["fine", "\ud800"])
    talk.push(words, finished=True)
    list(talk.advance())
    result = talk.result()
    assert [bool(s.error) for s in talk.sentences] == [False, True, False] and "context" in result.error
    assert result.source_length == len(words) == len(result.read_elapsed)
    assert result.read_elapsed == sorted(result.read_elapsed)
    before = (len(talk.sentences), talk.source_before, talk.result().prediction)
    assert talk.step().status.name == "DONE" and list(talk.advance()) == []
    assert (len(talk.sentences), talk.source_before, talk.result().prediction) == before


def test_context_pairs_can_show_other_targets_than_the_labels(tmp_path):
    """finetune --train-context-target FILE: the context pairs show that file's line as their target (the model's own
    translation, as at inference), while each pair's labels stay its reference; the files are line-aligned, an
    empty line is an empty context target (not the reference), and a misaligned file or a use without context is
    refused with a message naming it."""
    from simulmt.core.prompt_format import source_units, word_tokens
    from simulmt.finetune import data
    from simulmt.finetune.options import FinetuneOptions
    from simulmt.finetune.recipes import Recipe
    from simulmt.finetune.schedules import Schedule

    tr = tiny_translator("llama")
    window = ContextWindow(pairs=2, tokens=80)
    own = ["ein Hund", "", "zwei Katzen laufen", "ein Mann", "eine Frau"][:len(SENTENCES)]
    files = {name: tmp_path / name for name in ("src", "tgt", "doc", "own")}
    files["src"].write_text("\n".join(SENTENCES[:5]) + "\n")
    files["tgt"].write_text("\n".join(TARGETS[:5]) + "\n")
    files["doc"].write_text("a\na\na\nb\nb\n")
    files["own"].write_text("\n".join(own) + "\n")
    pairs = data.parallel_files(files["src"], files["tgt"], docids=files["doc"], context_target=files["own"])
    assert [p.target for p in pairs] == [" ".join(t.split()) for t in TARGETS[:5]]
    assert [p.context_target for p in pairs] == own and [p.document for p in pairs] == list("aaabb")
    r = Recipe("expost", Schedule("wait-k", (2,)), slot=8)
    formats = data.context_formats(r.layout(), tr.fmt, tr.tokenizer, pairs, window)

    def ids(source, target):
        return (tuple(t for u in source_units(tr.tokenizer, tr.fmt, source.split()) for t in u),
                tuple(t for j, w in enumerate(target.split())
                      for t in word_tokens(tr.tokenizer, w, j > 0 or tr.fmt.target_first_space)))

    shown = [ids(p.source, o) for p, o in zip(pairs, own)]
    expected = (context_prompts(r.layout(), tr.fmt, shown[:3], window)
                + context_prompts(r.layout(), tr.fmt, shown[3:], window))
    assert [f.prompt for f in formats] == [tr.fmt.prompt + c for c in expected]
    gold = data.context_formats(r.layout(), tr.fmt, tr.tokenizer,
                                [data.Pair(p.source, p.target, p.document) for p in pairs], window)
    assert formats[1].prompt != gold[1].prompt and formats[0].prompt == gold[0].prompt  # (the first has none)
    built = data.build_dataset(r, tr.fmt, tr.tokenizer, pairs, 1024, seed=0, context=window)
    plain = data.build_dataset(r, tr.fmt, tr.tokenizer, [data.Pair(p.source, p.target) for p in pairs], 1024, seed=0)
    assert built.stats.label_tokens == plain.stats.label_tokens  # the labels are the references'
    files["own"].write_text("\n".join(own[:3]) + "\n")
    with pytest.raises(SimulmtError, match="own has 3 lines"):
        data.parallel_files(files["src"], files["tgt"], context_target=files["own"])
    with pytest.raises(SimulmtError, match="--train-context-target goes with"):
        FinetuneOptions(train_source=str(files["src"]), train_target=str(files["tgt"]),
                        train_context_target=str(files["own"]))
