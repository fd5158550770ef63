"""The speech cascade: LocalAgreement (pure), the streaming recogniser's bounds, and the cascade's plumbing, with a
fake recogniser whose audio spells its words (each word is half a second of one value), so every test is exact and
fast; the real Whisper (tiny.en) on synthesised voices is in tests/test_speech_real.py (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import load_benchmark, through_simuleval_agent, tiny_translator
from simulmt.text.segment import split_sentences
from simulmt.speech.cascade import CascadeTranslator
from simulmt.speech.local_agreement import LocalAgreement, TimedWord
from simulmt.errors import SimulmtError
from simulmt.speech.recognizer import RecognizerOptions, StreamingRecognizer

WORD = 8000  # samples per word of the fake audio (0.5 s)
SCRIPT = ("A man is riding a bike in the park. Two children play football on the green field. The woman reads a "
          "book by the window.").split()


def words(*texts, start=0.0, step=500.0):
    return [TimedWord(t, start + i * step, start + (i + 1) * step) for i, t in enumerate(texts)]


# ---- LocalAgreement -----------------------------------------------------------------------------------------------
def test_local_agreement_confirms_what_two_transcripts_agree_on():
    agreement = LocalAgreement(2)
    assert agreement.update(words("a", "man", "iz")) == []  # nothing to agree with yet
    assert [w.text for w in agreement.update(words("A", "man", "is", "rid"))] == ["A", "man"]  # case aside
    assert [w.text for w in agreement.update(words("a", "man", "is", "riding", "a"))] == ["is"]
    assert [w.text for w in agreement.update(words("a", "man", "is", "riding,", "a", "bike"))] == ["riding,", "a"]
    assert [w.text for w in agreement.flush()] == ["bike"]
    assert [w.text for w in agreement.confirmed] == ["A", "man", "is", "riding,", "a", "bike"]


def test_local_agreement_after_a_trim_drops_the_past_and_a_repeated_tail():
    agreement = LocalAgreement(2)
    agreement.update(words("one", "two", "three"))
    agreement.update(words("one", "two", "three", "four"))  # confirms one two three (ends at 1500 ms)
    again = words("two", "three", "five", "six", start=500.0)  # re-heard, then new words
    assert agreement.update(again) == []
    assert [w.text for w in agreement.update(words("three", "five", "six", "seven", start=1000.0))] == \
        ["five", "six"]
    n1 = LocalAgreement(1)
    assert [w.text for w in n1.update(words("x", "y"))] == ["x", "y"]  # n = 1: every transcript is final
    for lookback in (0, 1):  # (n = 1 compares with no transcript: lookback does nothing) and held words still come
        held = LocalAgreement(1, hold_ms=500, lookback=lookback)  # when the audio ends
        assert held.kept == 0 and [w.text for w in held.update(words("x", "y"), 1100.0)] == ["x"]
        assert [w.text for w in held.flush()] == ["y"]


def test_local_agreement_holds_back_words_that_end_near_the_end_of_the_audio():
    """With ``hold_ms``, two transcripts that agree on a word at the edge of the audio (a short step may agree on a
    word the audio cut) do not confirm it until the audio has gone ``hold_ms`` past its end."""
    held, plain = LocalAgreement(2, hold_ms=500), LocalAgreement(2)
    first, second = words("a", "man", "gentle"), words("a", "man", "gentle")  # "gentle" ends at 1500 ms
    for agreement in (held, plain):
        agreement.update(first, 1500.0)
    assert [w.text for w in plain.update(second, 1700.0)] == ["a", "man", "gentle"]
    assert [w.text for w in held.update(second, 1700.0)] == ["a", "man"]  # 1500 > 1700 - 500: not yet
    assert [w.text for w in held.update(words("a", "man", "gentleman", "caressing"), 2200.0)] == []  # disagrees
    assert [w.text for w in held.update(words("a", "man", "gentleman", "caressing"), 2400.0)] == ["gentleman"]
    assert [w.text for w in held.flush()] == ["caressing"]
    assert [w.text for w in LocalAgreement(2, hold_ms=500).update(second)] == []  # (no audio end: no hold, and
    # nothing to agree with yet)
    options = RecognizerOptions(hold_ms=500)
    assert StreamingRecognizer(FakeWhisper(options), options).agreement.hold_ms == 500  # the recogniser passes it on
    with pytest.raises(SimulmtError, match="option hold_ms must be at least 0"):
        RecognizerOptions(hold_ms=-1)


def test_local_agreement_lookback_lets_one_misheard_transcript_delay_nothing():
    """With ``lookback`` 1 the newest transcript may agree with either of the two before it: one transcript that
    heard a word differently between two that agree does not hold the words back until a second agreeing pair."""
    look, plain = LocalAgreement(2, lookback=1), LocalAgreement(2)
    updates = [words("a", "bike", "racist"), words("a", "bike", "race", "is", "taking"),
               words("a", "by-grace", "is", "taking", "place"), words("A", "bike", "race", "is", "taking", "place")]
    got = {id(a): [[w.text for w in a.update(u)] for u in updates] for a in (look, plain)}
    assert got[id(plain)] == [[], ["a", "bike"], [], []]  # the misheard one breaks both pairs it is in
    assert got[id(look)] == [[], ["a", "bike"], [], ["race", "is", "taking"]]  # agrees with the one before it
    assert [w.text for w in plain.update(words("a", "bike", "race", "is", "taking", "place", "with"))] == \
        ["race", "is", "taking", "place"]  # the published rule gets there one transcript later
    # with n = 3 the newest needs two of the earlier ones: the (n-1)-th longest agreement
    three = LocalAgreement(3, lookback=1)
    for u in (words("x", "y", "z"), words("x", "q", "z"), words("x", "y", "w")):
        confirmed = [w.text for w in three.update(u)]
    assert confirmed == ["x"]
    assert [w.text for w in three.update(words("x", "y", "z", "v"))] == ["y"]  # with the first and the third
    assert LocalAgreement(2).kept == 1 and look.kept == 2 and three.kept == 3
    with pytest.raises(ValueError, match="lookback >= 0"):
        LocalAgreement(2, lookback=-1)
    with pytest.raises(SimulmtError, match="option agreement_lookback must be at least 0"):
        RecognizerOptions(agreement_lookback=-1)


def test_local_agreement_cut_last_does_not_take_a_transcripts_last_word_as_evidence():
    """With ``cut_last`` the last word of an earlier transcript (where its audio ended, perhaps in mid-word) does not
    agree with anything: "flatland" then "flatland skate" confirm nothing past "surrounding" until a transcript that
    heard more after it agrees."""
    cut, plain = LocalAgreement(2, cut_last=True), LocalAgreement(2)
    updates = [words("the", "surrounding", "flatland"), words("the", "surrounding", "flatland", "skate"),
               words("the", "surrounding", "flat", "landscape", "and")]
    got = {id(a): [[w.text for w in a.update(u)] for u in updates] for a in (cut, plain)}
    assert got[id(plain)] == [[], ["the", "surrounding", "flatland"], []]  # the cut word confirmed
    assert got[id(cut)] == [[], ["the", "surrounding"], []]  # "flatland" was the first transcript's last word
    assert [w.text for w in cut.update(words("the", "surrounding", "flat", "landscape", "and", "a"))] == \
        ["flat", "landscape"]  # "and" was the last word of the one before: it waits
    assert [w.text for w in cut.flush()] == ["and", "a"]  # the audio is over: the newest is final as it stands
    options = RecognizerOptions(agreement_lookback=1, agreement_cut_last=True)
    agreement = StreamingRecognizer(FakeWhisper(options), options).agreement
    assert (agreement.lookback, agreement.cut_last) == (1, True)  # the recogniser passes them on

def test_local_agreement_min_probability_waits_for_a_word_the_newest_transcript_is_unsure_of():
    """With ``min_probability`` a word that two transcripts agree on is not confirmed while the newest gives it a
    lower probability (Whisper's "The" for a partial sentence's "A", agreed on by one transcript after another),
    nor any word after it; it comes once a transcript is sure of it, or when the audio ends."""
    def unsure(*texts, probabilities):
        return [TimedWord(w.text, w.start_ms, w.end_ms, probability=p) for w, p in zip(words(*texts), probabilities)]

    sure, plain = LocalAgreement(2, min_probability=0.5), LocalAgreement(2)
    updates = [unsure("The", "woman", probabilities=[0.4, 0.9]),
               unsure("The", "woman", "in", probabilities=[0.45, 0.9, 0.8]),
               unsure("A", "woman", "in", "a", probabilities=[0.6, 0.9, 0.9, 0.7])]
    got = {id(a): [[w.text for w in a.update(u)] for u in updates] for a in (sure, plain)}
    assert got[id(plain)] == [[], ["The", "woman"], ["in"]]  # agreed on "The": final before the end is heard
    assert got[id(sure)] == [[], [], []]  # "The" at 0.45 holds it and "woman" after it; "A" is not agreed yet
    assert [w.text for w in sure.update(unsure("A", "woman", "in", "a", "red", probabilities=[0.7, 0.9, 0.9, 0.3,
                                                                                             0.2]))] == \
        ["A", "woman", "in"]  # agreed and sure; "a" agreed but unsure: it waits
    assert [w.text for w in sure.flush()] == ["a", "red"]  # the audio is over: the newest is final as it stands
    options = RecognizerOptions(min_word_probability=0.5)
    assert StreamingRecognizer(FakeWhisper(options), options).agreement.min_probability == 0.5  # passed on
    with pytest.raises(SimulmtError, match="min_word_probability must be within 0..1"):
        RecognizerOptions(min_word_probability=1.5)


def test_local_agreement_finds_confirmed_words_heard_a_little_differently():
    """A transcript that re-hears confirmed words a little differently ("toward a" for "towards a", "A cute" for
    "Acute", "Two" for "2") goes on after them, found by their letters: their spread times would move and the
    words would be confirmed twice ("towards a toward a"). A word heard quite differently ("to", then "two") is
    not taken for the confirmed one: it comes again rather than being lost."""
    def confirmed_after(first, then):
        agreement = LocalAgreement(2)
        agreement.update(first)
        agreement.update(first + words("x", start=500.0 * len(first)))  # confirms ``first``
        agreement.update(then)
        return [w.text for w in agreement.update(then + words("y", start=500.0 * len(then)))]

    # the re-heard words' times are shifted by 450 ms, as Whisper's spread segment times move between transcripts
    shifted = dict(start=450.0)
    assert confirmed_after(words("walk", "towards", "a"), words("walk", "toward", "a", "large", "rock", **shifted)) \
        == ["large", "rock"]
    assert confirmed_after(words("Acute"), words("A", "cute", "puppy", "playing", **shifted)) == ["puppy", "playing"]
    assert confirmed_after(words("2"), words("Two", "horses", "stand", **shifted)) == ["horses", "stand"]
    assert confirmed_after(words("as", "to"), words("as", "two", "men", "fall"))[:1] == ["two"]  # (then by time)
    from simulmt.speech.local_agreement import _respelled_end

    assert _respelled_end(words("a", "b", "c", "d", "e", "f", "g"), words("q")) is None  # too many to look for
    assert _respelled_end(words("²"), words("two")) is None  # (a digit that is no number: compared as it is)


def test_local_agreement_confirms_a_hyphenated_compound_or_a_spelled_number_once():
    """Whisper writes "smoke trailing" in one transcript and "smoke-trailing" in the next, "1" in one and "one" in
    the next. Both are the words already confirmed: what follows them is new, and no word is confirmed twice
    ("smoke smoke-trailing trailing", "and 1 and one gentleman": the transcripts of a Multi30k line, flite awb,
    Whisper base, before 2026-12-07)."""
    agreement = LocalAgreement(2, lookback=1)
    hyphened = [("A", 0, 300), ("plane", 300, 700), ("with", 700, 1000), ("smoke-trailing...", 1000, 1500)]
    plain = [("A", 0, 300), ("plane", 300, 700), ("with", 700, 1000), ("smoke", 1000, 1300), ("trailing", 1300, 1800),
             ("its", 1800, 2000), ("assent", 2000, 2400)]
    updates = [[("A", 0, 300), ("plane", 300, 700), ("with", 700, 1000), ("smoke.", 1000, 1400)], hyphened, plain,
               hyphened[:3] + [("smoke-trailing", 1000, 1900), ("that's", 1900, 2100), ("a", 2100, 2200)],
               plain[:5] + [("its", 1800, 2000), ("ascent", 2000, 2500), ("in", 2500, 2700)]]
    got = [[w.text for w in agreement.update([TimedWord(*w) for w in u])] for u in updates]
    assert got == [[], ["A", "plane", "with"], ["smoke"], ["trailing"], ["its"]]
    assert [w.text for w in agreement.flush()] == ["ascent", "in"]
    assert " ".join(w.text for w in agreement.confirmed) == "A plane with smoke trailing its ascent in"

    from simulmt.speech.local_agreement import word_key

    assert [word_key(w) for w in ("2", "Two,", "1.", "13", "42", "²", "2nd")] == \
        ["two", "two", "one", "thirteen", "42", "²", "2nd"]
    numbers = LocalAgreement(2)
    heard = words("2", "horses", "1", "black", "and", "1", "brown", "and", "1")
    numbers.update(heard)
    assert len(numbers.update(heard + words("x", start=4500.0))) == 9
    # the last transcript re-hears them with a word changed ("verses"), the numbers spelled and the times moved: the
    # confirmed words are found by time and by their repeated tail, "and one" the same as "and 1"
    assert numbers.update(words("Two", "verses", "one", "black", "and", "one", "brown", "and", "one", "gentleman",
                                start=600.0)) == []
    assert [w.text for w in numbers.flush()] == ["gentleman"]
    assert " ".join(w.text for w in numbers.confirmed) == "2 horses 1 black and 1 brown and 1 gentleman"

    from simulmt.speech.local_agreement import _after_words, _compound_parts

    parts, owners = _compound_parts([TimedWord("bare-chested", 0, 1200), TimedWord("man,", 1200, 1500)])
    assert [(p.text, p.start_ms, p.end_ms) for p in parts] == [("bare-", 0, 500), ("chested", 500, 1200),
                                                             ("man,", 1200, 1500)] and owners == [0, 0, 1]
    compound = [TimedWord("a-b-c", 0, 600), TimedWord("d", 600, 900)]
    assert [w.text for w in _after_words(compound, ["a"])] == ["b-c", "d"]  # the rest of a compound stays one word
    assert [w.text for w in _after_words(compound, ["a", "b", "c"])] == ["d"]
    assert _after_words(compound, ["a", "c"]) is None and _after_words(words("-", "x"), ["x"]) is None

def test_agreement_label_names_the_rule_for_run_records():
    from simulmt.speech.recognizer import agreement_label

    assert agreement_label() == "LocalAgreement-2, lookback 1"  # the default
    assert agreement_label(RecognizerOptions(agreement_lookback=0)) == "LocalAgreement-2, lookback 0"  # as published
    # (not "LocalAgreement-2": the runs labelled so found re-heard confirmed words by time, not by letters)
    assert agreement_label(RecognizerOptions(agreement_cut_last=True)) == "LocalAgreement-2, lookback 1, last word cut"
    assert agreement_label(RecognizerOptions(policy="alignatt")) == "AlignAtt, margin 500 ms"
    assert agreement_label(RecognizerOptions(agreement=1)) == "LocalAgreement-1"  # (no transcript to look back to)


def test_agreement_replay_gives_what_the_live_recogniser_confirms():
    """benchmarks/agreement_replay.py: one sentence's transcripts recorded once (300 ms step, every update) and
    replayed under each rule, step (a multiple) and min_audio_ms give the words the live recogniser with those
    options confirms, at the same audio times: the replay's tables are exact while the buffer is not cut."""
    class Mishearing(FakeWhisper):
        """Every third transcript of a buffer of a given length hears its second word wrong (as Whisper's
        transcripts of one buffer differ now and then): the rules then confirm differently."""

        def transcribe(self, audio, prompt=""):
            words = super().transcribe(audio, prompt)
            if len(audio) // (16 * 300) % 3 == 2 and len(words) > 2:
                words[1] = TimedWord("misheard", words[1].start_ms, words[1].end_ms)
            return words

    replay = load_benchmark("agreement_replay")
    audio = spoken(SCRIPT[:9])  # "A man is riding a bike in the park." (4.5 s: no cut)
    recording = RecognizerOptions(step_ms=300, min_audio_ms=0, pause_ms=0)
    updates, cut = replay.recorded_updates(Mishearing(recording), recording, audio)
    assert not cut and len(updates) == 16  # 15 steps and the finish
    line = {"updates": updates, "audio_ms": 4500.0}
    outcomes = set()
    for rule in replay.RULES:
        for step_ms, min_audio_ms, later_step_ms in ((300, 0, 0), (600, 0, 0), (300, 1000, 0), (300, 0, 900)):
            options = RecognizerOptions(step_ms=step_ms, min_audio_ms=min_audio_ms, pause_ms=0,
                                        agreement_lookback=rule["lookback"],
                                        agreement_cut_last=rule.get("cut_last", False),
                                        later_step_ms=later_step_ms, fast_words=2)
            whisper = Mishearing(options)
            live = StreamingRecognizer(whisper, options)
            words = [w for start in range(0, len(audio), 16 * step_ms)
                     for w in live.push(audio[start:start + 16 * step_ms])] + live.finish()
            decoded: list[int] = []
            replayed = replay.confirm(line, rule, step_ms, min_audio_ms, later_step_ms, 2, decoded)
            assert replayed == [(w.text, w.confirmed_ms) for w in words]
            assert len(decoded) == whisper.calls  # (the replay counts the transcripts made)
            outcomes.add((step_ms, min_audio_ms, tuple(replayed)))
    for step_ms, min_audio_ms in ((300, 0), (600, 0), (300, 1000)):  # the four rules do not all agree
        assert len({o for o in outcomes if o[:2] == (step_ms, min_audio_ms)}) >= 2
    published, lookback = (dict(replay.confirm(line, rule, 300, 0)) for rule in replay.RULES[:2])
    assert lookback["man"] < published["man"]  # the misheard transcript between two agreeing ones delays it there


