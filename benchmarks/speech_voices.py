"""Speech translation on voices no shipped model was trained on: the recogniser cascade against text.

Multi30k test2017 lines are spoken by voices kept out of every training run (espeak-ng accents and variants not in
``simulmt.finetune.speech.synth.DEFAULT_VOICES``, and flite's voices: another synthesiser), one voice per line in turn,
cached outside the work tree. Each file is translated as a live stream in real time (a ``CascadeTranslator``
session: Whisper tiny.en + LocalAgreement-2 feeding the text model; each piece of one recogniser step is pushed
once the audio clock has reached its end, as a microphone would deliver it); the same lines as text go through
the same translator, layout and policy. Printed:

* the recogniser's WER (words lower-cased, punctuation stripped) against the spoken text;
* BLEU of speech and of text (sacrebleu), and their ratio (issue 38 asks for at least 0.85);
* latency in ms side by side: speech StreamLAAL-style LAAL over ``delays_ms`` (the audio time each target word's
  last source word was confirmed), and text LAAL with its word delays put at the audio's word times
  (approximated: each word's end placed by its share of the characters over the speech between the first and last
  audible sample);
* the first translated word's lag behind the audio of its source word (p50 / p95; the issue's bound: 2 s p95): the
  wall time it appeared, on the audio clock (real-time feeding), minus the end of its last source word's audio.
  A word appears when the session yields it (after the engine's round that wrote it: what the service sends then),
  not when the call that yielded it returns (the call may go on to write more words; that stamp is printed too);
* the real-time factor, recogniser + LLM: compute seconds (the time spent in the session's calls) per audio
  second (the issue's bound: 0.5).

    .venv/bin/python benchmarks/speech_voices.py --lines 300 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "multi30k"
CACHE = Path(os.environ.get("SIMULMT_CACHE", Path.home() / ".cache" / "simulmt")) / "voices"
VOICES = ("espeak:en-gb-x-gbcwmd", "flite:slt", "espeak:en-us+Annie", "flite:rms", "espeak:en+Andy", "flite:awb")


def speak(voice: str, text: str, path: Path) -> None:
    """``voice`` ("espeak:NAME", "flite:NAME" or "festival:NAME", e.g. ``festival:kal_diphone``: Debian's
    ``festival`` with a ``festvox-*`` voice) says ``text`` into ``path`` (16 kHz mono 16-bit WAV)."""
    engine, name = voice.split(":", 1)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        if engine == "espeak":
            subprocess.run(["espeak-ng", "-v", name, "-s", "160", "-w", str(raw), text], check=True)
        elif engine == "flite":
            subprocess.run(["flite", "-voice", name, "-t", text, "-o", str(raw)], check=True)
        elif engine == "festival":
            subprocess.run(["text2wave", "-eval", f"(voice_{name})", "-o", str(raw)], input=text.encode(), check=True)
        else:
            raise SystemExit(f"unknown synthesiser {engine!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        # (-D -R: no random dither, the same file every run)
        subprocess.run(["sox", "-D", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(path)], check=True)


def words_of(text: str) -> list[str]:
    return [w for w in (re.sub(r"[^\w']", "", t).lower() for t in text.split()) if w]


_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
    "seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_TITLES = {"mr": "mister", "mrs": "missus", "dr": "doctor"}


def spoken_words(text: str) -> list[str]:
    """``words_of`` for a transcript in words against a recogniser that writes numbers and titles short: numbers
    below 100 spelled out, titles in full, hyphenated words split ("10" -> "ten", "Mr." -> "mister")."""
    out = []
    for word in words_of(text.replace("-", " ")):
        if word.isdigit() and int(word) < 100:
            n = int(word)
            out += [_UNITS[n]] if n < 20 else [_TENS[n // 10 - 2]] + ([_UNITS[n % 10]] if n % 10 else [])
        else:
            out.append(_TITLES.get(word, word))
    return out


def read_recordings(path: Path, limit: int) -> tuple[list[str], list[str | None], list[tuple[str, Path]]]:
    """A list of ``audio<TAB>transcript[<TAB>reference]`` -> transcripts, references (None where absent) and
    (voice, file) pairs; the voice is the file's folder name."""
    sources, references, files = [], [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()[:limit], 1):
        fields = line.split("\t")
        if len(fields) not in (2, 3) or not fields[1].strip():
            raise SystemExit(f"{path}:{number}: expected 'audio<TAB>transcript[<TAB>reference]'")
        audio = (path.parent / fields[0]).resolve()
        if not audio.is_file():
            raise SystemExit(f"{path}:{number}: no such recording: {audio}")
        sources.append(fields[1].strip())
        references.append(fields[2].strip() if len(fields) == 3 else None)
        files.append((audio.parent.name, audio))
    if not files:
        raise SystemExit(f"{path}: no recordings listed")
    if len({r is None for r in references}) > 1:
        raise SystemExit(f"{path}: give a reference on every line or on none (BLEU is against the references, or "
                         f"without them against the text translation)")
    return sources, references, files


