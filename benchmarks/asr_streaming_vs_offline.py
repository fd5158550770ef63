"""The streaming recogniser against Whisper's offline transcript of the same recordings (no transcripts needed).

For recordings without transcripts (benchmarks/real_recordings.py's conversations), the offline transcript of the
same Whisper model is the bar streaming can reach: faster-whisper's decoding of the whole file in 30 s windows,
with Whisper's temperature fallback (its sampling seeded). Each file goes through a ``StreamingRecognizer`` (the defaults of
``translate --audio``: LocalAgreement-2, 1 s steps, 700 ms pauses) in 1 s pieces; printed: the WER of the streamed
words against the offline transcript (numbers and titles spelled out on both sides), and the word counts.

    python benchmarks/asr_streaming_vs_offline.py ~/.cache/simulmt/real/pyannote/*.wav --threads 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recordings", nargs="+")
    parser.add_argument("--asr-model", default="tiny.en")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import ctranslate2
    from speech_voices import spoken_words

    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions, StreamingRecognizer, Whisper, as_float_audio
    from simulmt.speech.wav import read_audio

    options = RecognizerOptions(model=args.asr_model, threads=args.threads)
    whisper = Whisper(options)
    offline, streamed = [], []
    for path in args.recordings:
        audio = read_audio(path)
        ctranslate2.set_random_seed(0)  # (the temperature fallback samples: the same offline transcript every run)
        segments, _ = whisper.model.transcribe(as_float_audio(audio), language=options.language, beam_size=1)
        offline.append(" ".join(s.text.strip() for s in segments))
        recognizer = StreamingRecognizer(whisper, options)
        words = []
        for start in range(0, len(audio), 16000):
            words += recognizer.push(audio[start:start + 16000])
        words += recognizer.finish()
        streamed.append(" ".join(w.text for w in words))
        print(f"{Path(path).name}\n  offline:  {offline[-1]}\n  streamed: {streamed[-1]}", file=sys.stderr, flush=True)
    wer = token_error_rate([spoken_words(t) for t in offline], [spoken_words(t) for t in streamed])
    print(f"{len(args.recordings)} recordings, {options.model}: streamed words against the offline transcript, WER "
          f"{100 * wer:.1f}%; {sum(len(t.split()) for t in streamed)} words streamed, "
          f"{sum(len(t.split()) for t in offline)} offline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