def test_agreement_replay_follows_the_later_step_over_two_sentences_with_digits():
    """Two sentences (9 s, no cut), Whisper's digits for "Two" and "a" and a lower-case first word: the replay's
    schedule (short steps until a sentence's first words, long ones until a transcript begins the next sentence) and
    the words written as the recogniser gives them (numbers spelled, the first word with a capital) are the live
    recogniser's."""
    class Digits(FakeWhisper):
        def transcribe(self, audio, prompt=""):
            return [TimedWord({"Two": "2", "a": "1", "A": "a"}.get(w.text, w.text), w.start_ms, w.end_ms,
                              w.ends_segment) for w in super().transcribe(audio, prompt)]

    from simulmt.speech.written_words import written_words

    replay = load_benchmark("agreement_replay")
    audio = spoken(SCRIPT[:18])
    recording = RecognizerOptions(step_ms=300, min_audio_ms=0, pause_ms=0)
    updates, cut = replay.recorded_updates(Digits(recording), recording, audio)
    assert not cut
    line = {"updates": updates, "audio_ms": 9000.0}
    for step_ms, later_step_ms in ((300, 0), (300, 900), (600, 1200), (300, 1500)):
        options = RecognizerOptions(step_ms=step_ms, min_audio_ms=0, pause_ms=0, later_step_ms=later_step_ms,
                                    fast_words=2)
        whisper = Digits(options)
        live = StreamingRecognizer(whisper, options)
        words = [w for start in range(0, len(audio), 16 * step_ms)
                 for w in live.push(audio[start:start + 16 * step_ms])] + live.finish()
        decoded: list[int] = []
        replayed = replay.confirm(line, replay.RULES[1], step_ms, 0, later_step_ms, 2, decoded)
        assert written_words([w for w, _ in replayed], spell_numbers=True)[0] == [w.text for w in words]
        assert [t for _, t in replayed] == [w.confirmed_ms for w in words] and len(decoded) == whisper.calls
    assert "Two" in [w.text for w in words] and "one" in [w.text for w in words] and words[0].text == "A"


