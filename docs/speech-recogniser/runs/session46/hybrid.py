"""Hybrid replay: silence-padded transcripts while a sentence's first FAST words are unconfirmed, zeros after."""
import gzip, json, sys
import numpy as np
sys.path.insert(0, "/work/main/benchmarks")
from simulmt.speech.local_agreement import LocalAgreement, TimedWord
from simulmt.speech.recognizer import sentence_progress
from simulmt.speech.written_words import written_words
from simulmt.speech.ctc import token_error_rate
from speech_voices import words_of

Z = [json.loads(r) for r in gzip.open("/work/main/docs/speech-recogniser/runs/replay-base-500-flite300.jsonl.gz", "rt")]
S = [json.loads(r) for r in open("/work/runs/s46/replay-base-500-flite300-silence.jsonl")]
FAST = int(sys.argv[1]) if len(sys.argv) > 1 else 1
LATER = 1000

def confirm(z, s):
    assert [u["t"] for u in z["updates"]] == [u["t"] for u in s["updates"]]
    agreement = LocalAgreement(2, lookback=1)
    confirmed, decoded_ms, in_sentence, nxt = [], 0.0, 0, False
    n = len(z["updates"])
    for index in range(n):
        update = z["updates"][index]
        last = index == n - 1
        if not last:
            if round(update["t"]) % 500:
                continue
            later = in_sentence >= 3 and not nxt
            if later and round(update["t"] - decoded_ms) < LATER:
                continue
            decoded_ms = update["t"]
            if update["audio_ms"] < 1000:
                continue
        src = s if (in_sentence < FAST and not last) else z
        u = src["updates"][index]
        hyp = [TimedWord(t, a, b) for t, a, b in u["words"]]
        newly = agreement.update(hyp, u["t"])
        confirmed += [(w.text, u["t"]) for w in newly]
        in_sentence, nxt = sentence_progress(in_sentence, newly, agreement.history[-1] if agreement.history else [], ended=last)
    return confirmed + [(w.text, z["audio_ms"]) for w in agreement.flush()]

conf = [confirm(z, s) for z, s in zip(Z, S)]
typed = [" ".join(written_words([w for w, _ in c], spell_numbers=True)[0]) for c in conf]
wer = token_error_rate([words_of(l["source"]) for l in Z], [words_of(t) for t in typed])
lags = [c[2][1] - l["ends"][min(3, len(l["ends"])) - 1] for l, c in zip(Z, conf) if len(c) >= 3]
print(f"FAST={FAST} WER {100*wer:.2f} lag3 {np.percentile(lags,50):.0f}/{np.percentile(lags,95):.0f} first-word-wrong",
      sum(t.split()[:1] != l["source"].split()[:1] for t, l in zip(typed, Z)))
open(f"/work/runs/s46/hybrid{FAST}.txt", "w").write("\n".join(typed) + "\n")
