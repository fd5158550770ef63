"""Where a GPU forward's time goes: the engine at N streams on a random model of a real shape, parts timed.

On a GPU the engine reaches 0.12-0.16x of the one-graph ceiling at 64 streams (engine-speed.md, "Where a round goes").
This run splits a round's wall time into its parts, so a change can be aimed at the largest:

    round        one ``Engine.step``: the streams' steps, the forward, the answers
    forward      ``ModelRunner.forward_packed`` as the host sees it (no synchronisation added)
    fill         ``StaticDecoder._fill``: the padded inputs, masks and indices copied into a graph's buffers
    replay       ``CUDAGraph.replay`` (the launch; the GPU runs it after)
    head         the LM head's call (launches; the softcap and the float copy of its logits are not in it)
    to host      ``Tensor.tolist``/``item``/``cpu`` calls in the round (CPU tensors' too; ``bool()``/``int()`` of a
                 device tensor not counted): where the host waits for the GPU to finish the round's work
    gpu          CUDA events around ``forward_packed``: the GPU's span for the forward, idle gaps included

then a cProfile of one run (top functions by own time) and the torch profiler's counts of CUDA API calls per
forward (kernel launches, copies, synchronisations). Random weights (they cannot travel; a forward's cost depends
on shapes only) write to the length bounds: only per-token and per-forward figures mean anything. With ``--forced
FILE`` (one translation per source line: ``ASSETS/hyp.de``, the shipped model's own, made by ``gpu_prepare.sh
assets``) each stream is teacher-forced to its line's translation, so its words, its length and its end, and so
the reads, target tokens and queries per forward, are a real translation's; the random weights set the compute only.
A forced stream skips the decoding rules and the engine's best tokens (its token is given), so a forced run's host
times are lower than a greedy run's: take its counts (tokens per round, queries per forward) with the greedy run's
times.

    python benchmarks/gpu_host_profile.py ASSETS [--shapes gemma-3-270m,gemma-3-4b] [--streams 16,64] [--waves 2]
                                          [--profile 64] [--ceiling-rows 128,256] [--out DIR] [--forced FILE]
                                          [--policy learned]

``--policy learned``: a random policy head decides (expost), so the round includes what a learned policy costs the
host: its p(WRITE) is computed for every row of a forward at once (head_scores.py), one product and one copy to the
host a forward; before 2026-12-07 it was one of each per stream and decision ("policy head calls/forward" counts the
products, each a copy of hidden states to the host that waits for the device; "to host" counts ``tolist``/``item``/
``cpu`` calls only).

ASSETS: as benchmarks/gpu_check.sh's (config and tokenizer of the converted gemma-3-270m, src.en). On a CPU the
same run works on the ``tiny`` shape (a dry run: no events, no graphs).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import lzma
import pstats
import shutil
import time
from collections import defaultdict
from pathlib import Path

import torch

SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=32),
    "gemma-3-270m": {},
    "gemma-3-4b": dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
                       num_key_value_heads=4, head_dim=256),
    "gemma-3-12b": dict(hidden_size=3840, intermediate_size=15360, num_hidden_layers=48, num_attention_heads=16,
                        num_key_value_heads=8, head_dim=256),
}
CUDA = torch.cuda.is_available()


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


class Clock:
    """Wall-time accumulators for wrapped callables (no synchronisation added)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._undo: list = []

    def wrap(self, owner, name: str, label: str) -> None:
        inner = getattr(owner, name)
        seconds, calls = self.seconds, self.calls

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                seconds[label] += time.perf_counter() - t
                calls[label] += 1
        setattr(owner, name, timed)
        self._undo.append((owner, name, inner))

    def undo(self) -> None:
        for owner, name, inner in reversed(self._undo):
            setattr(owner, name, inner)
        self._undo.clear()


