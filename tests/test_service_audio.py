"""Audio on the service's WebSocket against a real server: binary PCM frames are heard by a recogniser of the
client's own and translated as text; concurrent audio clients never hear each other; malformed audio gets an error.
The recogniser is the fake of test_speech_cascade (its audio spells its words), so every check is exact."""

from __future__ import annotations

import json
from dataclasses import replace
import threading

import numpy as np
import pytest

pytest.importorskip("uvicorn")
from websockets.sync.client import connect  # noqa: E402

from helpers import tiny_translator  # noqa: E402
from simulmt.service.audio import _resampler  # noqa: E402
from simulmt.text.segment import split_sentences  # noqa: E402
from simulmt.speech.recognizer import RecognizerOptions  # noqa: E402
from simulmt.speech.written_words import written_words  # noqa: E402
from test_service import receive_all, running  # noqa: E402
from test_speech_cascade import SCRIPT, FakeWhisper, spoken  # noqa: E402

OPTIONS = RecognizerOptions(step_ms=500, trim_ms=4000, max_buffer_ms=8000)


def pcm(script) -> bytes:
    """The fake recogniser's audio of ``script`` (words of SCRIPT: each is spoken as SCRIPT's word at its index)."""
    chunks = np.split(spoken(), len(SCRIPT))
    at = {}
    for i, word in enumerate(SCRIPT):
        at.setdefault(word, i)
    audio = np.concatenate([chunks[at[word]] for word in script])
    return (audio * 32767).astype("<i2").tobytes()


def speak(address: str, script, piece: int = 6400, query: str = "k=2") -> list[dict]:
    with connect(f"ws://{address}/v1/stream?{query}") as ws:
        data = pcm(script)
        for start in range(0, len(data), piece):  # 0.2 s frames, as a microphone sends them
            ws.send(data[start:start + piece])
        ws.send(json.dumps({"type": "end"}))
        return receive_all(ws)


def expected_sentences(script, k: int = 2) -> list[str]:
    tr = tiny_translator("llama")
    return [tr.translate(" ".join(s), "expost", "wait-k", k=k).prediction for s in split_sentences(script, 64)]


def test_audio_frames_are_heard_and_translated_sentence_by_sentence():
    with running(asr=FakeWhisper(OPTIONS), max_frame_bytes=8192) as (address, hub):
        messages = speak(address, SCRIPT)
    heard = [m for m in messages if m["type"] == "heard"]
    assert [m["text"] for m in heard] == SCRIPT  # every word once, in order
    assert all(a["audio_ms"] <= b["audio_ms"] for a, b in zip(heard, heard[1:]))
    sentences = [m for m in messages if m["type"] == "sentence"]
    assert [m["translation"] for m in sentences] == expected_sentences(SCRIPT)
    assert not [m for m in messages if m["type"] == "error"]


def test_a_pause_in_the_audio_ends_the_sentence_as_a_boundary_would():
    """2 s of silence after "riding" (no punctuation): with the recogniser's pause_ms the service ends the sentence
    there (and the next word, "a", starts a sentence: "A"); without it, the sentence runs on to the full stop."""
    silence = np.zeros(32000, dtype="<i2").tobytes()
    data = pcm(SCRIPT[:4]) + silence + pcm(SCRIPT[4:])
    got = {}
    for pause_ms in (0, 600):
        with running(asr=FakeWhisper(replace(OPTIONS, pause_ms=pause_ms)), max_frame_bytes=8192) as (address, _):
            with connect(f"ws://{address}/v1/stream?k=2") as ws:
                for start in range(0, len(data), 6400):
                    ws.send(data[start:start + 6400])
                ws.send(json.dumps({"type": "end"}))
                messages = receive_all(ws)
        after_pause = ["A", *SCRIPT[5:]] if pause_ms else SCRIPT[4:]  # (a sentence's first word: a capital)
        assert [m["text"] for m in messages if m["type"] == "heard"] == SCRIPT[:4] + after_pause
        got[pause_ms] = [m["translation"] for m in messages if m["type"] == "sentence"]
    assert got[0] == expected_sentences(SCRIPT)
    assert got[600] == expected_sentences(SCRIPT[:4]) + expected_sentences(["A", *SCRIPT[5:]])


def test_eight_audio_clients_each_get_what_they_would_alone():
    scripts = [SCRIPT[i:] + SCRIPT[:i] for i in range(0, 24, 3)]  # eight different talks
    results: dict[int, list[dict]] = {}
    with running(asr=FakeWhisper(OPTIONS), max_frame_bytes=8192) as (address, _):
        def client(i: int) -> None:
            results[i] = speak(address, scripts[i])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    for i, script in enumerate(scripts):
        script = written_words(script)[0]  # (a talk that begins inside a sentence: "Riding a bike ...")
        assert [m["text"] for m in results[i] if m["type"] == "heard"] == script
        assert [m["translation"] for m in results[i] if m["type"] == "sentence"] == expected_sentences(script)


def test_malformed_audio_gets_an_error_and_the_stream_goes_on():
    with running(asr=FakeWhisper(OPTIONS), max_frame_bytes=8192) as (address, _):
        with connect(f"ws://{address}/v1/stream?k=2") as ws:
            for frame, message in ((b"\x01\x02\x03", "even number of bytes"), (b"\x00" * 9000, "frame over 8192")):
                ws.send(frame)
                reply = json.loads(ws.recv(timeout=30))
                assert reply["type"] == "error" and message in reply["message"]
            data = pcm(SCRIPT[:9])
            for start in range(0, len(data), 6400):
                ws.send(data[start:start + 6400])
            ws.send(json.dumps({"type": "end"}))
            messages = receive_all(ws)
        assert [m["text"] for m in messages if m["type"] == "heard"] == SCRIPT[:9]
        with connect(f"ws://{address}/v1/stream?audio_rate=5") as ws:
            reply = json.loads(ws.recv(timeout=30))
            assert reply["type"] == "error" and "audio_rate" in reply["message"]


def test_a_server_without_a_recogniser_says_so():
    with running() as (address, _):
        with connect(f"ws://{address}/v1/stream") as ws:
            ws.send(b"\x00\x00")
            reply = json.loads(ws.recv(timeout=30))
            assert reply["type"] == "error" and "takes no audio" in reply["message"]


def test_audio_at_another_rate_is_resampled_to_16_khz():
    resample = _resampler(48000)
    t = np.arange(48000) / 48000
    tone = (np.sin(2 * np.pi * 440 * t) * 10000).astype(np.int16)
    out = np.concatenate([resample(tone[i:i + 4800]) for i in range(0, len(tone), 4800)])  # streamed in pieces
    assert abs(len(out) - 16000) <= 64
    spectrum = np.abs(np.fft.rfft(out[:16000 // 2 * 2].astype(float)))
    assert abs(np.argmax(spectrum) * 16000 / len(out[:16000 // 2 * 2]) - 440) < 5  # the same tone
