"""The engine's own cost: its work per stream and round when the model's forward costs nothing.

What a GPU sees as host time: the engine drives a "model" whose forward returns logits at once (rows of a fixed
score table, peaked on a scripted German text so that words, word ends and sentence ends come as a translation's
would), with the real tokenizer and vocabulary size of the model given (default: the converted Gemma-3-270M, 262k
tokens: the decoding rules' vocabulary-wide work is counted). Everything else is the engine's: the streams' steps
(policy, layout, decoding rules, sampler), the requests, the cache's bookkeeping (rows, crops, key sides), the
visibility masks and positions. The fake forward's own time (making the logits) is measured and left out.

    python benchmarks/engine_cost.py [--streams 1,16,64,256] [--model DIR] [--threads 1] [--profile 64 [--sort cumtime]]
                                     [--moved-guesses]
                                     [--collector tuned|default]

Prints, per stream count: rounds, forwards, target tokens, microseconds per stream per round (the engine's time
divided by rounds x live streams) and per forward. ``--collector``: Python's garbage collector as simulmt's
commands set it (``tuned``, the default: ``simulmt.core.execution.tune_collector``) or with Python's default
thresholds (``default``); compare the two in two processes run one after the other (in one process, which run
meets the collector's full passes depends on what ran before). ``--profile N``: cProfile of the run at N streams
(top 25).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

import torch

from simulmt.core.packed_forward import PackedAnswer

SOURCE = ("A man in a blue shirt is standing on a ladder cleaning windows while two children play in the park "
          "and a dog runs after a red ball near the old stone bridge over the river").split()
TARGET = ("Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt Fenster, während zwei Kinder im Park "
          "spielen und ein Hund einem roten Ball nahe der alten Steinbrücke über den Fluss nachläuft.")


class FreeForward:
    """``forward_packed`` that computes nothing: the logits of query ``q`` peak on the scripted token at its
    position (and on a second choice), over a fixed random table; the features (when asked: a learned policy) are
    rows of a fixed random table by position, so that its head's decisions vary along a sentence."""

    def __init__(self, vocab: int, script: list[int], hidden: int = 8):
        g = torch.Generator().manual_seed(0)
        self.base = torch.randn(vocab, generator=g)
        self.features = torch.randn(4096, hidden, generator=g)
        self.script = script
        self.seconds = 0.0

    def __call__(self, queries, cache, wants):
        start = time.perf_counter()
        n = len(queries.last)
        logits = self.base.repeat(n, 1)
        at = queries.positions[queries.last].tolist()
        rows = torch.arange(n)
        first = torch.tensor([self.script[p % len(self.script)] for p in at])
        second = torch.tensor([self.script[(p + 7) % len(self.script)] for p in at])
        logits[rows, second] = 15.0
        logits[rows, first] = 20.0
        features = self.features[at] if wants.features or wants.decisions is not None else None
        head_rows = wants.head_rows
        if wants.decisions is not None:  # a learned policy's conditional rows (decided on those features)
            self.seconds += time.perf_counter() - start  # (the policy's decisions are the engine's work)
            head_rows = wants.decisions.head_rows(features)
            start = time.perf_counter()
        if head_rows is not None:
            logits = logits[head_rows]
        self.seconds += time.perf_counter() - start
        return PackedAnswer(logits, features if wants.features else None, head_rows)


