"""Speech compute: real-time factor and ms per target token, streaming vs offline, in one run (ratios hold).

    .venv/bin/python benchmarks/speech_rtf.py [--encoder tiny.en] [--model gemma-3-270m] [--threads 2]

The speech adapter is random (seeded) unless ``--speech-model`` names a trained one, and the output is
teacher-forced to a fixed German translation along each policy's schedule in blocks: compute then depends only on
the audio's length and the tokens written, the same for every policy (streaming vs offline: like with like). Utterances: the shipped sample and
synthesised Multi30k-like sentences (espeak-ng) when available. Prints, per policy: the encoder's ms per second of
audio, the LLM's ms per target token, and RTF = (features + encoder + adapter + LLM) / audio duration.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from simulmt.core.examples import build_examples
from simulmt.core.layouts import Interleaved
from simulmt.core.markers import add_interleaved_markers
from simulmt.core.packed_linear import pack_linears
from simulmt.core.placed import embedded_units
from simulmt.core.policies import Scheduled, WaitK
from simulmt.models import model_dtype, resolve_dtype
from simulmt.finetune.parity import forced_tokens
from simulmt.speech.adapter import SpeechAdapter, SpeechAdapterConfig
from simulmt.speech.model import SpeechTranslator
from simulmt.speech.streaming_encoder import StreamingEncoderConfig
from simulmt.speech.wav import read_wav
from simulmt.speech.whisper_ct2 import whisper_encoder
from simulmt.translator import Translator

SAMPLE = Path(__file__).resolve().parents[1] / "simulmt" / "speech" / "samples" / "a_man_rides_a_bike.wav"
SENTENCES = ["Two young men are playing football on a green field in the afternoon sun.",
             "A woman in a red coat walks her dog along the busy street near the old market.",
             "Several children are sitting at a long table and eating cake at a birthday party."]
# what every configuration writes (teacher-forced: the same output for streaming and offline, so ms per token
# compares like with like, whatever the adapter's training)
TARGETS = ["Ein Mann fährt im Park Fahrrad.",
           "Zwei junge Männer spielen am Nachmittag in der Sonne auf einem grünen Feld Fußball.",
           "Eine Frau in einem roten Mantel führt ihren Hund die belebte Straße am alten Markt entlang.",
           "Mehrere Kinder sitzen an einem langen Tisch und essen auf einer Geburtstagsfeier Kuchen."]


def utterances() -> list[np.ndarray]:
    out = [read_wav(SAMPLE)[0]]
    try:
        from simulmt.finetune.speech.synth import synthesise_sentence

        out += [synthesise_sentence(s.split(), seed=i)[0] for i, s in enumerate(SENTENCES)]
    except Exception as exc:  # noqa: BLE001 - espeak-ng missing: the sample alone
        print(f"(no synthesis: {exc})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="tiny.en")
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--speech-model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--block-ms", type=int, default=640)
    parser.add_argument("--left-context-ms", type=int, default=5120)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.dtype = resolve_dtype(args.dtype, "cpu")  # auto: what this CPU runs fastest
    dtype, packed = model_dtype(args.dtype)  # the encoder and adapter run in it; the LLM may be float16-packed
    if args.speech_model:
        speech = SpeechTranslator.load(args.speech_model, dtype=args.dtype)
    else:
        tr = Translator.load(args.model, adapter="none", dtype=dtype)
        add_interleaved_markers(tr.model, tr.tokenizer)  # before packing: the LM head grows
        if packed:
            pack_linears(tr.model)
        tr = Translator(tr.model, tr.tokenizer, name=tr.name)
        encoder, extractor = whisper_encoder(args.encoder, dtype=dtype)
        torch.manual_seed(0)
        adapter = SpeechAdapter(SpeechAdapterConfig(encoder.config.d_model, tr.model.config.get_text_config().hidden_size
                                                    if hasattr(tr.model.config, "get_text_config")
                                                    else tr.model.config.hidden_size)).to(dtype)
        speech = SpeechTranslator(tr, encoder, extractor, adapter,
                                  StreamingEncoderConfig(args.block_ms, args.left_context_ms))
    clips = utterances()
    seconds = sum(len(c) for c in clips) / 16000
    print(f"{len(clips)} utterances, {seconds:.1f} s of audio; encoder {args.encoder}, LLM {args.model}, "
          f"{args.dtype}, {args.threads} threads, blocks {args.block_ms} ms, left context {args.left_context_ms} ms")
    speech.translate(clips[0], "interleaved", WaitK(2))  # warm-up
    tr = speech.translator
    rows = []
    for name, k in (("wait-2 (blocks)", 2), ("wait-4 (blocks)", 4), ("offline", None)):
        enc = wall = tokens = 0.0
        for clip, target in zip(clips, TARGETS):
            blocks = len(speech.encode(clip))  # the count only (not timed: outside the clock below)
            words = target.split()
            delays = [blocks if k is None else min(k + j, blocks) for j in range(len(words))]
            units = embedded_units([speech.adapter.output_frames(len(b)) for b in speech.encode(clip)])
            (example,) = build_examples(Interleaved(), tr.fmt, tr.tokenizer, units, words, delays)
            forced = forced_tokens(example, tr.fmt.end_id)
            t0 = time.perf_counter()
            r = speech.translate(clip, "interleaved", Scheduled(tuple(delays)), forced=forced)
            wall += (time.perf_counter() - t0) * 1000
            enc += r.encoder_ms + r.adapter_ms
            tokens += len(forced) - 1
            assert r.prediction == target, (r.prediction, target)
        llm = wall - enc
        rows.append((name, enc / seconds, llm / tokens, wall / 1000 / seconds, tokens))
    print(f"{'policy':18} {'encoder+adapter ms / audio s':>29} {'LLM ms / target token':>22} {'RTF':>6} {'tokens':>7}")
    print("(LLM time = wall - encoder - adapter: feeding the speech embeddings and writing the target)")
    for name, enc, per_token, rtf, tokens in rows:
        print(f"{name:18} {enc:29.1f} {per_token:22.1f} {rtf:6.3f} {int(tokens):7d}")
    offline = rows[-1][2]
    for name, _, per_token, _, _ in rows[:-1]:
        print(f"{name}: streaming ms/token = {per_token / offline:.2f} x offline")


if __name__ == "__main__":
    main()
