"""Where does a speech run lose the audio? Two checks on a ``finetune-speech`` run's held-out utterances.

    .venv/bin/python benchmarks/speech_adapter_checks.py audio-use RUN [--utterances 60]
    .venv/bin/python benchmarks/speech_adapter_checks.py translate RUN --input text|oracle|best-path
    .venv/bin/python benchmarks/speech_adapter_checks.py spell RUN --output DIR

``RUN`` is a speech stage's output folder run with ``--held-out N`` (its ``training.json`` names the corpus, the LLM
and its adapter; its ``blocks`` cache is reused). The checks:

* ``audio-use`` (an align run): the align loss, nats per transcript token, of each held-out utterance read with its
  own audio, with another held-out utterance's audio, and with the adapter's embeddings zeroed. If own and other are
  close, the frozen LLM writes a caption it would write for any speech: it does not use what the adapter says.
* ``translate``: the LLM's offline translations (greedy, the interleaved layout) of the held-out utterances against
  their references (BLEU, chrF), reading ``text`` (the transcript's words, the text path), ``oracle`` (the
  transcript's own token embeddings, entered as one embedded unit: the speech path with a perfect adapter) or
  ``best-path`` (the embeddings of the tokens a ctc run's free head spells, ``--ctc-head free``: a cascade through
  the CTC head, as one embedded unit). It tells what a given transcript quality is worth in translation.
* ``spell`` (a ctc run with ``--ctc-head free``, whose model reads spelled words): the words its model spells for
  every utterance of the corpus, as a line-aligned text corpus in DIR (``train.en``/``train.de``: the utterances
  trained on; ``held-out.en``/``held-out.de``; an utterance that spells nothing is left out and counted), with the
  word error rate against the transcripts: text to fine-tune the LLM on what the speech model will read.

Runs that trained the encoder's top layers (``--encoder-layers``) are not supported.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulmt.errors import SimulmtError  # noqa: E402


def load_run(run: Path, translator=None, encoder=None, extractor=None):
    """The run's options, its translator, its held-out items (encoder blocks from its cache) and its adapter."""
    from simulmt.speech.adapter import SpeechAdapter
    from simulmt.finetune.speech.options import SpeechTrainOptions
    from simulmt.finetune.speech.train import load_items

    card_path = run / "training.json"
    if not card_path.is_file():
        raise SimulmtError(f"{run}: no training.json; pass a finished `simulmt finetune-speech` run folder")
    saved = json.loads(card_path.read_text())["options"]
    options = SpeechTrainOptions(**{**saved, "output": str(run), "resume": False, "max_minutes": None})
    if not options.held_out:
        raise SimulmtError(f"{run} was run without --held-out: these checks read its held-out utterances")
    if options.encoder_layers:
        raise SimulmtError(f"{run} trained the encoder's top layers: not supported by these checks")
    if translator is None:
        from simulmt.translator import Translator

        translator = Translator.load(options.model, adapter=options.adapter or "none",
                                     source_lang=options.source_lang, target_lang=options.target_lang, device="cpu")
    if encoder is None:
        from simulmt.speech.whisper_ct2 import whisper_encoder

        encoder, extractor = whisper_encoder(options.encoder)
    items = load_items(options, encoder, extractor)
    adapter = SpeechAdapter.load(run / "model")
    return options, translator, items, adapter


def audio_use(run: Path, utterances: int = 60, **parts) -> dict:
    """Align loss per transcript token of the held-out utterances: own audio, another's, none (zeroed)."""
    from simulmt.core.layouts import Interleaved
    from simulmt.core.prompt_format import build_format, with_interleaved_markers
    from simulmt.finetune.speech.train import SpeechItem, _loss

    options, translator, items, adapter = load_run(run, **parts)
    if options.stage != "align" or options.align_target != "transcript":
        raise SimulmtError(f"audio-use reads an align run (transcript target); {run} is a {options.stage} run")
    held = items[len(items) - options.held_out:][:utterances]
    fmt = with_interleaved_markers(build_format(translator.tokenizer, options.source_lang, options.source_lang),
                                   translator.tokenizer)
    translator.model.eval()
    sums = {"own": [0.0, 0], "other": [0.0, 0], "none": [0.0, 0]}
    with torch.no_grad():
        for i, item in enumerate(held):
            other = held[(i + 1) % len(held)]
            reads = {"own": (item.blocks, item.available_ms), "other": (other.blocks, other.available_ms),
                     "none": ([b * 0 for b in item.blocks], item.available_ms)}
            for name, (blocks, available) in reads.items():
                read = SpeechItem(item.id, blocks, available, item.source, item.target, item.word_end_ms)
                loss, count = _loss(translator, adapter, None, read, Interleaved(), fmt, options, random.Random(0))
                sums[name][0] += float(loss)
                sums[name][1] += count
    return {"run": str(run), "utterances": len(held),
            **{f"loss_{name}_audio": round(total / max(1, count), 4) for name, (total, count) in sums.items()}}