def build(tok_dir: Path, shape: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    from simulmt.core.fused_layers import fuse_for_inference

    cfg = AutoConfig.from_pretrained(tok_dir)
    for k, v in SHAPES[shape].items():
        setattr(cfg, k, v)
    n = cfg.num_hidden_layers
    cfg.layer_types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    torch.manual_seed(0)
    with torch.device("cuda" if CUDA else "cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16 if CUDA else torch.float32).eval()
    fuse_for_inference(model)
    return model


def forced_targets(tr, sources: list[str], targets: list[str], k: int) -> list[list[tuple[int, int]]]:
    """Each target line as (token id, word index) pairs, then the end: tokenised as training lays it out."""
    from simulmt.core.layouts import Expost
    from simulmt.core.policies import wait_k_delays
    from simulmt.finetune.parity import forced_tokens

    out = []
    for src, tgt in zip(sources, targets):
        delays = wait_k_delays(k, len(src.split()), len(tgt.split()))
        out.append(forced_tokens(tr.training_examples(Expost(16), src, tgt, delays)[-1], tr.fmt.end_id))
    return out


def run_once(tr, sents, streams: int, kwargs: dict, forced: list | None = None):
    from simulmt.bench.throughput import count_full_rounds, pushed_streams
    from simulmt.core.engine import Engine, run_batched

    if forced is None:
        made = pushed_streams(tr, sents, kwargs)
    else:  # teacher-forced to real translations (``--forced``)
        made = [tr.new_stream(**kwargs, forced=target) for target in forced]
        for stream, text in zip(made, sents):
            stream.push(text.split(), finished=True)
    engine = Engine(tr.runner)
    full = count_full_rounds(engine, streams)  # rounds with every stream live (no drain at the end)
    sync()
    t = time.perf_counter()
    run_batched(made, engine, streams)
    sync()
    sec = time.perf_counter() - t
    stats = engine.stats
    stats.full_rounds = full
    del engine  # its cache's store goes back to the static decoder for the next engine (graphs recorded on it)
    gc.collect()
    return made, stats, sec


def parts(tr, sents, streams: int, kwargs: dict, forced: list | None = None) -> dict:
    """One run with the parts timed (see the module's docstring)."""
    from simulmt.core.engine import Engine
    from simulmt.core.static_decoder import StaticDecoder

    runner, clock = tr.runner, Clock()
    gpu_ms: list = []
    inner = runner.forward_packed

    def forward(*a, **kw):
        if not CUDA:
            return inner(*a, **kw)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = inner(*a, **kw)
        end.record()
        queries, cache = a[0], a[1]
        gpu_ms.append((start, end, len(queries.ids), cache.capacity, cache.slot_count))
        return out
    runner.forward_packed = forward
    clock.wrap(runner, "forward_packed", "forward")
    clock.wrap(Engine, "step", "round")
    clock.wrap(StaticDecoder, "_fill", "fill")
    if CUDA:
        clock.wrap(torch.cuda.CUDAGraph, "replay", "replay")
    clock.wrap(runner, "head", "head")
    for name in ("tolist", "item", "cpu"):
        clock.wrap(torch.Tensor, name, "to host")
    from simulmt.core.learned_policy import PolicyHead

    clock.wrap(PolicyHead, "p_write", "policy head")  # (each call copies its rows' hidden states to the head's device,
    # the host's, and reads the result there: ``float()``/``.to()``, which "to host" does not count)
    recorded = runner.static.recorded if runner.static is not None else 0
    try:
        made, stats, sec = run_once(tr, sents, streams, kwargs, forced)
    finally:
        clock.undo()
        runner.forward_packed = inner
    forwards = stats.forwards
    row = {label: round(s * 1000 / forwards, 3) for label, s in clock.seconds.items()}
    row["graphs recorded"] = (runner.static.recorded if runner.static is not None else 0) - recorded
    row["to host calls/forward"] = round(clock.calls["to host"] / forwards, 1)
    row["policy head calls/forward"] = round(clock.calls["policy head"] / forwards, 2)
    if gpu_ms:
        row["gpu"] = round(sum(a.elapsed_time(b) for a, b, *_ in gpu_ms) / forwards, 3)
        shapes = defaultdict(list)  # (queries' bucket, keys, store slots) -> GPU ms of each forward
        from simulmt.core.static_decoder import bucket
        for a, b, n, keys, slots in gpu_ms:
            shapes[(bucket(n), keys, slots)].append(a.elapsed_time(b))
        row["by shape"] = {f"{r}x{k} ({s} slots)": f"{len(v)} x {sum(v) / len(v):.2f} ms"
                           for (r, k, s), v in sorted(shapes.items())}
    row["wall"] = round(sec * 1000 / forwards, 3)
    return row


def profiled(tr, sents, streams: int, kwargs: dict, top: int, forced: list | None = None) -> str:
    out = io.StringIO()
    prof = cProfile.Profile()
    prof.enable()
    _, stats, sec = run_once(tr, sents, streams, kwargs, forced)
    prof.disable()
    print(f"cProfile: {stats.forwards} forwards in {sec:.2f} s (profiled)", file=out)
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumtime").print_stats(top)
    return out.getvalue()


def api_counts(tr, sents, streams: int, kwargs: dict, forced: list | None = None) -> str:
    """The torch profiler over one run: CUDA API calls and the costliest host ops, per forward."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    with profile(activities=acts) as prof:
        _, stats, _ = run_once(tr, sents, streams, kwargs, forced)
    forwards = stats.forwards
    lines = [f"torch profiler: {forwards} forwards; calls per forward and host ms per forward (inflated)"]
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    for e in rows[:30]:
        ms = e.self_cpu_time_total / 1000 / forwards
        lines.append(f"  {e.key[:60]:60s} {e.count / forwards:9.1f} calls {ms:8.3f} ms")
    if CUDA:
        lines.append("GPU kernels, by device time: calls per forward, ms per forward")
        for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:25]:
            ms = e.self_device_time_total / 1000 / forwards
            lines.append(f"  {e.key[:90]:90s} {e.count / forwards:7.1f} {ms:8.3f}")
    for name in ("cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaStreamSynchronize",
                 "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent"):
        hit = [e for e in rows if e.key == name]
        if hit:
            lines.append(f"  {name}: {hit[0].count / forwards:.1f} per forward")
    return "\n".join(lines)


def ceiling_ms(model, rows: int, steps: int = 20) -> float:
    """Decoder + LM head on ``rows`` rows x 1 token, as one replayed CUDA graph (no cache)."""
    if not CUDA:
        return float("nan")
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    ids = torch.randint(100, 20000, (rows, 1), device="cuda")
    pos = torch.full((rows, 1), 40, device="cuda")

    def fwd():
        return head(decoder(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state[:, -1])

    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fwd()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fwd()
        for _ in range(3):
            g.replay()
        sync()
        t = time.perf_counter()
        for _ in range(steps):
            g.replay()
        sync()
    return (time.perf_counter() - t) * 1000 / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("assets")
    p.add_argument("--shapes", default="gemma-3-270m,gemma-3-4b")
    p.add_argument("--policy", choices=("wait-k", "learned"), default="wait-k",
                   help="learned: a random policy head on the last hidden state, tau 0.5 (its p(WRITE) for every row "
                        "of a forward at once: head_scores.py)")
    p.add_argument("--streams", default="16,64")
    p.add_argument("--waves", type=int, default=2, help="sentences = this x streams (the tail, when streams "
                   "finish and no sentence is left, weighs less the more waves)")
    p.add_argument("--profile", default="64", help="stream counts to profile (cProfile, torch profiler); '' none")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--warm", type=int, default=2, help="untimed runs first (graphs recorded, the store grown)")
    p.add_argument("--ceiling-rows", default="", help="also the ceiling at these row counts (e.g. 128,256)")
    p.add_argument("--out", default=None, help="folder for the full profiles")
    p.add_argument("--forced", default=None, help="translations of the source lines, one per line (ASSETS/hyp.de): "
                   "each stream is teacher-forced to its line's (real words, lengths and ends on random weights)")
    a = p.parse_args()
    a.ceiling_rows = [int(r) for r in a.ceiling_rows.split(",") if r]
    from transformers import AutoTokenizer

    from simulmt.translator import Translator

    assets, out = Path(a.assets), Path(a.out) if a.out else None
    tok_dir = Path("/tmp/gemma-tok")
    tok_dir.mkdir(exist_ok=True)
    for n in ("config.json", "tokenizer_config.json", "generation_config.json"):
        if (assets / n).is_file():
            shutil.copy(assets / n, tok_dir / n)
    (tok_dir / "tokenizer.json").write_bytes(lzma.decompress((assets / "tokenizer.json.xz").read_bytes()))
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    sources = [line.strip() for line in open(assets / "src.en")]
    targets = None
    if a.forced:  # line for line with src.en (``simulmt translate`` writes a line per line, blank ones too)
        targets = [line.strip() for line in open(a.forced)]
        if len(targets) != len(sources) or not all(t for s, t in zip(sources, targets) if s):
            raise SystemExit(f"--forced {a.forced}: a non-empty translation per non-empty line of src.en is needed "
                             f"({len(targets)} lines for {len(sources)})")
        targets = [t for s, t in zip(sources, targets) if s]
    lines = [s for s in sources if s]
    kwargs = dict(layout="expost", policy=a.policy, k=3)
    profile_at = {int(s) for s in a.profile.split(",") if s}
    table = []
    for shape in a.shapes.split(","):
        t = time.perf_counter()
        model = build(tok_dir, shape)
        print(f"\n== {shape}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params, built in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        head = None
        if a.policy == "learned":
            from simulmt.core.learned_policy import PolicyHead

            g = torch.Generator().manual_seed(0)
            hidden = model.config.get_text_config().hidden_size
            head = PolicyHead(torch.randn(2, hidden, generator=g) / hidden ** 0.5, torch.tensor([0.0, 0.5]))
        tr = Translator(model, tokenizer, source_lang="en", target_lang="de", policy_head=head)
        for streams in (int(s) for s in a.streams.split(",")):
            sents = (lines * a.waves)[: a.waves * streams]  # each stream translates ``waves`` sentences
            forced = None if targets is None else forced_targets(
                tr, sents, (targets * a.waves)[: a.waves * streams], kwargs["k"])
            for _ in range(a.warm):  # records the graphs (and grows the store to the capacity the run needs)
                run_once(tr, sents, streams, kwargs, forced)
            made, stats, sec = run_once(tr, sents, streams, kwargs, forced)
            toks = sum(len(s.target_tokens) for s in made)
            row = dict(shape=shape, streams=streams, tok_s=round(toks / sec, 1), forwards=stats.forwards,
                       tokens=toks, tokens_per_forward=round(toks / stats.forwards, 1),
                       queries_per_forward=round(stats.tokens / stats.forwards, 1),
                       full_rounds=stats.full_rounds[0],
                       tokens_per_full_round=round(stats.full_rounds[1] / max(1, stats.full_rounds[0]), 1),
                       tok_s_full=round(stats.full_rounds[1] / max(1e-9, stats.full_rounds[2]), 1),
                       ceiling_ms=round(ceiling_ms(model, streams), 3),
                       ceiling_ms_rows={r: round(ceiling_ms(model, r), 3) for r in a.ceiling_rows})
            if row["ceiling_ms"] == row["ceiling_ms"]:  # (a GPU: not NaN)
                ceiling_tok_s = streams * 1000 / row["ceiling_ms"]
                row["engine/ceiling"] = round(row["tok_s"] / ceiling_tok_s, 3)
                row["full/ceiling"] = round(row["tok_s_full"] / ceiling_tok_s, 3)
            row.update(parts(tr, sents, streams, kwargs, forced))
            print(json.dumps(row), flush=True)
            table.append(row)
            if streams in profile_at:
                text = (profiled(tr, sents, streams, kwargs, a.top, forced) + "\n"
                        + api_counts(tr, sents, streams, kwargs, forced))
                if out:
                    out.mkdir(parents=True, exist_ok=True)
                    (out / f"profile-{shape}-{streams}.txt").write_text(text)
                own = text.split("Ordered by: cumulative")[0].splitlines()
                print("\n".join(line[:150] for line in own if line.strip()), flush=True)  # by own time
                print(text.split("torch profiler")[1][:6000], flush=True)
        del tr, model
        gc.collect()  # (the runner and its static decoder refer to each other)
        if CUDA:
            torch.cuda.empty_cache()
    keys = ["shape", "streams", "tok_s", "tok_s_full", "engine/ceiling", "full/ceiling", "wall", "round", "forward", "fill", "replay", "head", "to host",
            "to host calls/forward", "policy head calls/forward", "gpu", "ceiling_ms", "graphs recorded", "tokens_per_forward",
            "tokens_per_full_round", "queries_per_forward"]
    print("\n" + " | ".join(keys))
    for r in table:
        print(" | ".join(str(r.get(k, "-")) for k in keys))


if __name__ == "__main__":
    main()
