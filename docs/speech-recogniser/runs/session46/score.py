import sys, torch
torch.set_num_threads(2)
from simulmt.metrics.quality import bleu
from simulmt.translator import Translator
D = "/work/shared/data"
HV = f"{D}/wmt-news/train.en-de.de,{D}/wmt-news/train.en-de.en,{D}/multi30k/train.de,{D}/multi30k/train.en"
refs = open(f"{D}/multi30k/test2017.de").read().splitlines()[:300]
tr = Translator.load(None, dtype="float16-packed", head_vocabulary=HV)
for f in sys.argv[1:]:
    texts = open(f).read().splitlines()
    out = tr.translate_many(texts, "expost", "wait-k", k=3, batch_size=16)
    open(f + ".de", "w").write("\n".join(t.prediction for t in out) + "\n")
    print(f, f"{bleu([t.prediction for t in out], refs)[0]:.2f}", flush=True)
