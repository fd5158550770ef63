import gzip, json, sys
import numpy as np
sys.path.insert(0, "/work/main/benchmarks")
from agreement_replay import confirm
import simulmt.speech.local_agreement as la
from simulmt.speech.ctc import token_error_rate
from speech_voices import words_of
from simulmt.core.sentence_ends import ends_sentence
from simulmt.speech.spoken_numbers import spoken_numbers

H = int(sys.argv[1]) if len(sys.argv) > 1 else 0
orig_update = la.LocalAgreement.update

def held_update(self, hypothesis, audio_end_ms=None):
    if not H:
        return orig_update(self, hypothesis, audio_end_ms)
    # count confirmed words in the sentence so far
    count = 0
    for w in reversed(self.confirmed):
        if ends_sentence(w.text, "X"):
            break
        count += 1
    if count >= H:
        return orig_update(self, hypothesis, audio_end_ms)
    saved = (list(self.confirmed), self.in_buffer, [list(h) for h in self.history])
    newly = orig_update(self, hypothesis, audio_end_ms)
    if newly and count + len(newly) < H and not any(ends_sentence(w.text, "X") for w in newly):
        self.confirmed, self.in_buffer, self.history = saved
        fresh = self._after_confirmed(hypothesis)
        self.history = [*self.history, fresh][-max(1, self.kept):]
        return []
    return newly
la.LocalAgreement.update = held_update

lines = [json.loads(r) for r in gzip.open("/work/main/docs/speech-recogniser/runs/replay-base-500-flite300.jsonl.gz", "rt")]
rule = {"lookback": 1}
later = int(sys.argv[2]) if len(sys.argv) > 2 else 0
conf = [confirm(l, rule, 500, 1000, later, 3) for l in lines]
typed = [" ".join(spoken_numbers([w for w, _ in c])[0]) for c in conf]
sources = [words_of(l["source"]) for l in lines]
wer = token_error_rate(sources, [words_of(t) for t in typed])
lags = [c[2][1] - l["ends"][min(3, len(l["ends"])) - 1] for l, c in zip(lines, conf) if len(c) >= 3]
print(f"H={H} later={later} WER {100*wer:.2f} lag3 p50/p95 {np.percentile(lags,50):.0f}/{np.percentile(lags,95):.0f}")
with open(f"/work/runs/s46/hold{H}-{later}.txt", "w") as f:
    f.write("\n".join(typed) + "\n")
