"""Speech as a talk: several sentences in one recording, with pauses between them, fed in real time.

A per-sentence file ends with its audio, so the recogniser's ``finish`` makes its last words final and the talk ends
the sentence. In a talk nothing ends: the sentence's last words wait for agreement, and the talk knows the sentence
is over only when the next word comes (a full stop may be an abbreviation's). This benchmark measures that wait and
what the recogniser's voice activity (``RecognizerOptions.pause_ms``: a pause makes its words final and ends the
sentence) does to it.

Talks: ``--sentences`` consecutive Multi30k test2017 lines spoken by one voice (the cached files of
benchmarks/speech_voices.py, made if missing), joined with ``--gap-ms`` of silence. Each talk is one live cascade
session per setting of ``--pause-ms``, fed in real time in pieces of one recogniser step. Printed per setting:

* WER of what was heard, BLEU of the talk's output (all of a talk's sentences as one line) against the references;
* the lag of every target word (the time it was shown, on the audio clock, minus the end of its last source
  word's audio): p50 / p95; and the same for the last target word of each sentence (``tail``); these count the
  compute, so they depend on what else runs on the machine. ``tail lag, audio clock``: the same tail, without the
  compute (the audio time its last source word was confirmed: what the recogniser alone makes it wait);
* Whisper decodes per audio second and the real-time factor (compute seconds per audio second, recogniser + LLM).

    .venv/bin/python benchmarks/speech_talk.py --talks 6 --sentences 8 --gap-ms 1000 --pause-ms 0,700 \
        --trim-ms 12000,8000 --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_voices import CACHE, DATA, speak, word_end_times, words_of  # noqa: E402

TALK_VOICES = ("flite:slt", "flite:rms", "flite:awb")  # voices tiny.en hears (speech_voices.py: 14-19% WER)
VOICE_INDEX = {"flite:slt": 1, "flite:rms": 3, "flite:awb": 5}  # speech_voices.py speaks line i with voice i % 6


def talks(lines: list[str], count: int, sentences: int, gap_ms: int):
    """(voice, audio, source lines, each line's word end times on the talk's clock, line ranges) per talk."""
    out = []
    for t in range(count):
        voice = TALK_VOICES[t % len(TALK_VOICES)]
        base = VOICE_INDEX[voice] + 6 * sentences * (t // len(TALK_VOICES))
        picked = [base + 6 * j for j in range(sentences)]
        from simulmt.speech.wav import read_audio

        pieces, ends, sources, offset = [], [], [], 0
        for i in picked:
            path = CACHE / voice.replace(":", "-") / f"test2017.en-{i}.wav"
            if not path.is_file():
                speak(voice, lines[i], path)
            audio = read_audio(str(path))
            ends += [offset + e for e in word_end_times(audio, lines[i].split())]
            pieces += [audio, np.zeros(int(16 * gap_ms), dtype=audio.dtype)]
            offset += 1000.0 * (len(audio) + int(16 * gap_ms)) / 16000
            sources.append(i)
        out.append((voice, np.concatenate(pieces), sources, ends))
    return out


def run_talk(cascade, audio, kwargs, step_ms: int):
    """One live session in real time -> (result, [(delay, shown ms)] per target word, compute seconds)."""
    session = cascade.session(**kwargs)
    step = int(16 * step_ms)
    written, compute = [], 0.0
    t0 = time.perf_counter()
    pieces = [(start, audio[start:start + step]) for start in range(0, len(audio), step)]
    for i, (start, piece) in enumerate(pieces):
        ready = t0 + (start + len(piece)) / 16000
        if time.perf_counter() < ready:
            time.sleep(ready - time.perf_counter())
        began = time.perf_counter()
        words = list(session.push_audio(piece))
        if i == len(pieces) - 1:
            words += list(session.finish())
        now = time.perf_counter()
        compute += now - began
        written += [(w.delay, 1000 * (now - t0)) for w in words]
    return session.result(), written, compute, session.recognizer.updates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--talks", type=int, default=6)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--gap-ms", type=int, default=800, help="silence between two sentences")
    parser.add_argument("--pause-ms", default="0,700", help="settings of RecognizerOptions.pause_ms to compare")
    parser.add_argument("--trim-ms", default="12000", help="settings of RecognizerOptions.trim_ms to compare (each "
                        "with each pause_ms)")
    parser.add_argument("--asr-policy", default="local-agreement")
    parser.add_argument("--step-ms", type=int, default=1000)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from simulmt.metrics.quality import bleu
    from simulmt.speech.cascade import CascadeTranslator
    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions

    lines = (DATA / "test2017.en").read_text(encoding="utf-8").splitlines()
    refs = (DATA / "test2017.de").read_text(encoding="utf-8").splitlines()
    made = talks(lines, args.talks, args.sentences, args.gap_ms)
    audio_s = sum(len(a) for _, a, _, _ in made) / 16000
    print(f"{len(made)} talks of {args.sentences} sentences, {audio_s:.0f} s of audio, gaps {args.gap_ms} ms",
          flush=True)
    kwargs = dict(layout="expost", policy="wait-k", k=args.k)
    cascade = None
    rows = []
    settings = [(int(p), int(t)) for t in args.trim_ms.split(",") for p in args.pause_ms.split(",")]
    for pause_ms, trim_ms in settings:
        asr = RecognizerOptions(step_ms=args.step_ms, threads=args.threads, pause_ms=pause_ms, trim_ms=trim_ms,
                                policy=args.asr_policy)
        if cascade is None:
            cascade = CascadeTranslator.load(None, asr=asr, dtype="auto")
            cascade.translate(made[0][1][: 16000 * 4], **kwargs)  # warm-up
        cascade.options = asr
        hyps, heard, spoken, lags, tails, heard_tails, compute, updates = [], [], [], [], [], [], 0.0, 0
        for voice, audio, sources, ends in made:
            result, written, spent, n = run_talk(cascade, audio, kwargs, args.step_ms)
            compute += spent
            updates += n
            hyps.append(result.prediction)
            heard.append(words_of(result.heard))
            spoken.append([w for i in sources for w in words_of(lines[i])])
            lag = [(d, shown - ends[min(d, len(ends)) - 1]) for d, shown in written if d]
            lags += [x for _, x in lag]
            heard_lag = [(d, ms - ends[min(d, len(ends)) - 1]) for d, ms in zip(result.delays, result.delays_ms) if d]
            bounds = np.cumsum([len(lines[i].split()) for i in sources])  # each sentence's last word, 1-based
            for b in bounds:  # a sentence's last target word: the last one shown before a word that read past it
                mine = [x for d, x in lag if d <= b]
                if mine:
                    tails.append(mine[-1])
                mine = [x for d, x in heard_lag if d <= b]
                if mine:
                    heard_tails.append(mine[-1])
        wer = token_error_rate(spoken, heard)  # (corpus: edits over the spoken words)
        score = bleu(hyps, [" ".join(refs[i] for i in sources) for _, _, sources, _ in made])[0]
        rows.append((f"{pause_ms} | {trim_ms}", 100 * wer, score, *np.percentile(lags, [50, 95]), *np.percentile(tails, [50, 95]),
                     *np.percentile(heard_tails, [50, 95]), updates / audio_s, compute / audio_s))
        print(f"pause_ms {pause_ms}, trim_ms {trim_ms}: done", flush=True)
    print(f"recogniser {args.asr_policy}, step {args.step_ms} ms, wait-{args.k}, {args.threads} thread(s)")
    print("| pause_ms | trim_ms | WER % | BLEU | lag p50 / p95 ms | sentence tail lag p50 / p95 ms | tail lag, audio clock "
          "p50 / p95 ms | decodes per audio s | RTF |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p, w, b, l50, l95, t50, t95, h50, h95, u, rtf in rows:
        print(f"| {p} | {w:.1f} | {b:.2f} | {l50:,.0f} / {l95:,.0f} | {t50:,.0f} / {t95:,.0f} | {h50:,.0f} / {h95:,.0f} "
              f"| {u:.2f} | {rtf:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