def translate(run: Path, source: str, utterances: int = 200, batch_size: int = 16, **parts) -> dict:
    """Offline translations of the held-out utterances read as ``text``, ``oracle`` or ``best-path`` (see the
    module docstring), with BLEU and chrF against their references."""
    import sacrebleu

    from simulmt.core.engine import Engine, run_ordered
    from simulmt.core.layouts import Interleaved
    from simulmt.core.prompt_format import text_ids
    from simulmt.speech.ctc import CTCScorer

    if source not in ("text", "oracle", "best-path"):
        raise SimulmtError(f"unknown --input {source!r}: text, oracle or best-path")
    options, translator, items, adapter = load_run(run, **parts)
    held = items[len(items) - options.held_out:][:utterances]
    tokenizer = translator.tokenizer
    embed = translator.model.get_input_embeddings()

    def rows(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return embed(torch.tensor(ids, dtype=torch.long)).float()

    if source == "best-path":
        if options.stage != "ctc" or options.ctc_head != "free":
            raise SimulmtError(f"--input best-path reads a ctc run with --ctc-head free (its model keeps the head); "
                               f"{run} is a {options.stage} run (ctc head {options.ctc_head})")
        scorer = CTCScorer.load(run / "model")

    def units(item) -> list[torch.Tensor]:
        if source == "oracle":
            return [rows(list(text_ids(tokenizer, item.source)))]
        with torch.no_grad():
            spelled = scorer.greedy(torch.cat([adapter(b) for b in item.blocks]))
        return [rows(spelled or list(text_ids(tokenizer, ".")))]  # never an empty unit

    def streams():
        for item in held:
            stream = translator.new_stream(Interleaved(), "offline")
            if source == "text":
                stream.push(item.source.split(), finished=True)
            else:
                stream.push_embedded(units(item), finished=True)
            yield stream

    written = [s.result().prediction for s in run_ordered(streams(), Engine(translator.runner), batch_size)]
    references = [item.target for item in held]
    return {"run": str(run), "input": source, "utterances": len(held),
            "bleu": round(sacrebleu.corpus_bleu(written, [references]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(written, [references]).score, 2),
            "examples": [{"source": item.source, "reference": item.target, "written": text}
                         for item, text in zip(held[:4], written)]}


def spell(run: Path, output: Path, **parts) -> dict:
    """The words a ctc-words run's model spells for each utterance, written as parallel text (see the docstring)."""
    from tqdm.auto import tqdm

    from simulmt.speech.ctc import CTCScorer, token_error_rate
    from simulmt.speech.spelled_words import SpelledWords, spelled_words, word_start_ids

    options, translator, items, adapter = load_run(run, **parts)
    scorer = CTCScorer.load(run / "model")
    starts = word_start_ids(translator.tokenizer, scorer.vocab)
    spelling = lambda: SpelledWords(scorer, translator.tokenizer.decode, starts)  # noqa: E731
    output.mkdir(parents=True, exist_ok=True)
    held = len(items) - options.held_out
    report: dict = {"run": str(run), "output": str(output)}
    for name, part in (("train", items[:held]), ("held-out", items[held:])):
        heard, kept, silent = [], [], 0
        for item in tqdm(part, desc=f"spell: {name}", unit="utt"):
            with torch.no_grad():
                words, _ = spelled_words(spelling, [adapter(b) for b in item.blocks])
            heard.append(words)
            if words:
                kept.append((" ".join(words), item.target))
            else:
                silent += 1
        (output / f"{name}.en").write_text("".join(f"{en}\n" for en, _ in kept))
        (output / f"{name}.de").write_text("".join(f"{de}\n" for _, de in kept))
        report[name] = {"utterances": len(part), "written": len(kept), "spelled_nothing": silent,
                        "word_error_rate": round(token_error_rate([i.source.split() for i in part], heard), 4)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="check", required=True)
    use = sub.add_parser("audio-use", help="align loss with own, other and no audio")
    use.add_argument("run", type=Path)
    use.add_argument("--utterances", type=int, default=60)
    mt = sub.add_parser("translate", help="offline translation of the held-out utterances from text or embeddings")
    mt.add_argument("run", type=Path)
    mt.add_argument("--input", dest="source", required=True, choices=("text", "oracle", "best-path"))
    mt.add_argument("--utterances", type=int, default=200)
    sp = sub.add_parser("spell", help="the words a ctc-words model spells for every utterance, as parallel text")
    sp.add_argument("run", type=Path)
    sp.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.check == "audio-use":
            result = audio_use(args.run, args.utterances)
        elif args.check == "spell":
            result = spell(args.run, args.output)
        else:
            result = translate(args.run, args.source, args.utterances)
    except SimulmtError as error:
        raise SystemExit(f"error: {error}") from None
    print(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