def test_alignatt_confirms_the_words_aligned_before_the_newest_audio():
    from simulmt.speech.align_att import AlignAtt

    policy = AlignAtt(margin_ms=400)
    heard = words("a", "man", "is", "rid")  # 0-500, 500-1000, 1000-1500, 1500-2000 ms
    assert [w.text for w in policy.update(heard, audio_end_ms=2000)] == ["a", "man", "is"]  # "rid" is too new
    assert [w.text for w in policy.update(words("a", "man", "is", "riding", "a"), audio_end_ms=2100)] == []
    assert [w.text for w in policy.update(words("a", "man", "is", "riding", "a", "bike"), audio_end_ms=3000)] \
        == ["riding", "a"]  # (the past is not confirmed twice; "bike" ends at the audio's end)
    assert [w.text for w in policy.flush()] == ["bike"]
    with pytest.raises(ValueError, match="audio_end_ms"):
        policy.update(heard)


# ---- a fake recogniser: the audio spells the words -----------------------------------------------------------------
class FakeWhisper:
    """Each whole 0.5 s of audio of value (i+1)/1000 is SCRIPT[i]; a partial one at the end is heard wrong (the
    unstable tail a real recogniser has); a segment ends at every sentence end and at the buffer's end."""

    def __init__(self, options: RecognizerOptions):
        self.options = options
        self.calls = 0
        self.longest = 0
        self.voice_model = FakeVoice()

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> list[TimedWord]:
        self.calls += 1
        self.longest = max(self.longest, len(audio))
        out = []
        for start in range(0, len(audio), WORD):
            chunk = audio[start:start + WORD]
            index = int(round(float(chunk[0]) * 1000)) - 1
            if index < 0 or index >= len(SCRIPT):
                continue  # silence
            text = SCRIPT[index] if len(chunk) == WORD else SCRIPT[index][:1] + "~"
            out.append(TimedWord(text, 1000 * start / 16000, 1000 * (start + len(chunk)) / 16000,
                                 ends_segment=text.endswith(".") or start + WORD >= len(audio)))
        return out


