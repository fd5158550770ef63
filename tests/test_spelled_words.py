"""A speech model that reads the words its CTC head spells (simulmt.speech.spelled_words): block by block gives the
whole utterance's best path word for word, words split over blocks are never cut, and such a model streams, batches
and loads like any speech model, with delays at the block that completed each word."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from simulmt.core.policies import WaitK
from simulmt.errors import SimulmtError
from simulmt.speech.ctc import CTCScorer, collapse
from simulmt.speech.model import SPEECH_FILE, SpeechModelCard, SpeechTranslator
from simulmt.speech.spelled_words import SpelledWords, spelled_words

# a toy vocabulary: token id -> piece ("_" starts a word, as sentencepiece's "▁")
PIECES = {10: "_A", 11: "_wo", 12: "man", 13: "_drinks", 14: "_a", 15: "_beer", 16: "."}
VOCAB = sorted(PIECES)
STARTS = frozenset(t for t, piece in PIECES.items() if piece.startswith("_"))


def decode(ids: list[int]) -> str:
    return "".join(PIECES[i] for i in ids).replace("_", " ").lstrip()


def one_hot_scorer() -> CTCScorer:
    """A free head that reads frame f's class off its one-hot input (dimension 1 + vocabulary)."""
    scorer = CTCScorer(VOCAB, torch.zeros(len(VOCAB), 1 + len(VOCAB)), "free")
    with torch.no_grad():
        scorer.free.weight.copy_(10 * torch.eye(1 + len(VOCAB)))
        scorer.free.bias.zero_()
    return scorer


def frames(classes: list[int]) -> torch.Tensor:
    return torch.eye(1 + len(VOCAB))[classes]


def cls(token: int) -> int:
    return VOCAB.index(token) + 1


def test_collapse_is_ctc_s_best_path_and_carries_across_any_split():
    assert collapse([1, 1, 0, 1, 2, 2, 0, 0, 3]) == ([1, 1, 2, 3], 3)
    assert collapse([]) == ([], 0) and collapse([0, 0]) == ([], 0)
    rng = random.Random(0)
    for _ in range(50):
        classes = [rng.choice([0, 0, 1, 2, 3]) for _ in range(rng.randint(0, 20))]
        whole, _ = collapse(classes)
        cut = sorted(rng.sample(range(len(classes) + 1), k=min(3, len(classes) + 1)))
        spelled, previous = [], 0
        for a, b in zip([0, *cut], [*cut, len(classes)]):
            more, previous = collapse(classes[a:b], previous)
            spelled += more
        assert spelled == whole


def test_words_complete_once_the_next_one_starts_and_never_split_over_blocks():
    scorer = one_hot_scorer()
    blocks = [frames([cls(10), 0, cls(11)]),  # "A" (complete: "wo" has started the next word), "wo..."
              frames([cls(11), cls(12), 0]),  # the "wo" run crosses the edge: counted once; "woman" not complete yet
              frames([0, 0, 0]),  # nothing
              frames([cls(13), 0, cls(14), cls(15)]),  # "drinks" starts: "woman" is complete, then "drinks", "a"
              frames([cls(15), cls(16)])]  # the "beer" run again: once; "." joins "beer"
    spelling = SpelledWords(scorer, decode, STARTS)
    given = [spelling.push(b) for b in blocks]
    assert given == [["A"], [], [], ["woman", "drinks", "a"], []]
    assert spelling.finish() == ["beer."] and spelling.finish() == []
    assert scorer.greedy(torch.cat(blocks)) == [10, 11, 12, 13, 14, 15, 16]
    words, completed = spelled_words(lambda: SpelledWords(scorer, decode, STARTS), blocks)
    assert words == ["A", "woman", "drinks", "a", "beer."] and completed == [0, 3, 3, 3, 4]
    assert spelled_words(lambda: SpelledWords(scorer, decode, STARTS), [frames([0, 0])]) == ([], [])  # silence


def test_a_word_given_out_never_changes_when_decode_rewrites_earlier_text():
    """Tokenizers' decode may rewrite text as more tokens follow (byte pieces, space clean-up): each word's tokens are
    decoded alone, once complete, so what was given out stays true."""
    scorer = one_hot_scorer()

    def cleaning(ids: list[int]) -> str:  # joins " ." as clean_up_tokenization_spaces joins " 's"
        return decode(ids).replace(" .", ".")

    spelling = SpelledWords(scorer, cleaning, STARTS | {16})  # here "." starts a word of its own
    assert spelling.push(frames([cls(10), 0, cls(15), 0])) == ["A"]
    assert spelling.push(frames([cls(16)])) == ["beer"]  # the whole text now reads "A beer."
    assert spelling.finish() == ["."]


