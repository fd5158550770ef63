"""The synthesised speech corpus: exact word timestamps, determinism, tempo, noise, resuming, errors.

Needs the Debian packages espeak-ng and sox (skips without them); never needs ../shared/data. Each test speaks a
few short sentences (about 20 ms of compute per word)."""

import json
import os
import shutil
import wave
from itertools import pairwise

import numpy as np
import pytest

from simulmt.errors import SimulmtError
from simulmt.finetune.speech import synth
from simulmt.finetune.speech.synth import SynthOptions, read_manifest, synthesise_corpus, synthesise_sentence
from simulmt.speech.wav import read_wav, write_wav

# under CI (.ci/run installs them) a missing tool fails the tests instead of skipping them
needs_tools = pytest.mark.skipif((shutil.which("espeak-ng") is None or shutil.which("sox") is None)
                                 and not os.environ.get("CI"),
                                 reason="needs espeak-ng and sox (apt-get install espeak-ng sox)")

WORDS = "A dog runs on the grass.".split()
SOURCES = ["A man rides a bike.", "Two dogs play.", "A girl is singing loudly."]
TARGETS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.", "Ein Mädchen singt laut."]
OPTIONS = SynthOptions(voices=("en-us", "en-gb", "en-us+f3", "en-gb-x-rp"), rates=(150, 175, 190),
                       pitches=(40, 60), tempo=(0.9, 1.1), snr_db=(15.0, 30.0))


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2))) if x.size else 0.0


def parallel_files(tmp_path, sources=SOURCES, targets=TARGETS):
    (tmp_path / "text.en").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "text.de").write_text("".join(t + "\n" for t in targets), encoding="utf-8")
    return tmp_path / "text.en", tmp_path / "text.de"


@pytest.fixture(scope="module")
def sentence():
    return synthesise_sentence(WORDS, "en-us", 175, 50, word_gap_ms=80.0, edge_ms=100.0)


# ---- one sentence ------------------------------------------------------------------------------------------------
@needs_tools
def test_timestamps_are_exact_monotonic_and_bracket_the_speech(sentence):
    audio, timings = sentence
    assert audio.dtype == np.int16 and [t.word for t in timings] == WORDS
    spans = [t.samples(16000) for t in timings]
    assert spans[0][0] == 1600 and spans[-1][1] == len(audio) - 1600  # 100 ms edges
    for (start, end), (next_start, _) in pairwise(spans):
        assert 0 < start < end < next_start and next_start - end == 1280  # an 80 ms pause between words
    for start, end in spans:
        assert rms(audio[start:end]) > 1000  # speech (the sentence peaks at 16384)
        assert audio[start] != 0 and audio[end - 1] != 0 and audio[start - 1] == 0 and audio[end] == 0  # exact
    gaps = [audio[end:next_start] for (_, end), (next_start, _) in pairwise(spans)]
    assert all(rms(gap) == 0 for gap in gaps) and rms(audio[:spans[0][0]]) == 0 and rms(audio[spans[-1][1]:]) == 0
    assert all(t.start_ms == start / 16 and t.end_ms == end / 16 for t, (start, end) in zip(timings, spans))


@needs_tools
def test_a_word_espeak_says_nothing_for_has_an_empty_span():
    _, (dogs, dash, run) = synthesise_sentence(["dogs", "-", "run"], word_gap_ms=50.0)
    assert dash.start_ms == dash.end_ms == dogs.end_ms and run.start_ms - dogs.end_ms == 50.0
    with pytest.raises(synth.NothingAudible):
        synthesise_sentence(["-", "--"])