class FakeVoice:
    """Voice activity of the fake audio: a window with any non-zero sample is speech (silence is zeros)."""

    def start(self):
        return None

    def __call__(self, windows: np.ndarray, state):
        return (np.abs(windows).max(axis=1) > 0).astype(np.float32), state


def spoken(script=SCRIPT, repeat: int = 1) -> np.ndarray:
    values = [np.full(WORD, (i + 1) / 1000, dtype=np.float32) for i in range(len(script))] * repeat
    return np.concatenate(values)


def cascade(pause_ms: float = 1000.0, pause_ms_vad: int = 0, **options) -> CascadeTranslator:
    opts = RecognizerOptions(**{"step_ms": 500, "trim_ms": 4000, "max_buffer_ms": 8000, "pause_ms": pause_ms_vad,
                                **options})
    return CascadeTranslator(tiny_translator("llama"), FakeWhisper(opts), opts, max_words=64, pause_ms=pause_ms)


def test_a_pause_between_heard_words_ends_the_sentence_live_and_batched(tmp_path):
    """No punctuation after "riding", but 1.5 s of silence: the talk cuts there (not with a longer pause_ms)."""
    from simulmt.speech.wav import write_wav

    silence = np.zeros(24000, dtype=np.float32)
    audio = np.concatenate([spoken()[:4 * WORD], silence, spoken()[4 * WORD:]])
    tr = cascade()
    live = tr.translate(audio, "expost", "wait-k", k=2)
    assert live.heard == " ".join(SCRIPT)
    cut = [len(s) for s in split_sentences(SCRIPT, 64)]
    alone = [tr.translator.translate(" ".join(s), "expost", "wait-k", k=2).prediction
             for s in [SCRIPT[:4], SCRIPT[4:cut[0]]] + split_sentences(SCRIPT[cut[0]:], 64)]
    assert live.prediction == " ".join(a for a in alone if a)
    path = tmp_path / "pause.wav"
    write_wav(path, (audio * 32767).astype(np.int16), 16000)
    [batched] = list(tr.translate_iter([path], batch_size=2, layout="expost", policy="wait-k", k=2))
    assert batched.prediction == live.prediction and batched.delays == live.delays
    assert cascade(pause_ms=2000.0).translate(audio, "expost", "wait-k", k=2).prediction != live.prediction