def test_random_heads_spell_block_by_block_what_the_whole_utterance_spells():
    torch.manual_seed(0)
    for trial in range(10):
        scorer = CTCScorer(VOCAB, torch.zeros(len(VOCAB), 6), "free")
        x = torch.randn(int(torch.randint(1, 30, ()).item()), 6) * 3
        cuts = sorted(torch.randint(0, x.shape[0] + 1, (3,)).tolist())
        blocks = [x[a:b] for a, b in zip([0, *cuts], [*cuts, x.shape[0]]) if b > a]
        words, completed = spelled_words(lambda: SpelledWords(scorer, decode, STARTS), blocks)
        assert words == decode(scorer.greedy(x)).split()
        assert completed == sorted(completed) and len(completed) == len(words)


# ---- a speech model that reads spelled words --------------------------------------------------------------------
def spelling_speech(arch: str = "llama") -> SpeechTranslator:
    """The tiny speech model of test_speech_model with a random free CTC head over a part of the LLM's vocabulary
    (some frames spell tokens, most are blanks: the bias favours the blank)."""
    from test_speech_model import tiny_speech

    sp = tiny_speech(arch)
    torch.manual_seed(1)
    dim = sp.adapter.config.llm_dim
    vocab = list(range(92, 252))  # word pieces, about a third of them starting a word ("▁g")
    scorer = CTCScorer(vocab, torch.zeros(len(vocab), dim), "free")
    with torch.no_grad():
        scorer.free.weight.mul_(40)
        scorer.free.bias[0] = 1.0
    return SpeechTranslator(sp.translator, sp.encoder, sp.extractor, sp.adapter, sp.config, scorer)


def write_clips(folder, clips) -> list:
    """The clips (float audio) as 16-bit WAV files u0.wav, u1.wav, ... in ``folder``."""
    from simulmt.speech.wav import write_wav

    paths = [folder / f"u{n}.wav" for n in range(len(clips))]
    for path, x in zip(paths, clips):
        write_wav(path, (x * 32767).astype(np.int16), 16000)
    return paths


def test_a_spelling_speech_model_streams_batches_and_times_its_words(tmp_path):
    from test_speech_model import audio


    sp = spelling_speech("gemma3")
    # 1.28 s is four whole blocks (the end brings no new one); pieces of 1 s bring several blocks at once
    clips = [audio(s, seed) for seed, s in enumerate([2.3, 1.28, 3.1])]
    live = [sp.translate(x, "interleaved", WaitK(2), piece_ms=piece) for x, piece in zip(clips, [130, 320, 1000])]
    assert all(r.error is None and r.unit == "words" for r in live)
    assert any(r.prediction for r in live)
    for x, r in zip(clips, live):
        blocks = sp.embed(sp.encode(x))
        words, completed = spelled_words(sp.spelling, blocks)
        assert words == sp.translator.tokenizer.decode(sp.speller.greedy(torch.cat(blocks))).split()
        assert r.source_length == len(words) and len(words) > 1 and r.heard == " ".join(words)
        # the same words read as text give the same translation and the same delays in words
        text = sp.translator.session("interleaved", WaitK(2))
        text.push(words, finished=True)
        list(text.advance())
        assert (r.prediction, r.delays) == (text.result().prediction, text.result().delays)
        from simulmt.speech.model import block_delays_ms

        available = block_delays_ms(sp.config, len(x))
        assert r.delays_ms == [available[completed[d - 1]] if d else 0.0 for d in r.delays]
        assert r.delays_ms[-1] == available[-1]  # the last word is complete only at the end of the audio
    paths = write_clips(tmp_path, clips)
    one = list(sp.translate_iter(paths, layout="interleaved", policy="wait-k", k=2))
    batched = list(sp.translate_iter(paths, batch_size=3, layout="interleaved", policy="wait-k", k=2))
    for a, b in zip(one, batched):
        assert (a.prediction, a.delays, a.delays_ms, a.source_length) == (b.prediction, b.delays, b.delays_ms,
                                                                          b.source_length)


