"""LocalAgreement's options replayed on recorded transcripts: which words each rule confirms, and when.

A streaming recogniser transcribes its buffer again at every step, and while a file's buffer is never cut (one
sentence per file, shorter than ``trim_ms``, no pause in it) those transcripts do not depend on which words the
agreement has confirmed. So every update's transcript is recorded once (``record``: the recogniser on synthesised
Multi30k test2017 lines, as ``speech_voices.py`` speaks them) and any rule is replayed on them exactly
(``replay``): the words it confirms and the audio time each is confirmed at. Printed per rule: the WER of the
confirmed words, the lag of each line's k-th word (the one a wait-k translation writes its first word after) on
the audio clock, p50 / p95, the mean lag of every word, and the BLEU of translating the confirmed words as typed
text with the shipped model (a streamed speech translation scores what its transcript scores typed, to 0.01 BLEU:
docs/speech-recogniser.md), beside the text's BLEU; and the same for the last transcript of each whole file (a
reference: the recogniser's own errors, without streaming). The replay reproduces ``speech_voices.py``'s WER, BLEU and audio-clock lag of the
same configuration to the digit; compute and wall-clock lags need the real-time run.

    python benchmarks/agreement_replay.py record --lines 300 --asr-model base --step-ms 500 --output runs/t.jsonl
    python benchmarks/agreement_replay.py replay runs/t.jsonl [--step-ms 1000] [--head-vocabulary FILES]

(``replay`` reads a gzipped file too: docs/speech-recogniser/runs/replay-base-500-flite300.jsonl.gz is one.)
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_voices import CACHE, DATA, add_written_words_options, speak, word_end_times, words_of  # noqa: E402

RULES = [{"lookback": 0}, {"lookback": 1}, {"lookback": 0, "cut_last": True}, {"lookback": 1, "cut_last": True}]


def record(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from simulmt.speech.recognizer import RecognizerOptions, Whisper
    from simulmt.speech.wav import read_audio

    options = RecognizerOptions(model=args.asr_model, step_ms=args.step_ms, threads=args.threads, min_audio_ms=0,
                                window_ms=args.window_ms, min_window_ms=args.min_window_ms, pause_ms=args.pause_ms,
                                window_padding=args.window_padding, beam_size=args.asr_beam)
    whisper = Whisper(options)
    whisper.want_probabilities = True  # (each word's probability recorded: --min-word-probability replays it)
    sources = Path(args.source).read_text(encoding="utf-8").splitlines()
    voices = args.voices.split(",")
    inexact = 0
    with open(args.output, "w", encoding="utf-8") as out:
        for i in range(args.first, min(args.first + args.lines, len(sources))):
            voice = voices[i % len(voices)]  # as speech_voices.py assigns them
            path = CACHE / voice.replace(":", "-").replace("+", "_") / f"{Path(args.source).name}-{i}.wav"
            if not path.is_file():
                speak(voice, sources[i], path)
            audio = read_audio(str(path))
            updates, cut = recorded_updates(whisper, options, audio)
            inexact += cut
            out.write(json.dumps({"i": i, "source": sources[i], "voice": voice, "file": str(path),
                                  "audio_ms": 1000 * len(audio) / 16000, "cut": cut,
                                  "ends": word_end_times(audio, sources[i].split()), "updates": updates},
                                 ensure_ascii=False) + "\n")
            print(i, file=sys.stderr, flush=True)
    if inexact:
        print(f"{inexact} files had their buffer cut (a pause, or longer than trim_ms): their replay is not exact",
              file=sys.stderr)


def recorded_updates(whisper, options, audio: np.ndarray) -> tuple[list[dict], bool]:
    """One file through a streaming recogniser in ``step_ms`` pieces: every update's transcript (``t``: the audio
    received, ``audio_ms``: the audio transcribed, ``words``: (text, start, end) on the audio's clock), and whether
    its buffer was cut (a pause, or longer than ``trim_ms``: then a replay is not exact)."""
    from simulmt.speech.recognizer import StreamingRecognizer

    recognizer = StreamingRecognizer(whisper, options)
    updates = []
    transcribe = whisper.transcribe

    def recorded(samples, prompt=""):
        words = transcribe(samples, prompt)
        updates.append({"t": recognizer.received_ms, "audio_ms": 1000 * len(samples) / 16000,
                        "words": [(w.text, w.start_ms + recognizer.offset_ms, w.end_ms + recognizer.offset_ms,
                                   round(w.probability, 4)) for w in words]})
        return words

    whisper.transcribe = recorded
    try:
        step = 16 * options.step_ms
        cut = False
        for start in range(0, len(audio), step):
            recognizer.push(audio[start:start + step])
            cut |= bool(recognizer.pauses)  # (silence dropped before the speech changes nothing)
        recognizer.finish()
    finally:
        whisper.transcribe = transcribe
    return updates, cut or 1000 * len(audio) / 16000 > options.trim_ms


def confirm(line: dict, rule: dict, step_ms: int, min_audio_ms: int, later_step_ms: int = 0,
            fast_words: int = 3, decoded: list | None = None) -> list[tuple[str, float]]:
    """(word, audio ms when confirmed) as the rule confirms them, updates every ``step_ms`` (transcripts every
    ``later_step_ms`` once ``fast_words`` words of a sentence are confirmed, until a transcript begins the next
    sentence: as ``StreamingRecognizer`` decides). The words are Whisper's (before ``written_words``). ``decoded``
    gets the word count of each transcript the recogniser would have made (its compute: an encoder pass each, and
    a decoder step per token)."""
    from simulmt.speech.local_agreement import LocalAgreement, TimedWord
    from simulmt.speech.recognizer import sentence_progress

    agreement = LocalAgreement(2, **rule)
    confirmed, decoded_ms, in_sentence, next_sentence = [], 0.0, 0, False
    for index, update in enumerate(line["updates"]):
        last = index == len(line["updates"]) - 1  # the update of finish(): always
        if not last:
            if round(update["t"]) % step_ms:
                continue  # (not a step of this schedule)
            later = later_step_ms and in_sentence >= fast_words and not next_sentence
            if later and round(update["t"] - decoded_ms) < later_step_ms:
                continue
            decoded_ms = update["t"]
            if update["audio_ms"] < min_audio_ms:
                continue
        if decoded is not None:
            decoded.append(len(update["words"]))
        hypothesis = [TimedWord(*word[:3], probability=word[3] if len(word) > 3 else 1.0) for word in update["words"]]
        newly = agreement.update(hypothesis, update["t"])
        confirmed += [(w.text, update["t"]) for w in newly]
        in_sentence, next_sentence = sentence_progress(in_sentence, newly, agreement.history[-1] if
                                                       agreement.history else [], ended=last)
    return confirmed + [(w.text, line["audio_ms"]) for w in agreement.flush()]


def replay(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from simulmt.metrics.quality import bleu
    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions
    from simulmt.translator import Translator

    opened = gzip.open(args.transcripts, "rt", encoding="utf-8") if args.transcripts.endswith(".gz") else \
        open(args.transcripts, encoding="utf-8")
    with opened as rows:
        lines = [json.loads(row) for row in rows]
    references = Path(args.reference).read_text(encoding="utf-8").splitlines()
    references = [references[line["i"]] for line in lines]
    translator = Translator.load(args.model, dtype=args.dtype, head_vocabulary=args.head_vocabulary)
    min_audio_ms = RecognizerOptions().min_audio_ms if args.min_audio_ms is None else args.min_audio_ms

    def translated(texts: list[str]) -> float:
        out = translator.translate_many(texts, "expost", "wait-k", k=args.k, batch_size=args.batch_size)
        return bleu([t.prediction for t in out], references)[0]

    def typed(heard: list[str]) -> str:  # what the text model reads: as the recogniser gives it
        from simulmt.speech.written_words import written_words

        return " ".join(written_words(heard, spell_numbers=args.spell_numbers,
                                      capitalise_starts=args.capitalise_starts)[0])

    text = translated([line["source"] for line in lines])
    sources = [words_of(line["source"]) for line in lines]
    later = f", then {args.later_step_ms} ms after {args.fast_words} words" if args.later_step_ms else ""
    print(f"{len(lines)} lines ({sum(line['cut'] for line in lines)} with a cut buffer: not exact), step "
          f"{args.step_ms} ms{later}, min audio {min_audio_ms} ms; text BLEU {text:.2f}\n")
    audio_s = sum(line["audio_ms"] for line in lines) / 1000
    print(f"| rule | WER % | BLEU | speech / text | word {args.k}'s lag p50 / p95 ms | mean lag of a word ms | "
          "transcripts / audio s | words decoded / audio s |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    rules = [RULES[1]] if args.default_rule else RULES
    rules = rules + [{**RULES[1], "min_probability": p} for p in args.min_word_probability]
    for rule in rules:
        decoded: list[int] = []
        confirmed = [confirm(line, rule, args.step_ms, min_audio_ms, args.later_step_ms, args.fast_words, decoded)
                     for line in lines]
        wer = token_error_rate(sources, [words_of(typed([w for w, _ in c])) for c in confirmed])
        lags = [c[args.k - 1][1] - line["ends"][min(args.k, len(line["ends"])) - 1]
                for line, c in zip(lines, confirmed) if len(c) >= args.k]
        every = [t - line["ends"][min(i, len(line["ends"]) - 1)] for line, c in zip(lines, confirmed)
                 for i, (_, t) in enumerate(c)]
        score = translated([typed([w for w, _ in c]) for c in confirmed])
        name = ", ".join(f"{k} {v}" for k, v in rule.items())
        print(f"| {name} | {100 * wer:.1f} | {score:.2f} | {score / text:.3f} | {np.percentile(lags, 50):.0f} / "
              f"{np.percentile(lags, 95):.0f} | {np.mean(every):.0f} | {len(decoded) / audio_s:.2f} | "
              f"{sum(decoded) / audio_s:.2f} |", flush=True)
    whole = [" ".join(w[0] for w in line["updates"][-1]["words"]) if line["updates"] else "" for line in lines]
    wer = token_error_rate(sources, [words_of(typed(t.split())) for t in whole])
    score = translated([typed(t.split()) for t in whole])
    print(f"| the whole file's last transcript | {100 * wer:.1f} | {score:.2f} | {score / text:.3f} | - | - | - | - |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="every update's transcript of each synthesised line")
    rec.add_argument("--source", default=str(DATA / "test2017.en"))
    rec.add_argument("--first", type=int, default=0)
    rec.add_argument("--lines", type=int, default=300)
    rec.add_argument("--voices", default="flite:slt,flite:rms,flite:awb")
    rec.add_argument("--asr-model", default="base")
    rec.add_argument("--step-ms", type=int, default=500)
    rec.add_argument("--window-ms", type=int, default=10000)
    rec.add_argument("--min-window-ms", type=int, default=0)
    rec.add_argument("--window-padding", default="zeros", help="the window after the audio: zeros or silence")
    rec.add_argument("--pause-ms", type=int, default=0, help="as speech_voices.py (0: no voice activity)")
    rec.add_argument("--asr-beam", type=int, default=1, help="the recogniser's beam (1: greedy, the default)")
    rec.add_argument("--threads", type=int, default=2)
    rec.add_argument("--output", required=True)
    rep = sub.add_parser("replay", help="each agreement rule on the recorded transcripts")
    rep.add_argument("transcripts")
    rep.add_argument("--reference", default=str(DATA / "test2017.de"))
    rep.add_argument("--step-ms", type=int, default=500, help="a multiple of the recorded step")
    rep.add_argument("--min-audio-ms", type=int, default=None, help="default: RecognizerOptions.min_audio_ms")
    rep.add_argument("--later-step-ms", type=int, default=0,
                     help="a longer step once --fast-words words are confirmed (0: every step --step-ms)")
    rep.add_argument("--fast-words", type=int, default=3)
    rep.add_argument("--default-rule", action="store_true", help="only the default rule (lookback 1)")
    rep.add_argument("--min-word-probability", type=float, nargs="*", default=[],
                     help="also the default rule with each of these min_word_probability (recorded since session 50)")
    add_written_words_options(rep)
    rep.add_argument("--model", default=None)
    rep.add_argument("--dtype", default="float16-packed")
    rep.add_argument("--head-vocabulary", default=None)
    rep.add_argument("--k", type=int, default=3)
    rep.add_argument("--batch-size", type=int, default=16)
    rep.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    record(args) if args.command == "record" else replay(args)


if __name__ == "__main__":
    main()