def test_a_pause_makes_its_words_final_at_once_and_silence_is_not_transcribed():
    """Four words, 2 s of silence, four words, 3 s of silence, the rest: with pause_ms the words before a pause are
    confirmed within pause_ms (+ a step) of their end, the pauses are counted where they are, and updates over
    silence alone decode nothing. Without it, the same words are heard, later."""
    silence = np.zeros(32000, dtype=np.float32)
    words8 = spoken()
    audio = np.concatenate([words8[:4 * WORD], silence, words8[4 * WORD:8 * WORD], silence, silence[:16000],
                            words8[8 * WORD:]])
    heard = {}
    for pause_ms in (0, 600):
        options = RecognizerOptions(step_ms=250, trim_ms=4000, max_buffer_ms=8000, pause_ms=pause_ms)
        whisper = FakeWhisper(options)
        recognizer = StreamingRecognizer(whisper, options)
        out, calls_in_silence, pauses = [], 0, []
        for start in range(0, len(audio), 4000):  # quarter seconds
            before = whisper.calls
            got = recognizer.push(audio[start:start + 4000])
            out += got
            pauses += [len(out) - len(got) + i for i in recognizer.pauses]
            if 4 * WORD + 16000 <= start < 4 * WORD + 32000:  # the second half of the first silence
                calls_in_silence += whisper.calls - before
        out += recognizer.finish()
        heard[pause_ms] = (out, pauses, calls_in_silence)
        assert recognizer.pause_count == len(pauses)
    (plain, no_pauses, plain_calls), (vad, pauses, vad_calls) = heard[0], heard[600]
    assert [w.text for w in plain] == SCRIPT and no_pauses == []
    assert [w.text for w in vad] == SCRIPT[:4] + ["A"] + SCRIPT[5:8] + ["Park."] + SCRIPT[9:]  # (a pause ends a
    # sentence: the next word starts one, with a capital)
    assert pauses == [4, 8]
    assert vad[3].confirmed_ms <= 2000 + 600 + 250 + 32 and vad[7].confirmed_ms <= 6000 + 600 + 250 + 32
    assert vad[3].confirmed_ms <= plain[3].confirmed_ms and vad[7].confirmed_ms <= plain[7].confirmed_ms
    assert plain_calls == 4 and vad_calls == 0  # silence alone: decoded without a VAD, not with one
    options = RecognizerOptions(step_ms=250, trim_ms=4000, max_buffer_ms=8000, pause_ms=600)
    whole = StreamingRecognizer(FakeWhisper(options), options)  # the audio in one piece: the same steps
    assert whole.push(audio) + whole.finish() == vad and whole.pause_count == 2


def test_with_later_step_ms_a_pause_is_still_heard_at_every_step():
    """``later_step_ms`` makes fewer transcripts, not fewer updates: a pause (voice activity) is heard at the next
    ``step_ms`` (not the next long one) and the words before it are final by then."""
    audio = np.concatenate([spoken()[:7 * WORD], np.zeros(32000, dtype=np.float32), spoken()[7 * WORD:]])
    heard, calls = {}, {}
    for later in (0, 1500):
        options = RecognizerOptions(step_ms=250, min_audio_ms=0, trim_ms=4000, max_buffer_ms=8000, pause_ms=600,
                                    later_step_ms=later, fast_words=2)
        whisper = FakeWhisper(options)
        recognizer = StreamingRecognizer(whisper, options)
        words = [w for start in range(0, len(audio), 4000) for w in recognizer.push(audio[start:start + 4000])]
        heard[later], calls[later] = words + recognizer.finish(), whisper.calls
    assert [w.text for w in heard[1500]] == [w.text for w in heard[0]] == SCRIPT[:7] + ["The"] + SCRIPT[8:]
    for later in (0, 1500):  # "in", the last word before the pause: final within the pause and a short step
        assert heard[later][6].confirmed_ms <= 3500 + 600 + 250 + 32
    assert heard[1500][2].confirmed_ms > heard[0][2].confirmed_ms and calls[1500] < calls[0]


def test_the_buffer_is_cut_at_a_segment_end_once_past_trim_ms():
    """Segment ends (here: sentence ends) are where the buffer may be cut: past trim_ms it is, long before the
    max_buffer_ms bound (the segment flags once got lost on the way, and every buffer grew to Whisper's 30 s)."""
    options = RecognizerOptions(step_ms=500, trim_ms=2000, max_buffer_ms=12000)
    whisper = FakeWhisper(options)
    recognizer = StreamingRecognizer(whisper, options)
    heard = []
    for start in range(0, len(spoken(repeat=3)), 8000):
        heard += recognizer.push(spoken(repeat=3)[start:start + 8000])
    heard += recognizer.finish()
    assert [w.text for w in heard] == SCRIPT * 3
    longest_sentence = 9 * WORD  # samples
    assert whisper.longest <= 16 * 2000 + longest_sentence + 2 * 8000  # trim_ms, a sentence, a step's slack


def test_without_a_voice_model_pause_ms_is_refused():
    options = RecognizerOptions(pause_ms=500)
    deaf = FakeWhisper(options)
    deaf.voice_model = None
    with pytest.raises(SimulmtError, match="voice activity"):
        StreamingRecognizer(deaf, options)
    with pytest.raises(SimulmtError, match="pause_ms"):
        RecognizerOptions(pause_ms=-1)


def test_a_voice_pause_ends_the_sentence_before_the_next_word_live_and_batched(tmp_path):
    """No punctuation after "riding", then 2 s of silence: with pause_ms the talk cuts there as the pause is heard
    (the first sentence is written in full before the next word comes), even where the cascade's gap rule would
    not cut (its pause_ms is 10 s here); live equals batched."""
    from simulmt.speech.wav import write_wav

    silence = np.zeros(32000, dtype=np.float32)
    audio = np.concatenate([spoken()[:4 * WORD], silence, spoken()[4 * WORD:]])
    tr = cascade(pause_ms=10000.0, pause_ms_vad=600)
    live = tr.translate(audio, "expost", "wait-k", k=2)
    cut = [len(s) for s in split_sentences(SCRIPT, 64)]
    alone = [tr.translator.translate(" ".join(s), "expost", "wait-k", k=2).prediction
             for s in [SCRIPT[:4], ["A", *SCRIPT[5:cut[0]]]] + split_sentences(SCRIPT[cut[0]:], 64)]  # (after the
    # pause, a sentence: "A bike ...")
    assert live.prediction == " ".join(a for a in alone if a)
    first = len(alone[0].split())
    assert max(live.delays_ms[:first]) <= 2000 + 600 + 500 + 32  # written by the pause, not after the next word
    assert cascade(pause_ms=10000.0).translate(audio, "expost", "wait-k", k=2).prediction != live.prediction
    path = tmp_path / "pause.wav"
    write_wav(path, (audio * 32767).astype(np.int16), 16000)
    [batched] = list(tr.translate_iter([path], batch_size=2, layout="expost", policy="wait-k", k=2))
    assert batched.prediction == live.prediction and batched.delays == live.delays


