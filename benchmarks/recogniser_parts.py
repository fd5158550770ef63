"""Where a streaming recogniser update's time goes, and what Whisper hears in shorter encoder windows.

Each of the first ``--files`` flite recordings of ``speech_voices.py`` (cached voices) is transcribed every
``--step-ms`` of its audio as ``simulmt.speech.recognizer`` does (log-mel features, the encoder over a window, the
greedy decoder with timestamps, the words), with no agreement and no prompt: the update's cost by part, per update
and per second of audio. Then each file's whole audio (and its first half) is transcribed in windows of
``--windows`` seconds (at least a second past the audio, at most 10; the features zero-padded to the window, as in
the 10 s window), with the WER of the whole files' transcripts against their text.

    .venv/bin/python benchmarks/recogniser_parts.py --asr-model base --threads 2 --files 36 --windows 10,7,5

Measured (2026-11-29, session 43; docs/speech-recogniser.md): Whisper base, 500 ms step, 2 threads: features
2.8 ms, encoder 75.7 ms, decoder 78.3 ms, words 0.1 ms an update; WER 12.3% in the 10 s window, 11.5% in 7 s,
69.3% in 5 s.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "multi30k"
CACHE = Path(os.environ.get("SIMULMT_CACHE", Path.home() / ".cache" / "simulmt")) / "voices"
VOICES = ("flite-slt", "flite-rms", "flite-awb")  # one per line in turn, as speech_voices.py speaks them


def words_of(text: str) -> list[str]:
    return re.sub(r"[^\w' ]", "", text.lower()).split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asr-model", default="base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--files", type=int, default=36)
    parser.add_argument("--step-ms", type=int, default=500)
    parser.add_argument("--windows", default="10,7,5", help="encoder windows to try, in seconds (10: the default)")
    parser.add_argument("--source", default=str(DATA / "test2017.en"))
    args = parser.parse_args()

    import ctranslate2

    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions, Whisper
    from simulmt.speech.wav import read_audio

    sources = Path(args.source).read_text(encoding="utf-8").splitlines()
    files = [(i, CACHE / VOICES[i % 3] / f"{Path(args.source).name}-{i}.wav") for i in range(args.files)]
    missing = [str(p) for _, p in files if not p.is_file()]
    if missing:
        raise SystemExit(f"{len(missing)} recordings missing (first: {missing[0]}): run speech_voices.py --voices "
                         f"flite:slt,flite:rms,flite:awb --lines {args.files} first")
    whisper = Whisper(RecognizerOptions(model=args.asr_model, threads=args.threads))
    audios = [(i, read_audio(str(p)).astype(np.float32) / 32768) for i, p in files]

    def encode(audio: np.ndarray, seconds: float):
        frames = int(seconds * 100)  # 10 ms a frame
        features = whisper.model.feature_extractor(audio)[:, :frames]
        window = np.zeros((features.shape[0], frames), dtype=np.float32)
        window[:, :features.shape[1]] = features
        return window

    parts = dict(features=0.0, encoder=0.0, decoder=0.0, words=0.0)
    updates, audio_s, step = 0, 0.0, 16 * args.step_ms
    for _, audio in audios:
        audio_s += len(audio) / 16000
        for end in [*range(step, len(audio), step), len(audio)]:
            updates += 1
            t0 = time.perf_counter()
            window = encode(audio[:end], 10.0)
            t1 = time.perf_counter()
            encoded = whisper.model.model.encode(ctranslate2.StorageView.from_array(window[None]), to_cpu=False)
            t2 = time.perf_counter()
            segments = whisper._decode(encoded, "", 1000 * end / 16000)
            t3 = time.perf_counter()
            whisper._spread_words(segments)
            t4 = time.perf_counter()
            for name, took in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                parts[name] += took
    print(f"{updates} updates every {args.step_ms} ms over {audio_s:.0f} s of audio ({args.asr_model}, "
          f"{args.threads} threads)")
    print("ms an update: " + ", ".join(f"{k} {1000 * v / updates:.1f}" for k, v in parts.items()))
    print("s per audio s: " + ", ".join(f"{k} {v / audio_s:.3f}" for k, v in parts.items()))

    for seconds in (float(w) for w in args.windows.split(",")):
        references, heard = [], []
        for i, audio in audios:
            for end in (len(audio) // 2, len(audio)):  # (the half: a buffer still growing)
                window = min(10.0, max(seconds, np.ceil(end / 1600) / 10 + 1.0))  # (at least a second past it)
                encoded = whisper.model.model.encode(
                    ctranslate2.StorageView.from_array(encode(audio[:end], window)[None]), to_cpu=False)
                segments = whisper._decode(encoded, "", 1000 * end / 16000)
            heard.append(words_of(" ".join(whisper.tokenizer.decode(ids) for _, _, ids, _ in segments)))
            references.append(words_of(sources[i]))
        print(f"window {seconds:g} s: WER of the whole files {100 * token_error_rate(references, heard):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