@needs_tools
def test_tempo_scales_the_timestamps_which_still_bracket_the_speech(sentence):
    _, slow = sentence
    audio, fast = synthesise_sentence(WORDS, "en-us", 175, 50, word_gap_ms=80.0, edge_ms=100.0, tempo=1.25)
    assert fast[0].start_ms == 80.0 and len(audio) / 16 == pytest.approx(fast[-1].end_ms + 80.0)
    speech_ms = fast[-1].end_ms - fast[0].start_ms, slow[-1].end_ms - slow[0].start_ms
    assert speech_ms[0] == pytest.approx(speech_ms[1] / 1.25, rel=0.05)  # WSOLA: within a few % of 1/tempo
    for f, s in zip(fast, slow):
        assert f.end_ms - f.start_ms == pytest.approx((s.end_ms - s.start_ms) / 1.25, rel=0.1)
    spans = [t.samples(16000) for t in fast]
    for (start, end), (next_start, _) in pairwise(spans):
        assert rms(audio[start:end]) > 1000 and rms(audio[end:next_start]) == 0 and next_start - end == 1024


@needs_tools
@pytest.mark.parametrize("snr_db", [0.0, 10.0, 25.0])
def test_noise_has_the_requested_snr(sentence, snr_db):
    clean, timings = sentence
    noisy, same = synthesise_sentence(WORDS, "en-us", 175, 50, word_gap_ms=80.0, edge_ms=100.0, snr_db=snr_db,
                                      seed=7)
    assert same == timings and len(noisy) == len(clean)
    speech = np.concatenate([np.arange(*t.samples(16000)) for t in timings])
    noise = noisy.astype(np.float64) - clean
    measured = 10 * np.log10(np.mean(clean[speech].astype(np.float64) ** 2) / np.mean(noise[speech] ** 2))
    assert abs(measured - snr_db) < 1.0
    again, _ = synthesise_sentence(WORDS, "en-us", 175, 50, word_gap_ms=80.0, edge_ms=100.0, snr_db=snr_db, seed=7)
    assert np.array_equal(again, noisy)


def test_wav_round_trip(tmp_path):
    audio = (np.arange(-500, 500) * 30).astype(np.int16)
    write_wav(tmp_path / "x.wav", audio, 16000)
    back, rate = read_wav(tmp_path / "x.wav")
    assert rate == 16000 and np.array_equal(back, audio)


# ---- the corpus --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A clean run over three lines, the second line empty (skipped)."""
    folder = tmp_path_factory.mktemp("corpus")
    source, target = parallel_files(folder, [SOURCES[0], "  ", *SOURCES[1:]], [TARGETS[0], "", *TARGETS[1:]])
    return synthesise_corpus(source, target, folder / "out", OPTIONS)


