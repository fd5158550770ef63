"""The streaming recogniser's compute under step schedules, measured against each other in one run.

Each synthesised Multi30k test2017 line (as ``speech_voices.py`` speaks them) goes through the streaming
recogniser once per schedule, the schedules alternating line by line (so a machine that slows down or speeds up
midway slows them alike), the audio fed in ``--step-ms`` pieces as a live caller would. Printed per schedule: the
recogniser's compute per second of audio (its real-time factor), transcripts per second of audio, and the ratio to
the first schedule. The text model is not run: what a schedule changes is the recogniser's work (which words it
confirms, and when, is ``agreement_replay.py``'s). With ``--translate`` each schedule's confirmed words also go to
the text model (expost wait-3) as in a live session, and the RTF is the recogniser's and the text model's compute
together (as fast as they run: no waiting for the audio, so the lags are ``speech_voices.py``'s to measure).

    python benchmarks/recogniser_steps.py --lines 100 --asr-model base --step-ms 500 --later-step-ms 0,1000
    python benchmarks/recogniser_steps.py --lines 300 --later-step-ms 0,1000 --translate --head-vocabulary FILES
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_voices import CACHE, DATA, speak  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(DATA / "test2017.en"))
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--voices", default="flite:slt,flite:rms,flite:awb")
    parser.add_argument("--asr-model", default="base")
    parser.add_argument("--step-ms", type=int, default=500)
    parser.add_argument("--later-step-ms", default="0,1000", help="comma-separated: the schedules (0: step-ms only)")
    parser.add_argument("--fast-words", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--translate", action="store_true", help="the text model too (RTF of the whole cascade)")
    parser.add_argument("--head-vocabulary", default=None, metavar="FILES", help="with --translate: the text "
                        "model's LM head over these files' tokens")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from simulmt.speech.recognizer import RecognizerOptions, StreamingRecognizer, Whisper
    from simulmt.speech.wav import read_audio

    schedules = [int(v) for v in args.later_step_ms.split(",")]
    options = [RecognizerOptions(model=args.asr_model, step_ms=args.step_ms, threads=args.threads, pause_ms=0,
                                 later_step_ms=later, fast_words=args.fast_words) for later in schedules]
    whisper = Whisper(options[0])  # (the schedules share the model: only when it runs differs)
    cascades = []
    if args.translate:
        from simulmt.speech.cascade import CascadeTranslator
        from simulmt.translator import Translator

        translator = Translator.load(None, dtype="auto", head_vocabulary=args.head_vocabulary)
        cascades = [CascadeTranslator(translator, whisper, o) for o in options]
    warm = read_audio(str(_wav(args, _sources(args), args.first)))  # a first run, not counted (the first schedule
    run(cascades[0] if cascades else StreamingRecognizer(whisper, options[0]), options[0], warm, args)  # pays no start)
    sources = _sources(args)
    seconds, asr_seconds, transcripts, audio_ms = ([0.0] * len(schedules), [0.0] * len(schedules),
                                                   [0] * len(schedules), 0.0)
    for i in range(args.first, min(args.first + args.lines, len(sources))):
        audio = read_audio(str(_wav(args, sources, i)))
        audio_ms += 1000 * len(audio) / 16000
        order = range(len(schedules)) if i % 2 == 0 else reversed(range(len(schedules)))  # (neither always first)
        for s in order:
            if cascades:
                spent, recognizer = run(cascades[s], options[s], audio, args)
            else:
                recognizer = StreamingRecognizer(whisper, options[s])
                spent = run(recognizer, options[s], audio, args)[0]
            seconds[s] += spent
            asr_seconds[s] += recognizer.seconds
            transcripts[s] += recognizer.updates
        print(i, file=sys.stderr, flush=True)
    what = "the cascade (recogniser + text model, expost wait-3)" if cascades else "the recogniser"
    print(f"{args.lines} lines ({audio_ms / 1000:.0f} s of audio), whisper {args.asr_model}, step {args.step_ms} ms, "
          f"{args.threads} threads: {what}\n\n| later step ms (after {args.fast_words} words) | RTF | "
          f"recogniser RTF | updates / audio s | RTF / first |\n|---|---:|---:|---:|---:|")
    for s, later in enumerate(schedules):
        print(f"| {later or '-'} | {1000 * seconds[s] / audio_ms:.3f} | {1000 * asr_seconds[s] / audio_ms:.3f} | "
              f"{1000 * transcripts[s] / audio_ms:.2f} | {seconds[s] / seconds[0]:.3f} |")


def _sources(args) -> list[str]:
    return Path(args.source).read_text(encoding="utf-8").splitlines()


def _wav(args, sources: list[str], i: int) -> Path:
    voices = args.voices.split(",")
    voice = voices[i % len(voices)]  # as speech_voices.py assigns them
    path = CACHE / voice.replace(":", "-").replace("+", "_") / f"{Path(args.source).name}-{i}.wav"
    if not path.is_file():
        speak(voice, sources[i], path)
    return path


def run(what, options, audio, args):
    """A recording through a recogniser or a cascade's live session, in ``step_ms`` pieces: (compute seconds,
    the recogniser)."""
    step = 16 * args.step_ms
    started = time.perf_counter()
    if hasattr(what, "session"):
        session = what.session("expost", "wait-k", k=3)
        for start in range(0, len(audio), step):
            list(session.push_audio(audio[start:start + step]))
        list(session.finish())
        return time.perf_counter() - started, session.recognizer
    for start in range(0, len(audio), step):
        what.push(audio[start:start + step])
    what.finish()
    return what.seconds, what


if __name__ == "__main__":
    main()
