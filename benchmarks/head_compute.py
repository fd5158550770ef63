"""`simulmt bench --audio LIST --lines 20 --policy wait-k,learned --k 3 --taus 0.1,...,0.6 --threads 2 --dtype
float16-packed` with the learned policy under two heads in one run: the speech model's own head and another (a head
on an inner layer, whose READs stop the forward there), each utterance under every configuration in turn.

    python benchmarks/head_compute.py ADAPTER_WITH_OTHER_HEAD LIST OUT.json [TAUS]
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
torch.set_num_threads(2)
from tqdm import tqdm
from simulmt.core.policies import make_policy
from simulmt.core.learned_policy import PolicyHead
from simulmt.bench import speech as sb
from simulmt.speech.model import SpeechTranslator, default_speech_model
from simulmt.speech.wav import read_audio
layer_dir, listing, out = sys.argv[1], sys.argv[2], sys.argv[3]
taus = [float(t) for t in (sys.argv[4] if len(sys.argv) > 4 else "0.1,0.2,0.3,0.4,0.5,0.6").split(",")]
files = sb.audio_files(listing)[:20]
clips = [(str(f), read_audio(str(f))) for f in files]
speech = SpeechTranslator.load(default_speech_model(), dtype="float16-packed")
final = speech.translator.policy_head  # (named by its layer below)
inner = PolicyHead.load(layer_dir)
conf = [("wait-3", make_policy("wait-k", k=3), {})]
for tau in taus:
    conf.append((f"learned-{'L%d' % final.layer if final.layer is not None else 'final'} tau={tau}",
                 make_policy("learned", tau=tau, head=final), {}))
    conf.append((f"learned-{'L%d' % inner.layer if inner.layer is not None else 'final'} tau={tau}",
                 make_policy("learned", tau=tau, head=inner), {}))
with tqdm(total=len(clips)) as bar:
    bench = sb.speech_benchmark(speech, clips, conf, progress=bar.update)
bench["settings"] = {"model": speech.name, "dtype": speech.translator.dtype, "threads": 2,
                     "block_ms": speech.config.block_ms}
json.dump(bench, open(out, "w"), indent=1)
sb.print_report(bench, sys.stdout)
for tag in {"learned-final" if final.layer is None else f"learned-L{final.layer}",
            "learned-final" if inner.layer is None else f"learned-L{inner.layer}"}:
    rs = [s for n, s in bench["results"].items() if n.startswith(tag)]
    print(tag, "mean all compute", round(sum(s["same_output_all_compute"] for s in rs) / len(rs), 3),
          "forwards/token", round(sum(s["forwards_per_token"] for s in rs) / len(rs), 3),
          "LLM", round(sum(s["same_output"] for s in rs) / len(rs), 3))
