"""The streaming recogniser against Whisper's offline transcript of the same recordings (no transcripts needed).

For recordings without transcripts (benchmarks/real_recordings.py's conversations), the offline transcript of the
same Whisper model is the bar streaming can reach: faster-whisper's decoding of the whole file in 30 s windows,
with Whisper's temperature fallback (its sampling seeded). Each file goes through a ``StreamingRecognizer`` (the defaults of
``translate --audio``: LocalAgreement-2, 1 s steps, 700 ms pauses) in 1 s pieces; printed: the WER of the streamed
words against the offline transcript (numbers and titles spelled out on both sides), and the word counts.

``--vad-level-db L``: an experiment, not the recogniser's behaviour: the voice activity model hears the audio made
louder (each 32 ms window scaled so that the last second's level reaches L dBFS, by at most ``--vad-max-gain-db``,
never clipped, never quieter); Whisper hears it as it is. Silero misses quiet, distant speech that Whisper hears.

    python benchmarks/asr_streaming_vs_offline.py ~/.cache/simulmt/real/pyannote/*.wav --threads 2 [--vad-level-db -25]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


class LouderVoice:
    """A voice activity model (``Silero``'s interface) that hears each window made louder; the gain follows the
    level of the last second of windows (31), so it does not depend on how the audio is cut into pieces."""

    def __init__(self, inner, level_db: float, max_gain_db: float):
        self.inner, self.level, self.max_gain = inner, 10 ** (level_db / 20), 10 ** (max_gain_db / 20)

    def start(self):
        return self.inner.start(), ()

    def __call__(self, windows: np.ndarray, state):
        inner, energies = state
        louder = np.empty_like(windows)
        for i, window in enumerate(windows):
            energies = (*energies[-30:], float(np.mean(np.square(window, dtype=np.float64))))
            gain = min(self.level / max(float(np.sqrt(np.mean(energies))), 1e-9), self.max_gain)
            louder[i] = window * max(1.0, min(gain, 1.0 / max(float(np.abs(window).max()), 1e-9)))
        probabilities, inner = self.inner(louder, inner)
        return probabilities, (inner, energies)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recordings", nargs="+")
    parser.add_argument("--asr-model", default="tiny.en")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vad-level-db", type=float, default=None, help="the VAD hears the audio made louder (above)")
    parser.add_argument("--vad-max-gain-db", type=float, default=30.0)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import ctranslate2
    from speech_voices import spoken_words

    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions, StreamingRecognizer, Whisper, as_float_audio
    from simulmt.speech.wav import read_audio

    options = RecognizerOptions(model=args.asr_model, threads=args.threads)
    whisper = Whisper(options)
    if args.vad_level_db is not None:
        whisper._voice = LouderVoice(whisper.voice_model, args.vad_level_db, args.vad_max_gain_db)
    offline, streamed, spent = [], [], 0.0
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
        spent += recognizer.seconds
        streamed.append(" ".join(w.text for w in words))
        print(f"{Path(path).name}\n  offline:  {offline[-1]}\n  streamed: {streamed[-1]}", file=sys.stderr, flush=True)
    wer = token_error_rate([spoken_words(t) for t in offline], [spoken_words(t) for t in streamed])
    louder = "" if args.vad_level_db is None else f" (VAD hears {args.vad_level_db:g} dBFS, gain <= {args.vad_max_gain_db:g} dB)"
    print(f"{len(args.recordings)} recordings, {options.model}{louder}: streamed words against the offline transcript, WER "
          f"{100 * wer:.1f}%; {sum(len(t.split()) for t in streamed)} words streamed, "
          f"{sum(len(t.split()) for t in offline)} offline; streaming compute {spent:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