def word_end_times(audio: np.ndarray, words: list[str]) -> list[float]:
    """Approximate end time (ms) of each word: its share of the characters over the audible span."""
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > 500)
    start, end = (loud[0], loud[-1]) if len(loud) else (0, len(audio))
    sizes = np.cumsum([len(w) + 1 for w in words])
    return [1000.0 * (start + (end - start) * s / sizes[-1]) / 16000 for s in sizes]



def add_written_words_options(parser: argparse.ArgumentParser) -> None:
    """How the recogniser's words reach the text model (written_words.py), as options of a speech benchmark."""
    parser.add_argument("--spell-numbers", action=argparse.BooleanOptionalAction, default=True,
                        help="small numbers in words, as the recogniser gives them by default (tables before "
                             "2026-11-30, session 45: without)")
    parser.add_argument("--capitalise-starts", action=argparse.BooleanOptionalAction, default=True,
                        help="a recording's first word (and the first after a pause) with a capital, as the recogniser "
                             "gives it by default (tables before 2026-11-30, session 46: as Whisper wrote it)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recordings", default=None,
                        help="recordings instead of synthesised lines: a list of 'audio<TAB>transcript[<TAB>reference]' "
                             "(paths from the list's folder; benchmarks/real_recordings.py writes one of real voices); "
                             "without references, BLEU is against the text translation of the transcripts; "
                             "WER then spells out numbers below 100 and titles on both sides (the synthesised "
                             "lines' WER does not: the tables of docs/speech-recogniser.md); --source, "
                             "--reference and --voices do not apply")
    parser.add_argument("--source", default=str(DATA / "test2017.en"))
    parser.add_argument("--reference", default=str(DATA / "test2017.de"))
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--model", default=None, help="the text model (default: simulmt's)")
    parser.add_argument("--asr-model", default="tiny.en")
    parser.add_argument("--step-ms", type=int, default=1000)
    parser.add_argument("--later-step-ms", type=int, default=0,
                        help="the recogniser's step once --fast-words words of a sentence are confirmed (0: off)")
    parser.add_argument("--fast-words", type=int, default=3)
    add_written_words_options(parser)
    parser.add_argument("--asr-beam", type=int, default=1, help="the recogniser's beam size (1: greedy)")
    parser.add_argument("--window-ms", type=int, default=10000,
                        help="decode a buffer up to this long in a window of this length (0: Whisper's 30 s)")
    parser.add_argument("--asr-policy", default="local-agreement", help="local-agreement or alignatt")
    parser.add_argument("--margin-ms", type=int, default=500, help="AlignAtt's margin before the audio's end")
    parser.add_argument("--window-padding", default="zeros",
                        help="the recogniser's window after the audio: zeros (faster-whisper's) or silence (Whisper's)")
    parser.add_argument("--min-window-ms", type=int, default=0,
                        help="decode a short buffer in a window a second past it, at least this long (0: window-ms)")
    parser.add_argument("--min-audio-ms", type=int, default=1000,
                        help="no transcript of a buffer shorter than this (but at a pause or the end; 0: off; the "
                        "recogniser's default)")
    parser.add_argument("--lookback", type=int, default=None,
                        help="LocalAgreement: the newest transcript may agree with any of the last 1 + N (default: "
                             "RecognizerOptions.agreement_lookback)")
    parser.add_argument("--cut-last", action="store_true",
                        help="LocalAgreement: an earlier transcript's last word is no evidence")
    parser.add_argument("--hold-ms", type=int, default=0,
                        help="LocalAgreement: a word ending this close to the audio's end waits (0: off)")
    parser.add_argument("--pause-ms", type=int, default=0, help="the recogniser's voice-activity pause (0: off)")
    parser.add_argument("--head-vocabulary", default=None, metavar="FILES",
                        help="the text model's LM head over these files' tokens (simulmt.core.head_vocabulary)")
    parser.add_argument("--layout", default="expost")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=None, help="write the per-line records (JSON lines) here")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from simulmt.metrics.latency import latency_scores
    from simulmt.metrics.quality import bleu
    from simulmt.speech.cascade import CascadeTranslator
    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions, agreement_label
    from simulmt.speech.wav import read_audio

    normal = words_of
    if args.recordings:
        sources, references, files = read_recordings(Path(args.recordings), args.lines)
        voices = list(dict.fromkeys(voice for voice, _ in files))
        normal = spoken_words  # people's transcripts spell numbers and titles out, Whisper writes "10", "Mr."
        print(f"{len(files)} recordings from {args.recordings}", file=sys.stderr, flush=True)
    else:
        sources = Path(args.source).read_text(encoding="utf-8").splitlines()[: args.lines]
        references = Path(args.reference).read_text(encoding="utf-8").splitlines()[: args.lines]
        voices = args.voices.split(",")
        files = []
        for i, line in enumerate(sources):
            voice = voices[i % len(voices)]
            path = CACHE / voice.replace(":", "-").replace("+", "_") / f"{Path(args.source).name}-{i}.wav"
            if not path.is_file():
                speak(voice, line, path)
            files.append((voice, path))
        print(f"{len(files)} lines spoken by {', '.join(voices)} (cached in {CACHE})", file=sys.stderr, flush=True)

    asr = RecognizerOptions(model=args.asr_model, step_ms=args.step_ms, threads=args.threads,
                            window_ms=args.window_ms, policy=args.asr_policy, margin_ms=args.margin_ms,
                            window_padding=args.window_padding,
                            hold_ms=args.hold_ms, min_audio_ms=args.min_audio_ms, min_window_ms=args.min_window_ms,
                            agreement_cut_last=args.cut_last, later_step_ms=args.later_step_ms,
                            fast_words=args.fast_words, spell_numbers=args.spell_numbers,
                            capitalise_starts=args.capitalise_starts,
                            **({} if args.lookback is None else {"agreement_lookback": args.lookback}),
                            pause_ms=args.pause_ms, beam_size=args.asr_beam)
    cascade = CascadeTranslator.load(args.model, asr=asr, dtype="auto", head_vocabulary=args.head_vocabulary)
    kwargs = dict(layout=args.layout, policy="wait-k", k=args.k)
    cascade.translate(read_audio(str(files[0][1])), **kwargs)  # warm-up (the recogniser and the LLM)
    records = []
    references_given = all(r is not None for r in references)
    step = int(16 * args.step_ms)
    for (voice, path), source, reference in zip(files, sources, references):
        audio = read_audio(str(path))
        ends = word_end_times(audio, source.split())
        session = cascade.session(**kwargs)
        written: list[tuple[int, float]] = []  # (delay, wall ms since the audio started) of each target word
        call_end: list[float] = []  # wall ms at the end of the call that yielded each word
        compute = 0.0
        t0 = time.perf_counter()
        pieces = [(start, audio[start:start + step]) for start in range(0, len(audio), step)]
        for i, (start, piece) in enumerate(pieces):
            ready = t0 + (start + len(piece)) / 16000  # the piece has been spoken
            if time.perf_counter() < ready:
                time.sleep(ready - time.perf_counter())
            began = time.perf_counter()
            before = len(written)
            for w in session.push_audio(piece):  # each word when it is yielded (as the service sends it: after
                written.append((w.delay, 1000 * (time.perf_counter() - t0)))  # the engine round that wrote it)
            if i == len(pieces) - 1:
                for w in session.finish():
                    written.append((w.delay, 1000 * (time.perf_counter() - t0)))
            now = time.perf_counter()
            compute += now - began
            call_end += [1000 * (now - t0)] * (len(written) - before)  # (the same words, stamped at the call's end)
        result = session.result()
        text = cascade.translator.translate(source, **kwargs)
        if reference is None:  # no translation of the recording: how much of the text's translation survives
            reference = text.prediction
        first_lag = first_heard = first_call = None
        if written and written[0][0]:
            first_lag = written[0][1] - ends[min(written[0][0], len(ends)) - 1]
            first_call = call_end[0] - ends[min(written[0][0], len(ends)) - 1]
        if result.delays and result.delays[0]:  # the same without the compute: when its source word was confirmed
            first_heard = result.delays_ms[0] - ends[min(result.delays[0], len(ends)) - 1]
        records.append({"voice": voice, "file": str(path), "source": source, "heard": result.heard,
                        "speech": result.prediction, "text": text.prediction, "reference": reference,
                        "delays_ms": result.delays_ms, "elapsed_ms": result.elapsed,
                        "shown_ms": [t for _, t in written],
                        "text_delays_ms": [ends[min(d, len(ends)) - 1] if d else 0.0 for d in text.delays],
                        "audio_ms": result.duration_ms, "compute_ms": 1000 * compute, "asr_ms": result.encoder_ms,
                        "first_lag_ms": first_lag, "first_heard_lag_ms": first_heard, "first_call_lag_ms": first_call,
                        "error": result.error})
        print(json.dumps({k: records[-1][k] for k in ("voice", "heard", "speech", "first_lag_ms")},
                         ensure_ascii=False), file=sys.stderr, flush=True)
    if args.output:
        Path(args.output).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    def laal(delays_key: str, predictions_key: str) -> float:
        instances = [{"delays": r[delays_key], "source_length": r["audio_ms"], "reference": r["reference"],
                      "prediction": r[predictions_key]} for r in records if r[predictions_key]]
        return latency_scores(instances, ["LAAL"], ms_per_source_unit=1.0)["LAAL"]

    wer = token_error_rate([normal(r["source"]) for r in records], [normal(r["heard"]) for r in records])
    speech_bleu, _ = bleu([r["speech"] for r in records], [r["reference"] for r in records])
    text_bleu, _ = bleu([r["text"] for r in records], [r["reference"] for r in records])
    lags = sorted(r["first_lag_ms"] for r in records if r["first_lag_ms"] is not None)
    heard_lags = sorted(r["first_heard_lag_ms"] for r in records if r["first_heard_lag_ms"] is not None)
    rtf = sum(r["compute_ms"] for r in records) / sum(r["audio_ms"] for r in records)
    asr_rtf = sum(r["asr_ms"] for r in records) / sum(r["audio_ms"] for r in records)
    per_voice = {v: token_error_rate([normal(r["source"]) for r in records if r["voice"] == v],
                                     [normal(r["heard"]) for r in records if r["voice"] == v]) for v in voices}
    head = f", head vocabulary {args.head_vocabulary}" if args.head_vocabulary else ""
    later = f" ({args.later_step_ms} ms after {args.fast_words} words of a sentence)" if args.later_step_ms else ""
    later += "" if args.spell_numbers else ", numbers as written"
    later += "" if args.capitalise_starts else ", sentence starts as written"
    later += ", silence after the audio in the window" if args.window_padding == "silence" else ""
    print(f"\n{len(records)} lines; {cascade.name}, {cascade.dtype}{head}, {args.layout} wait-{args.k}, recogniser step "
          f"{args.step_ms} ms{later}, {agreement_label(asr)} (hold {args.hold_ms} ms, min audio "
          f"{args.min_audio_ms} ms), window {args.window_ms} ms (min {args.min_window_ms}), pause {args.pause_ms} ms, "
          f"{args.threads} threads\n")
    print("| | WER % | BLEU | LAAL ms | LAAL, shown ms | first word lag p50 / p95 ms | RTF (recogniser alone) |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    print(f"| speech | {100 * wer:.1f} | {speech_bleu:.2f} | {laal('delays_ms', 'speech'):.0f} | "
          f"{laal('shown_ms', 'speech'):.0f} | {np.percentile(lags, 50):.0f} / {np.percentile(lags, 95):.0f} | "
          f"{rtf:.3f} ({asr_rtf:.3f}) |")
    print(f"| text (delays at the audio's word times) | - | {text_bleu:.2f} | {laal('text_delays_ms', 'text'):.0f} "
          f"| | | |")
    print("\nLAAL, shown: over the wall times the words appeared at in the real-time run (computation included)")
    if references_given:
        print(f"\nspeech / text BLEU: {speech_bleu / text_bleu:.3f}")
    else:
        print("\nno references: BLEU of speech is against the text translation of the transcripts (text: 100)")
    call_lags = sorted(r["first_call_lag_ms"] for r in records if r["first_call_lag_ms"] is not None)
    print(f"first word lag stamped at the end of the call that yielded it (how it was measured before 2026-11-29, "
          f"session 43) p50 / p95: {np.percentile(call_lags, 50):.0f} / {np.percentile(call_lags, 95):.0f} ms")
    print(f"first word lag on the audio clock (its source word's confirmation, no compute) p50 / p95: "
          f"{np.percentile(heard_lags, 50):.0f} / {np.percentile(heard_lags, 95):.0f} ms")
    print("WER per voice: " + ", ".join(f"{v} {100 * w:.1f}" for v, w in per_voice.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