@needs_tools
def test_manifest_format_and_the_skipped_empty_line(corpus):
    records = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["000001", "000003", "000004"]
    assert list(records[0]) == ["id", "audio", "source", "target", "words", "duration_ms", "voice", "rate", "pitch",
                                "tempo", "snr_db", "sample_rate"]
    assert records[0]["audio"] == "audio/000001.wav" and records[0]["target"] == TARGETS[0]
    summary = json.loads((corpus.parent / "corpus.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == [{"line": 2, "reason": "empty source line"}] and summary["utterances"] == 3
    for utterance, source in zip(read_manifest(corpus), SOURCES):
        assert [w.word for w in utterance.words] == source.split()
        assert utterance.voice in OPTIONS.voices and 0.9 <= utterance.tempo <= 1.1 and 15 <= utterance.snr_db <= 30
        with wave.open(str(utterance.audio)) as f:
            assert (f.getframerate(), f.getnchannels(), f.getsampwidth()) == (16000, 1, 2)
            assert f.getnframes() == utterance.duration_ms * 16
        audio = utterance.read_audio()
        starts = [w.start_ms for w in utterance.words]
        assert starts == sorted(starts) and all(w.end_ms > w.start_ms for w in utterance.words)
        assert utterance.words[-1].end_ms < utterance.duration_ms
        for w in utterance.words:  # noisy now, but each word still stands out of the noise around it
            start, end = w.samples(16000)
            assert rms(audio[start:end]) > 2 * rms(audio[:800])


@needs_tools
def test_same_seed_same_bytes_other_seed_other_choices(corpus, tmp_path):
    source, target = parallel_files(tmp_path, [SOURCES[0], "  ", *SOURCES[1:]], [TARGETS[0], "", *TARGETS[1:]])
    again = synthesise_corpus(source, target, tmp_path / "again", OPTIONS)
    assert again.read_bytes() == corpus.read_bytes()
    for name in ("000001", "000003", "000004"):
        assert (again.parent / "audio" / f"{name}.wav").read_bytes() == \
            (corpus.parent / "audio" / f"{name}.wav").read_bytes()
    other = synthesise_corpus(source, target, tmp_path / "other", SynthOptions(**{**OPTIONS.__dict__, "seed": 1}))
    def choices(manifest):
        return [(u.voice, u.rate, u.pitch, u.tempo, u.snr_db) for u in read_manifest(manifest)]
    assert choices(other) != choices(corpus)


@needs_tools
def test_a_rerun_after_a_kill_finishes_the_rest_and_equals_a_clean_run(corpus, tmp_path, monkeypatch):
    source, target = parallel_files(tmp_path, [SOURCES[0], "  ", *SOURCES[1:]], [TARGETS[0], "", *TARGETS[1:]])
    out = tmp_path / "out"
    shutil.copytree(corpus.parent, out)
    (out / "audio" / "000003.wav").unlink()  # killed: one wav missing, the manifest cut short, a partial write
    (out / "manifest.jsonl").write_text(corpus.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    (out / "audio" / "000004.wav.partial").write_bytes(b"RIFF")
    spoken = []
    original = synth._synthesise_utterance
    monkeypatch.setattr(synth, "_synthesise_utterance", lambda root, utterance_id, *rest: (
        spoken.append(utterance_id), original(root, utterance_id, *rest))[1])
    manifest = synthesise_corpus(source, target, out, OPTIONS)
    assert spoken == ["000003"]
    assert manifest.read_bytes() == corpus.read_bytes()
    assert (out / "audio" / "000003.wav").read_bytes() == (corpus.parent / "audio" / "000003.wav").read_bytes()
    assert not list((out / "audio").glob("*.partial"))
    spoken.clear()  # other options: nothing is reused
    synthesise_corpus(source, target, out, SynthOptions(**{**OPTIONS.__dict__, "seed": 5, "limit": 1}))
    assert spoken == ["000001"]


# ---- errors --------------------------------------------------------------------------------------------------------
@needs_tools
def test_mismatched_line_counts(tmp_path):
    source, target = parallel_files(tmp_path, SOURCES, TARGETS[:2])
    with pytest.raises(SimulmtError, match="3 lines but the target file .* has 2"):
        synthesise_corpus(source, target, tmp_path / "out", OPTIONS)


@pytest.mark.parametrize("how", ["tool name", "PATH"])
def test_missing_tools_say_how_to_install_them(tmp_path, monkeypatch, how):
    if how == "tool name":
        monkeypatch.setattr(synth, "ESPEAK", "espeak-ng-not-installed")
    else:
        monkeypatch.setenv("PATH", str(tmp_path))
    source, target = parallel_files(tmp_path)
    with pytest.raises(SimulmtError, match="apt-get install espeak-ng sox"):
        synthesise_corpus(source, target, tmp_path / "out", OPTIONS)
    with pytest.raises(SimulmtError, match="apt-get install espeak-ng sox"):
        synthesise_sentence(WORDS)


@needs_tools
def test_a_voice_variant_espeak_ignores_is_an_error():
    with pytest.raises(SimulmtError, match="ignores the variant of 'en-gb\\+f2'"):
        synth.check_voices(["en-gb+f2"])
    with pytest.raises(SimulmtError, match="no voice 'xx-nothing'"):
        synth.check_voices(["xx-nothing"])


def test_options_are_checked():
    with pytest.raises(SimulmtError, match="rates"):
        SynthOptions(rates=(20,))
    with pytest.raises(SimulmtError, match="range"):
        SynthOptions(tempo=(1.2, 0.9))