@pytest.mark.parametrize("policy", ["local-agreement", "alignatt"])
def test_the_recogniser_confirms_every_word_once_with_a_bounded_buffer(policy):
    options = RecognizerOptions(step_ms=500, trim_ms=4000, max_buffer_ms=8000, policy=policy, margin_ms=300)
    whisper = FakeWhisper(options)
    recognizer = StreamingRecognizer(whisper, options)
    audio = spoken(repeat=48)  # ten minutes of audio: the buffer never passes max_buffer_ms
    heard = []
    for start in range(0, len(audio), 3000):  # pieces that do not line up with words or steps
        heard += recognizer.push(audio[start:start + 3000])
    heard += recognizer.finish()
    assert len(audio) / 16000 >= 600 and [w.text for w in heard] == SCRIPT * 48  # nothing lost, nothing twice
    assert whisper.longest <= 16 * (8000 + 500) + 3000  # max_buffer_ms, plus a step and a piece
    assert all(b.confirmed_ms >= a.confirmed_ms for a, b in zip(heard, heard[1:]))
    assert all(w.confirmed_ms >= w.end_ms for w in heard)  # confirmed after it was spoken
    lags = [w.confirmed_ms - w.end_ms for w in heard[:-3]]
    if policy == "local-agreement":
        assert max(lags) <= 2 * 500 + 500  # two steps
    else:  # AlignAtt: at the first update whose audio ends margin_ms after the word
        assert max(lags) <= 300 + 500
    assert len(recognizer.agreement.confirmed) <= 60 and recognizer.seconds > 0


def test_no_transcript_of_a_buffer_shorter_than_min_audio_ms_but_at_the_end():
    """``min_audio_ms`` (1,000 by default): the updates of a buffer shorter than it are not decoded (no call, no
    word); the rest are as without it, and the end of the audio is decoded however short it is."""
    def run(audio, **options):
        opts = RecognizerOptions(step_ms=500, trim_ms=4000, max_buffer_ms=8000, **options)
        whisper = FakeWhisper(opts)
        recognizer = StreamingRecognizer(whisper, opts)
        heard = recognizer.push(audio) + recognizer.finish()
        return [(w.text, w.confirmed_ms) for w in heard], whisper.calls

    audio = spoken(SCRIPT[:6])  # 3 s: updates at 0.5, 1.0, ... 3.0 s
    plain, plain_calls = run(audio, min_audio_ms=0)
    waited, waited_calls = run(audio)  # (the default: 1,000 ms)
    assert waited_calls == plain_calls - 1  # the 0.5 s update is not decoded
    assert [t for t, _ in waited] == [t for t, _ in plain] == SCRIPT[:6]
    assert waited[0][1] > plain[0][1]  # its first word is confirmed one update later
    short, calls = run(spoken(SCRIPT[:1]), min_audio_ms=1000)  # half a second, then the end: decoded at the end
    assert [t for t, _ in short] == SCRIPT[:1] and calls == 1
    with pytest.raises(SimulmtError, match="option min_audio_ms must be at least 0"):
        RecognizerOptions(min_audio_ms=-1)
    with pytest.raises(SimulmtError, match="min_audio_ms \\(13000\\) must not exceed trim_ms"):
        RecognizerOptions(min_audio_ms=13000)  # (the buffer is cut only after a transcript)


def test_later_step_ms_transcribes_less_often_once_a_sentences_first_words_are_confirmed():
    """``later_step_ms``: the first ``fast_words`` words come as with ``step_ms`` alone, at the same audio times;
    then the buffer is transcribed every ``later_step_ms`` until a transcript begins the next sentence, when the step
    is short again: that sentence's first words wait at most one long step more. Every word still comes, once, with
    fewer transcripts."""
    def run(**options):
        opts = RecognizerOptions(step_ms=500, min_audio_ms=0, pause_ms=0, trim_ms=4000, max_buffer_ms=8000,
                                 **options)
        whisper = FakeWhisper(opts)
        recognizer = StreamingRecognizer(whisper, opts)
        audio = spoken(SCRIPT[:18])  # two sentences (9 s)
        heard = [w for start in range(0, len(audio), 4000) for w in recognizer.push(audio[start:start + 4000])]
        heard += recognizer.finish()
        return [w.text for w in heard], [w.confirmed_ms for w in heard], whisper.calls

    every_words, every, every_calls = run()
    later_words, later, later_calls = run(later_step_ms=1500, fast_words=2)
    assert later_words == every_words == SCRIPT[:18]
    assert later_calls < every_calls
    assert later[:2] == every[:2]  # "A man": as soon as before
    assert later[2] > every[2]  # "is": later
    for first in (9, 10):  # "Two children": heard at a long step, then confirmed at the next short one
        assert every[first] < later[first] <= every[first] + 1500
    assert later[9] - later[8] == 500  # "park." came at the long step that heard "Two"; a short one confirmed it
    with pytest.raises(SimulmtError, match="later_step_ms must be 0 \\(off\\) or within step_ms..trim_ms"):
        RecognizerOptions(step_ms=1000, later_step_ms=500)


def test_spell_numbers_gives_the_translator_small_numbers_in_words():
    """``spell_numbers`` (English): Whisper's "2" reaches the translator as "Two" at a sentence's start and "two"
    inside one; the agreement still compares what Whisper wrote."""
    class Digits(FakeWhisper):
        def transcribe(self, audio, prompt=""):
            digits = {"Two": "2", "a": "1"}
            return [TimedWord(digits.get(w.text, w.text), w.start_ms, w.end_ms, w.ends_segment)
                    for w in super().transcribe(audio, prompt)]

    def heard(**options):
        opts = RecognizerOptions(step_ms=500, min_audio_ms=0, pause_ms=0, **options)
        recognizer = StreamingRecognizer(Digits(opts), opts)
        return [w.text for w in recognizer.push(spoken(SCRIPT[:12])) + recognizer.finish()]

    assert heard(spell_numbers=False)[3:11] == ["riding", "1", "bike", "in", "the", "park.", "2", "children"]
    assert heard()[3:11] == ["riding", "one", "bike", "in", "the", "park.", "Two", "children"]  # (the default)
    assert heard(language="de")[9] == "2"  # (English words only)


def test_a_recording_begun_in_lower_case_reaches_the_translator_with_a_capital():
    """``capitalise_starts`` (the default, any language): Whisper's "a man" at a recording's start reaches the
    translator as "A man"; after a full stop Whisper's own case stands ("park. two": the talk does not split there
    either); the agreement still compares what Whisper wrote. Off, the words come as Whisper wrote them."""
    class Lower(FakeWhisper):
        def transcribe(self, audio, prompt=""):
            return [TimedWord(w.text.lower() if w.text in ("A", "Two") else w.text, w.start_ms, w.end_ms,
                              w.ends_segment) for w in super().transcribe(audio, prompt)]

    def heard(**options):
        opts = RecognizerOptions(step_ms=500, min_audio_ms=0, pause_ms=0, **options)
        recognizer = StreamingRecognizer(Lower(opts), opts)
        return [w.text for w in recognizer.push(spoken(SCRIPT[:12])) + recognizer.finish()]

    assert heard(capitalise_starts=False)[:10] == ["a", "man", "is", "riding", "a", "bike", "in", "the", "park.",
                                                   "two"]
    assert heard()[:10] == ["A", "man", "is", "riding", "a", "bike", "in", "the", "park.", "two"]
    assert heard(language="de")[0] == "A"  # (any language with case)


