import gzip, json, sys
import numpy as np
from simulmt.speech.recognizer import RecognizerOptions, Whisper
from simulmt.speech.wav import read_audio
import simulmt.speech.recognizer as R

opts = RecognizerOptions(model="base", step_ms=500, threads=2, min_audio_ms=0, pause_ms=0)
w = Whisper(opts)
fe = w.model.feature_extractor
orig = fe.__call__
mode = {"pad": "zero"}
class FE:
    def __getattr__(self, k): return getattr(fe, k)
    def __call__(self, audio, *a, **k):
        if mode["pad"] == "silence":
            audio = np.pad(audio, (0, max(0, 16000 * 10 - len(audio))))
        return fe(audio, *a, **k)
w.model.feature_extractor = FE()
lines = [json.loads(r) for r in gzip.open("/work/main/docs/speech-recogniser/runs/replay-base-500-flite300.jsonl.gz", "rt")]
keys = sys.argv[1:] or ["A woman in a red outfit races", "A man, his horse", "A girl jumping high", "A guy is skate",
        "A little girl on a swing", "Two teams of girls", "A bike race", "Car passing", "A woman squats"]
for key in keys:
    l = next(l for l in lines if l["source"].startswith(key))
    audio = R.as_float_audio(read_audio(l["file"]))
    print(l["voice"], l["source"])
    for t in range(1000, len(audio) // 16 + 500, 500):
        seg = audio[: t * 16]
        out = []
        for m in ("zero", "silence"):
            mode["pad"] = m
            out.append(" ".join(x.text for x in w.transcribe(seg, "")))
        print(f"  {t:5d} Z: {out[0]}\n        S: {out[1]}")
