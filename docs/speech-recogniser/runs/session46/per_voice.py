"""Per-voice BLEU (speech / text) as in docs/speech-recogniser.md, session 46: flite from the real-time run's records,
festival from the replay of its recorded transcripts (fest-later.txt: the later step's confirmed words, as written,
translated by score.py). Paths as they were on the session's machine."""
import json

import sacrebleu

refs = open("/work/shared/data/multi30k/test2017.de").read().splitlines()[:300]
T = open("/work/runs/s46/src.txt.de").read().splitlines()  # score.py's translation of the typed source lines


def per_voice(voices, speech):
    for v in sorted(set(voices)):
        idx = [i for i, x in enumerate(voices) if x == v]
        s = sacrebleu.corpus_bleu([speech[i] for i in idx], [[refs[i] for i in idx]]).score
        t = sacrebleu.corpus_bleu([T[i] for i in idx], [[refs[i] for i in idx]]).score
        print(v, f"{s:.2f} / {t:.2f} = {s / t:.3f}")


R = [json.loads(line) for line in open("/work/runs/s46/rt-later1000-cap.jsonl")]
per_voice([r["voice"] for r in R], [r["speech"] for r in R])
per_voice(json.load(open("/work/runs/s46/fest-voices.json")), open("/work/runs/s46/fest-later.txt.de").read().splitlines())