def test_a_windows_silence_padding_is_whispers_log_mel_of_the_audio_padded_with_zeros():
    """``window_padding="silence"``: the window is Whisper's scaled log-mel of the buffer followed by zeros up to the
    window, though only one STFT window of zeros is computed, at speech level, for quiet audio (where the floor is
    Whisper's -10 clip, not 8 below the loudest) and for digital silence; "zeros" (the default) leaves
    faster-whisper's 0 after the buffer's frames. Both say the same number of frames hold the audio."""
    feature_extractor = pytest.importorskip("faster_whisper.feature_extractor").FeatureExtractor(feature_size=80)
    from simulmt.speech.recognizer import log_mel_window

    rng = np.random.default_rng(0)
    speech = (0.3 * np.sin(np.arange(40000) / 7.0) * rng.uniform(0.2, 1.0, 40000)).astype(np.float32)
    for scale in (1.0, 1e-3, 0.0):
        for samples in (16000, 16080, 24321, 40000):
            audio = scale * speech[:samples]
            whole = feature_extractor(np.pad(audio, (0, 16 * 10000 - samples)))[:, :1000]
            window, content = log_mel_window(feature_extractor, audio, 1000, "silence")
            assert window.shape == (80, 1000) and np.allclose(window, whole, rtol=0, atol=1e-6)
            zeros, same = log_mel_window(feature_extractor, audio, 1000)
            assert content == same == samples // 160 + 1 and not zeros[:, same:].any()
            # the buffer's frames but its last, the same in both (to float32 rounding: the two STFTs run over arrays
            # of other lengths, and numpy's FFT may round a frame an ulp apart, as numpy 2.4's does at 16,080 samples)
            assert np.allclose(zeros[:, :same - 2], window[:, :same - 2], rtol=0, atol=1e-6)
    assert abs(window.min() + 1.5) < 1e-6  # (digital silence: Whisper's floor)
    with pytest.raises(SimulmtError, match="unknown recogniser window_padding 'noise'"):
        RecognizerOptions(window_padding="noise")


def test_the_encoder_window_is_window_ms_or_a_second_past_the_buffer_with_min_window_ms():
    from simulmt.speech.recognizer import encoder_window_ms

    fixed = RecognizerOptions()
    assert [encoder_window_ms(fixed, ms) for ms in (300, 4200, 10000)] == [10000] * 3
    short = RecognizerOptions(min_window_ms=7000)
    assert [encoder_window_ms(short, ms) for ms in (300, 5000, 6001, 8500, 10000)] == \
        [7000, 7000, 8000, 10000, 10000]  # whole seconds, at least a second past the audio, at most window_ms
    for bad in (dict(min_window_ms=-1), dict(min_window_ms=12000), dict(min_window_ms=5000, window_ms=0)):
        with pytest.raises(SimulmtError, match="min_window_ms must be within"):
            RecognizerOptions(**bad)


def test_the_cascade_translates_sentence_by_sentence_and_live_equals_batched(tmp_path):
    from simulmt.speech.wav import write_wav

    tr = cascade()
    audio = spoken()
    live = tr.translate(audio, "expost", "wait-k", k=2)
    assert live.heard == " ".join(SCRIPT) and live.unit == "words"
    sentences = split_sentences(SCRIPT, 64)  # the talk's cuts (no context by default: each sentence alone)
    assert len(sentences) == 3
    alone = [tr.translator.translate(" ".join(s), "expost", "wait-k", k=2) for s in sentences]
    assert live.prediction == " ".join(a.prediction for a in alone)
    offsets = [sum(len(x) for x in sentences[:i]) for i in range(len(sentences))]
    assert live.delays == [d + o for a, o in zip(alone, offsets) for d in a.delays]
    assert len(live.delays_ms) == len(live.delays) and all(0 < ms <= 1000 * len(audio) / 16000
                                                             for ms in live.delays_ms)
    assert live.encoder_ms > 0 and live.duration_ms == pytest.approx(1000 * len(audio) / 16000)
    paths = []
    for i in range(3):
        path = tmp_path / f"u{i}.wav"
        samples = audio if i != 1 else spoken(SCRIPT[:9])
        write_wav(path, (samples * 32767).astype(np.int16), 16000)
        paths.append(str(path))
    paths.append(str(tmp_path / "missing.wav"))
    one = list(tr.translate_iter(paths, batch_size=1, layout="expost", policy="wait-k", k=2))
    many = list(tr.translate_iter(paths, batch_size=3, layout="expost", policy="wait-k", k=2))
    assert [r.source for r in many] == paths and many[-1].error and "not found" in many[-1].error
    for a, b in zip(one, many):
        assert (a.prediction, a.delays, a.delays_ms, a.heard) == (b.prediction, b.delays, b.delays_ms, b.heard)
        assert len(b.elapsed) == len(b.delays)


def test_a_learned_policy_decides_once_per_update_live_and_batched(tmp_path, monkeypatch):
    import torch

    from simulmt.core.learned_policy import PolicyHead
    from simulmt.speech.wav import write_wav

    tr = cascade()
    hidden = tr.translator.model.config.hidden_size
    # (the tiny translator is shared by the tests: the head goes when the test ends, or the service's tests would
    # find a learned policy where they expect none)
    monkeypatch.setattr(tr.translator, "policy_head",
                        PolicyHead(torch.randn(2, hidden, generator=torch.Generator().manual_seed(1)), torch.zeros(2)))
    session = tr.session("expost", "learned", tau=0.5)
    assert session.kwargs["policy"].per_arrival
    live = tr.translate(spoken(SCRIPT[:9]), "expost", "learned", tau=0.5)
    assert live.prediction and len(live.delays) == len(live.prediction.split())
    path = tmp_path / "u.wav"
    write_wav(path, (spoken(SCRIPT[:9]) * 32767).astype(np.int16), 16000)
    (one,) = tr.translate_iter([str(path)], batch_size=1, layout="expost", policy="learned", tau=0.5)
    (batched, _) = tr.translate_iter([str(path), str(path)], batch_size=2, layout="expost", policy="learned",
                                     tau=0.5)
    assert (one.prediction, one.delays, one.delays_ms) == (batched.prediction, batched.delays, batched.delays_ms)


