"""The recogniser alone on whole utterances: WER per compute type and beam size, on the unseen voices of
``speech_voices.py`` (the same cached files: run that first to synthesise them).

Each file is transcribed at once (``Whisper.transcribe``: the 10 s window for a short file), no streaming policy:
what the decoder hears at best, and what each setting costs. Prints WER (all voices, then per voice) and seconds.

    .venv/bin/python benchmarks/asr_whole.py --lines 60 --asr-model tiny.en --compute-types int8,float32 --beams 1,5
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from speech_voices import CACHE, DATA, VOICES, words_of


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=str(DATA / "test2017.en"))
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--asr-model", default="tiny.en")
    parser.add_argument("--compute-types", default="int8")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions, Whisper, as_float_audio
    from simulmt.speech.wav import read_audio

    sources = Path(args.source).read_text(encoding="utf-8").splitlines()[: args.lines]
    files = [(VOICES[i % len(VOICES)], CACHE / VOICES[i % len(VOICES)].replace(":", "-").replace("+", "_")
              / f"{Path(args.source).name}-{i}.wav") for i in range(len(sources))]
    missing = [str(p) for _, p in files if not p.is_file()]
    if missing:
        raise SystemExit(f"{len(missing)} files are not synthesised yet (run speech_voices.py first): {missing[0]}")
    audio = [as_float_audio(read_audio(str(p))) for _, p in files]
    for compute_type in args.compute_types.split(","):
        for beam in (int(b) for b in args.beams.split(",")):
            whisper = Whisper(RecognizerOptions(model=args.asr_model, compute_type=compute_type, beam_size=beam,
                                                threads=args.threads))
            start = time.perf_counter()
            heard = [words_of(" ".join(w.text for w in whisper.transcribe(a))) for a in audio]
            seconds = time.perf_counter() - start
            spoken = [words_of(s) for s in sources]
            per_voice = {v: token_error_rate([s for (u, _), s in zip(files, spoken) if u == v],
                                             [h for (u, _), h in zip(files, heard) if u == v]) for v in VOICES}
            print(f"{args.asr_model} {compute_type} beam {beam}: WER {100 * token_error_rate(spoken, heard):.1f}% "
                  f"in {seconds:.1f} s; " + ", ".join(f"{v} {100 * w:.1f}" for v, w in per_voice.items()),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