def test_silence_spells_no_word_and_gives_an_empty_translation():
    sp = spelling_speech()
    with torch.no_grad():
        sp.speller.free.bias[0] = 1e4  # every frame is a blank
    result = sp.translate(np.zeros(16000, dtype=np.float32), "interleaved", WaitK(2))
    assert result.prediction == "" and result.delays == [] and result.source_length == 0 and result.error is None
    session = sp.session("interleaved", WaitK(2))  # no audio at all: no block, no word
    assert list(session.finish()) == [] and session.result().prediction == "" and session.units_ms == []


def test_a_speech_model_folder_that_reads_spelled_words_loads(tmp_path, monkeypatch):
    sp = spelling_speech()
    sp.adapter.save(tmp_path)
    sp.speller.save(tmp_path)
    card = SpeechModelCard(model="tiny", adapter=None, encoder="tiny", block_ms=320, left_context_ms=640,
                           reads="ctc-words")
    (tmp_path / SPEECH_FILE).write_text(json.dumps(card.__dict__))
    import simulmt.speech.whisper_ct2 as ct2
    import simulmt.translator as translator

    monkeypatch.setattr(ct2, "whisper_encoder", lambda name: (sp.encoder, sp.extractor))
    monkeypatch.setattr(translator.Translator, "load", classmethod(lambda cls, *a, **k: sp.translator))
    loaded = SpeechTranslator.load(tmp_path)
    assert loaded.speller.vocab == sp.speller.vocab
    x = torch.randn(7, sp.adapter.config.llm_dim)
    assert loaded.speller.greedy(x) == sp.speller.greedy(x)
    with pytest.raises(SimulmtError, match="reads is 'letters'"):
        SpeechModelCard(model="m", adapter=None, encoder="e", reads="letters")
    with pytest.raises(SimulmtError, match="not a tied one"):
        tied = CTCScorer([3], torch.zeros(1, sp.adapter.config.llm_dim))
        SpeechTranslator(sp.translator, sp.encoder, sp.extractor, sp.adapter, sp.config, tied)
    (tmp_path / "ctc_head.json").unlink()
    with pytest.raises(SimulmtError, match="no CTC head"):
        SpeechTranslator.load(tmp_path)


def test_the_demo_and_translate_audio_show_a_spelling_model_s_words(tmp_path, monkeypatch, capsys):
    """``demo --audio`` says wait-k counts words and shows what each block let the CTC head spell (HEARD);
    ``translate --audio --jsonl`` gives the spelled words as the source and delays in ms at their blocks."""
    from test_speech_model import audio

    from simulmt import cli
    from simulmt.speech import model as speech_model
    from simulmt.speech.wav import write_wav

    sp = spelling_speech()
    monkeypatch.setattr(sp.translator, "policy_head", None)  # the demo streams wait-k when there is no head
    monkeypatch.setattr(speech_model.SpeechTranslator, "load", classmethod(lambda cls, folder, **kw: sp))
    assert cli.main(["demo", "--audio", "--speech-model", str(tmp_path), "--k", "2"]) == 0
    shown = capsys.readouterr().out
    assert "policy wait-2 in words" in shown and "HEARD " in shown and "WRITE" in shown
    wav = tmp_path / "clip.wav"
    write_wav(wav, (audio(2.5) * 20000).astype(np.int16), 16000)
    assert cli.main(["translate", "--audio", str(wav), "--speech-model", str(tmp_path), "--k", "2", "--jsonl"]) == 0
    row = json.loads(capsys.readouterr().out)
    words, _ = spelled_words(sp.spelling, sp.embed(sp.encode((audio(2.5) * 20000).astype(np.int16))))
    assert row["heard"].split() == words and row["source_length"] == len(words) and row["unit"] == "words"
    assert len(row["delays_ms"]) == len(row["prediction"].split()) and row["delays_ms"] == sorted(row["delays_ms"])