def test_a_transcript_that_begins_with_the_confirmed_words_goes_on_after_them_whatever_its_times():
    agreement = LocalAgreement(2)
    agreement.update(words("a", "little", "girl"))
    agreement.update(words("a", "little", "girl", "is"))  # confirms a little girl (in the buffer still)
    # the next transcripts time the same words differently (segment times spread over more audio)
    shifted = words("a", "little", "girl", "is", "wooden", step=300.0)
    assert [w.text for w in agreement.update(shifted)] == ["is"]
    assert [w.text for w in agreement.update(words("a", "little", "girl", "is", "wooden", "house", step=250.0))] \
        == ["wooden"]
    assert [w.text for w in agreement.flush()] == ["house"]


def test_the_simuleval_speech_agent_runs_the_cascade_by_default():
    """SimulEval's speech segments through the agent with the cascade (the default when no --speech-model): the
    words it writes are those of the cascade's own session, and none before its source word was confirmed."""
    from argparse import Namespace

    pytest.importorskip("simuleval", reason="SimulEval 1.1.4 (setup.sh puts it in .simuleval/)")
    from simulmt.evaluation.simuleval_speech_agent import SimulmtSpeechAgent

    tr = cascade()
    agent = SimulmtSpeechAgent(Namespace(k=2), speech=tr)
    assert (agent.layout, agent.policy_name) == ("expost", "wait-k")
    x = spoken(SCRIPT[:9])
    written, sent = through_simuleval_agent(agent, x)
    alone = tr.translate(x, "expost", "wait-k", k=2, piece_ms=320)
    assert " ".join(written) == alone.prediction == agent.translations[0].prediction
    assert all(s >= d - 1e-6 for s, d in zip(sent, alone.delays_ms))


def test_load_speech_gives_the_recogniser_the_options_asked_for(monkeypatch):
    from simulmt.speech import loading
    from simulmt.speech.recognizer import DEFAULT_PAUSE_MS, DEFAULT_POLICY

    seen = []
    monkeypatch.setattr(CascadeTranslator, "load", classmethod(lambda cls, model, adapter, asr, **kw: seen.append(asr)))
    loading.load_speech(None, asr_policy="alignatt", asr_pause_ms=700, asr_step_ms=500, asr_beam=5,
                        asr_later_step_ms=1000)
    loading.load_speech(None)
    assert (seen[0].policy, seen[0].pause_ms, seen[0].step_ms, seen[0].beam_size, seen[0].later_step_ms) == \
        ("alignatt", 700, 500, 5, 1000)
    assert (seen[1].policy, seen[1].pause_ms, seen[1].beam_size, seen[1].later_step_ms) == \
        (DEFAULT_POLICY, DEFAULT_PAUSE_MS, 1, 0)
    with pytest.raises(SimulmtError, match="later_step_ms must be 0 \\(off\\) or within step_ms"):
        loading.load_speech(None, asr_step_ms=1000, asr_later_step_ms=600)  # (before any model loads)


def test_translate_and_evaluate_give_the_recogniser_the_later_step(tmp_path, monkeypatch):
    """``--asr-later-step-ms`` reaches the recogniser from ``translate --audio`` and ``evaluate --source-audio``."""
    from simulmt import cli
    from simulmt.speech import loading
    from simulmt.speech.wav import write_wav

    seen = []

    def fake_load(speech_model, **kwargs):
        seen.append(kwargs)
        raise SimulmtError("stopped after the options were given")
    monkeypatch.setattr(loading, "load_speech", fake_load)
    wav = tmp_path / "a.wav"
    write_wav(wav, spoken(SCRIPT[:2]), 16000)
    (tmp_path / "list").write_text(f"{wav}\n")
    (tmp_path / "ref").write_text("Ein Mann\n")
    assert cli.main(["translate", "--audio", str(wav), "--asr-step-ms", "500", "--asr-later-step-ms", "1000"]) == 1
    assert cli.main(["evaluate", "--source-audio", str(tmp_path / "list"), "--reference", str(tmp_path / "ref"),
                     "--output", str(tmp_path / "runs"), "--asr-step-ms", "500", "--asr-later-step-ms", "1500"]) == 1
    assert [(k["asr_step_ms"], k["asr_later_step_ms"]) for k in seen] == [(500, 1000), (500, 1500)]


def test_a_speech_runs_record_names_the_later_step_and_the_spelled_numbers(tmp_path):
    """``evaluate --source-audio``: the recogniser's label (an identity key: a run made otherwise is not resumed)
    names the later step and the small numbers in words (runs before them gave the digits)."""
    from pathlib import Path

    from simulmt.evaluation.options import EvaluateOptions
    from simulmt.evaluation.run_dir import run_config
    from simulmt.evaluation.runs import RunSpec
    from simulmt.evaluation.testset import TestSet

    test_set = TestSet(Path("a.list"), Path("ref"), ["a.wav"], ["Ein Mann"], "0", "0")
    label = {}
    for later in (0, 1000):
        options = EvaluateOptions(source_audio="a.list", reference="ref", output=str(tmp_path), asr_step_ms=500,
                                  asr_later_step_ms=later)
        label[later] = run_config(RunSpec("expost", "wait-k", 3), "m", options, test_set)["speech_model"]
    assert label[0] == "whisper tiny.en (step 500 ms, LocalAgreement-2, lookback 1, small numbers in words, " \
        "first words with a capital, compounds and numbers matched, pause 700 ms)"
    assert label[1000] == label[0].replace("500 ms,", "500 ms, 1000 ms after a sentence's first words,")


def test_the_simuleval_speech_agent_passes_a_head_vocabulary_to_the_text_model(monkeypatch):
    from argparse import ArgumentParser

    pytest.importorskip("simuleval", reason="SimulEval 1.1.4 (setup.sh puts it in .simuleval/)")
    from simulmt.evaluation import simuleval_speech_agent

    seen = []
    monkeypatch.setattr(simuleval_speech_agent, "load_speech",
                        lambda speech_model, **kwargs: (seen.append(kwargs), (cascade(), {}))[1])
    parser = ArgumentParser()
    simuleval_speech_agent.SimulmtSpeechAgent.add_args(parser)
    simuleval_speech_agent.SimulmtSpeechAgent(parser.parse_args(["--head-vocabulary", "a.de,b.en"]))
    simuleval_speech_agent.SimulmtSpeechAgent(parser.parse_args([]))
    assert [kw["head_vocabulary"] for kw in seen] == ["a.de,b.en", None]