def script_tokens(tokenizer, end_id: int) -> list[int]:
    """The target text's tokens with an end every sentence-length or so."""
    ids = tokenizer(TARGET, add_special_tokens=False)["input_ids"]
    return ids + [end_id] + ids[: len(ids) // 2] + [end_id]


def translator_for(model_dir: str | None, markers: bool = False):
    import transformers

    from simulmt.core.learned_policy import PolicyHead
    from simulmt.translator import Translator

    if model_dir:
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        vocab = transformers.AutoConfig.from_pretrained(model_dir).get_text_config().vocab_size
    else:  # the tests' tiny tokenizer (no real model needed)
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from tiny_models import make_tokenizer

        tok = make_tokenizer(chat=True)
        if markers:  # the interleaved layout's marker tokens (the shared tokenizer of the tests must not get them)
            import copy

            from simulmt.core.markers import MARKERS

            tok = copy.deepcopy(tok)
            tok.add_special_tokens({"extra_special_tokens": list(MARKERS)}, replace_extra_special_tokens=False)
        vocab = len(tok)
    config = transformers.Gemma3TextConfig(vocab_size=vocab, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                           num_attention_heads=1, num_key_value_heads=1, head_dim=8,
                                           max_position_embeddings=4096, layer_types=["full_attention"])
    g = torch.Generator().manual_seed(1)  # a learned policy's head: p(WRITE) of the free forward's features
    head = PolicyHead(torch.randn(2, config.hidden_size, generator=g), torch.tensor([0.0, 0.5]))
    tr = Translator(transformers.Gemma3ForCausalLM(config).eval(), tok, name="free-forward", policy_head=head)
    free = FreeForward(tr.runner.compute.vocab, script_tokens(tok, tr.fmt.end_id))
    tr.runner.forward_packed = free
    return tr, free


def run(tr, free, streams: int, sentences: int, layout: str, policy: str, k: int, tau: float = 0.5) -> dict:
    from simulmt.core.engine import Engine, run_batched

    def make(i: int):
        s = tr.new_stream(layout, policy, k=k, tau=tau)
        s.push(SOURCE[: 12 + i % 17], finished=True)
        return s

    engine = Engine(tr.runner)
    rounds = live = 0
    step = engine.step

    def counted():
        nonlocal rounds, live
        rounds += 1
        live += len(engine.streams)
        return step()

    engine.step = counted
    made = [make(i) for i in range(sentences)]  # (a stream's tokenization and prompt: not a round's work)
    free.seconds = 0.0
    start = time.perf_counter()
    done = run_batched(made, engine, streams)
    total = time.perf_counter() - start
    own = total - free.seconds
    words = sum(len(s.result().prediction.split()) for s in done)
    return dict(rounds=rounds, forwards=engine.stats.forwards, words=words, own=own, model=free.seconds,
                per_stream_round=own / live * 1e6, per_forward=own / max(1, engine.stats.forwards) * 1e3,
                errors=sum(s.error is not None for s in done))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,16,64,256")
    parser.add_argument("--model", default=str(Path.home() / ".cache/simulmt/models/gemma-3-270m"),
                        help="tokenizer and vocabulary of this model ('tiny': the tests' tokenizer)")
    parser.add_argument("--layout", default="expost")
    parser.add_argument("--policy", default="wait-k", help="wait-k, read-n, offline or learned (a random head on "
                        "the free forward's features; with --layout interleaved, as EASiST)")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--rounds-per-size", type=int, default=2, help="sentences = this x streams (at least 8)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", type=int, default=0, help="cProfile the run at this many streams")
    parser.add_argument("--sort", default="tottime", help="the profile's order (cumtime: by the time under a call)")
    parser.add_argument("--moved-guesses", action="store_true",
                        help="Execution.moved_guesses on (expost's read-ahead; opt-in)")
    parser.add_argument("--collector", choices=("tuned", "default"), default="tuned",
                        help="Python's garbage collector: tuned (as simulmt's commands run it) or Python's default")
    args = parser.parse_args()
    if args.collector == "tuned":
        from simulmt.core.execution import tune_collector

        tune_collector()
    torch.set_num_threads(args.threads)
    tr, free = translator_for(None if args.model == "tiny" else args.model, markers=args.layout == "interleaved")
    if args.moved_guesses:
        from dataclasses import replace

        tr.runner.execution = replace(tr.runner.execution, moved_guesses=True)
    print(f"engine cost, zero-cost forward: vocab {tr.runner.compute.vocab}, {args.layout} {args.policy}"
          f" k={args.k}, {args.threads} thread(s), garbage collector {args.collector}")
    run(tr, free, 4, 8, args.layout, args.policy, args.k)  # warm-up
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run(tr, free, args.profile, max(8, args.rounds_per_size * args.profile), args.layout, args.policy, args.k)
        profiler.disable()
        pstats.Stats(profiler).sort_stats(args.sort).print_stats(25)
        return
    print(f"{'streams':>8} {'rounds':>7} {'forwards':>8} {'words':>6} {'engine s':>8} {'fake s':>7} "
          f"{'us/stream/round':>15} {'ms/forward':>10}")
    for n in [int(x) for x in args.streams.split(",")]:
        r = run(tr, free, n, max(8, args.rounds_per_size * n), args.layout, args.policy, args.k)
        print(f"{n:8d} {r['rounds']:7d} {r['forwards']:8d} {r['words']:6d} {r['own']:8.2f} {r['model']:7.2f} "
              f"{r['per_stream_round']:15.1f} {r['per_forward']:10.2f}" + (f"  ({r['errors']} failed)"
                                                                            if r['errors'] else ""))


if __name__ == "__main__":
    main()
