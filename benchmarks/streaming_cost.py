"""What streaming costs: expost vs prefix (recompute) vs offline decoding of the SAME output, measured in one run.

For each sentence, expost + wait-k decodes greedily. Its output and schedule are then replayed (teacher forced)
through the prefix layout and through offline decoding (read everything, then write), so all three produce the
same words at the same delays and only the cost differs. Prints per-sentence and total tokens fed, GFLOPs and
wall time, with ratios to offline.

    python benchmarks/streaming_cost.py --model gemma-3-270m --source ../shared/data/iwslt17/tst2017.en-de.en --lines 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from tqdm import tqdm

from simulmt import Offline, Scheduled, Translator, WaitK
from simulmt.layouts import Expost, PrefixRecompute
from simulmt.placed import Role


def replay(tr: Translator, layout, policy, session):
    forced = [(t.token_id, t.unit) for t in session.state.tokens if t.role is Role.TARGET] + [(tr.fmt.end_id, -1)]
    replayed = tr.session(layout, policy, forced=forced)
    result = replayed.run(" ".join(session.source_words))
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--source", required=True, help="one sentence per line")
    ap.add_argument("--lines", type=int, default=20)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--slot", type=int, default=16)
    ap.add_argument("--target-lang", default="de")
    args = ap.parse_args(argv)

    tr = Translator.load(args.model, target_lang=args.target_lang)
    with open(args.source, encoding="utf-8") as f:
        lines = [line.strip() for _, line in zip(range(args.lines), f)]
    rows = []
    for line in tqdm(lines, desc="sentences", file=sys.stderr):
        t0 = time.perf_counter()
        session = tr.session(Expost(args.slot), WaitK(args.k))
        expost = session.run(line)
        expost_ms = (time.perf_counter() - t0) * 1000
        delays = tuple(w.delay for w in session.written)
        t0 = time.perf_counter()
        prefix = replay(tr, PrefixRecompute(), Scheduled(delays), session)
        prefix_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        offline = replay(tr, Expost(args.slot), Offline(), session)
        offline_ms = (time.perf_counter() - t0) * 1000
        assert prefix.prediction == expost.prediction == offline.prediction, "replays must write the same output"
        rows.append(dict(words=len(expost.prediction.split()), target_tokens=sum(len(w.tokens) for w in session.written),
                         expost=(expost.tokens_fed, expost.flops, expost_ms),
                         prefix=(prefix.tokens_fed, prefix.flops, prefix_ms),
                         offline=(offline.tokens_fed, offline.flops, offline_ms), prediction=expost.prediction))

    print(f"\nmodel={tr.name} policy=wait-{args.k} slot={args.slot} sentences={len(rows)} "
          f"source={args.source} (same output replayed through each scheme)")
    print(f"{'#':>3} {'words':>5} {'tgt tok':>7} | {'tokens fed: expost':>18} {'prefix':>7} {'offline':>7}")
    for i, r in enumerate(rows):
        print(f"{i:>3} {r['words']:>5} {r['target_tokens']:>7} | {r['expost'][0]:>18} {r['prefix'][0]:>7} "
              f"{r['offline'][0]:>7}")
    print("\nper sentence (median [min-max]) and ratio of totals to offline:")
    for name in ("expost", "prefix", "offline"):
        fed = [r[name][0] for r in rows]
        gflops = [r[name][1] / 1e9 for r in rows]
        ms = [r[name][2] for r in rows]
        tok = sum(r["target_tokens"] for r in rows)
        ratio = lambda i: sum(r[name][i] for r in rows) / sum(r["offline"][i] for r in rows)  # noqa: E731
        print(f"  {name:8s} tokens fed {statistics.median(fed):7.0f} [{min(fed)}-{max(fed)}]  x{ratio(0):.2f} | "
              f"GFLOPs {statistics.median(gflops):7.2f} [{min(gflops):.2f}-{max(gflops):.2f}]  x{ratio(1):.2f} | "
              f"wall ms/target token {sum(ms) / max(tok, 1):7.1f}  x{ratio(2):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
