"""Where the speech translation loses its BLEU: the recogniser's errors, streaming them, or translating them live.

Reads the per-line records of a ``speech_voices.py --output FILE`` run (source, the streamed transcript ``heard``,
the speech and text translations, the reference, the audio file) and translates, with the same text model, layout
and policy as the run:

* the offline transcript: each file transcribed whole by the same Whisper (the 10 s window), one sentence as text;
* the streamed transcript (``heard``), one sentence as text;
* the streamed transcript as a talk (``Translator.translate_talks``: cut into sentences at its punctuation, as the
  speech session cuts what it hears);

so that, with the text and speech translations of the run itself, the BLEU lost between the text and the speech
translation splits into: what the recogniser mishears at best (offline), what streaming adds to that (LocalAgreement
over a growing buffer), what cutting the transcript at its own punctuation does, and what translating it while it
arrives does (the rest). Per synthesiser too, or per voice (``--by-voice``): sacrebleu over its lines.

    .venv/bin/python benchmarks/speech_voices.py --lines 120 --threads 2 --output runs/sv120.jsonl
    .venv/bin/python benchmarks/speech_bleu_split.py runs/sv120.jsonl --threads 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", help="a speech_voices.py --output file (JSON lines)")
    parser.add_argument("--model", default=None, help="the text model (default: simulmt's, as speech_voices.py)")
    parser.add_argument("--asr-model", default="tiny.en", help="the recogniser of the run (offline transcripts)")
    parser.add_argument("--layout", default="expost")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--by-voice", action="store_true", help="a column per voice (default: per synthesiser)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from simulmt.metrics.quality import bleu
    from simulmt.speech.ctc import token_error_rate
    from simulmt.speech.recognizer import RecognizerOptions, Whisper, as_float_audio
    from simulmt.speech.wav import read_audio
    from simulmt.translator import Translator
    from speech_voices import words_of

    records = [json.loads(line) for line in Path(args.records).read_text(encoding="utf-8").splitlines() if line]
    whisper = Whisper(RecognizerOptions(model=args.asr_model, threads=args.threads))
    offline = [" ".join(w.text for w in whisper.transcribe(as_float_audio(read_audio(r["file"])))).strip()
               for r in records]
    translator = Translator.load(args.model)
    kwargs = dict(layout=args.layout, policy="wait-k", k=args.k)
    as_text = {
        "offline transcript, as text": [t.prediction for t in translator.translate_many(
            offline, batch_size=args.batch_size, **kwargs)],
        "streamed transcript, as text": [t.prediction for t in translator.translate_many(
            [r["heard"] for r in records], batch_size=args.batch_size, **kwargs)],
        "streamed transcript, cut at its punctuation": [t.prediction for t in translator.translate_talks(
            [r["heard"] for r in records], batch_size=args.batch_size, **kwargs)],
    }
    rows = {"text (the run's)": [r["text"] for r in records], **as_text,
            "speech (the run's)": [r["speech"] for r in records]}
    wer = {"offline transcript, as text": offline, "streamed transcript, as text": [r["heard"] for r in records]}
    groups = {"all": [True] * len(records)}
    kinds = sorted({r["voice"] if args.by_voice else r["voice"].split(":")[0] for r in records})
    for kind in kinds if len(kinds) > 1 else ():  # per synthesiser (or voice), when there are several
        groups[kind] = [kind in (r["voice"], r["voice"].split(":")[0]) for r in records]
    print(f"{len(records)} lines of {args.records}; {translator.name}, {args.layout} wait-{args.k}; recogniser "
          f"{args.asr_model}\n")
    print("| translation of | " + " | ".join(f"{g}: BLEU (x text)" for g in groups) + " | WER % (all) |")
    print("|---|" + "---:|" * (len(groups) + 1))
    for label, predictions in rows.items():
        cells = []
        for group, keep in groups.items():
            picked = [(p, r["reference"]) for p, r, k in zip(predictions, records, keep) if k]
            if not picked:
                cells.append("-")
                continue
            score, _ = bleu([p for p, _ in picked], [ref for _, ref in picked])
            text, _ = bleu([r["text"] for r, k in zip(records, keep) if k], [ref for _, ref in picked])
            cells.append(f"{score:.2f} ({score / text:.2f})" if text else f"{score:.2f}")
        heard, spoken = wer.get(label), [words_of(r["source"]) for r in records]
        error = f"{100 * token_error_rate(spoken, [words_of(h) for h in heard]):.1f}" if heard else "-"
        print(f"| {label} | " + " | ".join(cells) + f" | {error} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