def test_evaluating_a_spelling_model_logs_words_and_what_was_heard(tmp_path):
    """``evaluate --source-audio`` with a model that reads spelled words: delays in ms of audio (SimulEval's speech
    log) with the delays in words and the spelled transcript beside them, speech-input ATD, and the batched path's
    words and delays equal to the live path's."""
    from dataclasses import replace

    from test_speech_model import write_audio_set

    from simulmt.evaluation.grid import evaluate
    from simulmt.evaluation.options import EvaluateOptions
    from simulmt.evaluation.run_dir import read_log

    sp = spelling_speech()
    write_audio_set(tmp_path, seconds=(2.3, 3.1))
    options = EvaluateOptions(source_audio=str(tmp_path / "audio.list"), reference=str(tmp_path / "ref.de"),
                              output=str(tmp_path / "grid"), layouts="interleaved", ks="2", no_offline=True)
    (live,) = evaluate(sp, options, progress=False)
    records = read_log(tmp_path / "grid" / "interleaved.wait-2" / "instances.log")
    assert all(len(r["delays"]) == len(r["delays_words"]) == len(r["prediction"].split()) for r in records)
    assert all(r["heard"] and r["delays"] == sorted(r["delays"]) and r["delays"][-1] <= r["source_length"]
               for r in records) and "delays_blocks" not in records[0]
    assert "ATD" in live.scores and "ATD_CA" in live.scores
    (batched,) = evaluate(sp, replace(options, output=str(tmp_path / "batched"), batch_size=2), progress=False)
    again = read_log(tmp_path / "batched" / "interleaved.wait-2" / "instances.log")
    assert [(r["prediction"], r["delays"], r["heard"]) for r in records] == [
        (r["prediction"], r["delays"], r["heard"]) for r in again]
    assert all(r["elapsed"] == sorted(r["elapsed"]) for r in again)


def test_a_learned_policy_decides_once_per_block_on_its_last_word(tmp_path, monkeypatch):
    """EASiST decides once per speech block: the learned policy reads the words a block brought before it asks its
    head (on the last of them), live in pieces of any size and batched alike; per word it asks more often."""
    from test_speech_model import audio

    from simulmt.core.learned_policy import Learned, PolicyHead

    sp = spelling_speech("gemma3")
    d = sp.translator.model.config.hidden_size
    sp.translator.policy_head = PolicyHead(torch.randn(2, d, generator=torch.Generator().manual_seed(3)),
                                           torch.zeros(2))
    asked = []  # (units read, waiting) wherever the head was consulted
    decide = Learned.decide
    monkeypatch.setattr(Learned, "decide", lambda self, state: (
        asked.append((state.source_read, state.source_waiting)) if self.consults_head(state) else None,
        decide(self, state))[1])
    clips = [audio(s, seed) for seed, s in enumerate([2.3, 3.1])]
    per_block, per_word = [], []
    for x, piece in zip(clips, [1000, 130]):
        asked.clear()
        r = sp.translate(x, "interleaved", "learned", tau=0.4, piece_ms=piece)
        assert r.error is None and r.source_length > 1
        blocks = sp.embed(sp.encode(x))
        _, arrived = spelled_words(sp.spelling, blocks, end=len(blocks))  # the end's word: an arrival of its own
        last = {i + 1 for i in range(len(arrived)) if i + 1 == len(arrived) or arrived[i + 1] != arrived[i]}
        assert asked and all(read in last and waiting == 0 for read, waiting in asked), (asked, arrived)
        per_block.append((r, len(set(asked))))
        monkeypatch.setattr(sp, "decide_per_block", False)
        asked.clear()
        w = sp.translate(x, "interleaved", "learned", tau=0.4, piece_ms=piece)
        monkeypatch.setattr(sp, "decide_per_block", True)
        per_word.append((w, len(set(asked))))
    assert sum(n for _, n in per_word) > sum(n for _, n in per_block)  # some block brought two words or more
    # a head that always reads: the same output either way, and a forward per block instead of one per word
    head = sp.translator.policy_head
    sp.translator.policy_head = PolicyHead(torch.zeros(2, d), torch.tensor([9.0, -9.0]))
    block_wise = sp.translate(clips[1], "interleaved", "learned", tau=0.4)
    monkeypatch.setattr(sp, "decide_per_block", False)
    word_wise = sp.translate(clips[1], "interleaved", "learned", tau=0.4)
    monkeypatch.setattr(sp, "decide_per_block", True)
    assert (word_wise.prediction, word_wise.delays) == (block_wise.prediction, block_wise.delays)
    assert word_wise.forward_calls > block_wise.forward_calls
    sp.translator.policy_head = head
    paths = write_clips(tmp_path, clips)
    one = list(sp.translate_iter(paths, layout="interleaved", policy="learned", tau=0.4))
    batched = list(sp.translate_iter(paths, batch_size=2, layout="interleaved", policy="learned", tau=0.4))
    for (live, _), a, b in zip(per_block, one, batched):
        assert (a.prediction, a.delays, a.delays_ms) == (b.prediction, b.delays, b.delays_ms)
        assert (a.prediction, a.delays) == (live.prediction, live.delays)
