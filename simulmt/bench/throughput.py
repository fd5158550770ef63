"""Many streams on one model: throughput, per-stream latency and memory against the number of streams.

``simulmt bench --streams 1,4,16`` translates the same sentences once per stream count, with that many streams
advanced together by the engine (new sentences join as others finish), and reports in one run:

* aggregate target tokens per second (all streams together), and its ratio to 1 stream;
* per-stream milliseconds per target word: the gaps between a stream's consecutive words (the first word counts
  from the stream's start), p50 and p95 over all words;
* the peak memory of the batched KV cache;
* the same throughput over the rounds in which every stream was live: a run drains at its end (the last sentences
  finish one by one, and a forward of a few rows costs nearly what a full one does), where a loaded service and
  the plain loop below keep every row busy;
* what the engine computes per target token: tokens (prompt, source, markers, target, guesses) and rows of the LM
  head (each target token needs one, a word's end and a read one more): the plain loop computes one of each, so
  they bound the engine's ratio to it on a device where the model's products are the cost (docs/engine-speed.md);
* the same stream counts for a plain batched greedy decode loop (``plain_decode``: a Hugging Face
  ``DynamicCache``, every row one token per step, no policy, no masks), so that the engine's own overhead is
  visible next to what batching gives the model alone on this machine.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from simulmt.core.engine import Engine, run_batched


@dataclass(frozen=True)
class StreamsPoint:
    streams: int
    sentences: int
    seconds: float
    target_tokens: int
    target_words: int
    forwards: int
    ms_per_word_p50: float
    ms_per_word_p95: float
    cache_peak_mb: float
    tokens_computed: int = 0  # tokens the engine computed (prompt, source, markers, target, guesses)
    logit_rows: int = 0  # rows of the LM head it computed
    plain_tokens_per_s: float | None = None
    full_rounds: int = 0  # rounds in which every stream was live (before the drain at the end)
    full_target_tokens: int = 0  # target tokens those rounds wrote
    full_seconds: float = 0.0  # and their time

    @property
    def tokens_per_s(self) -> float:
        return self.target_tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s_full(self) -> float:
        return self.full_target_tokens / self.full_seconds if self.full_seconds else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "tokens_per_s": self.tokens_per_s, "tokens_per_s_full": self.tokens_per_s_full}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def pushed_streams(translator, sentences: list[str], session_kwargs: dict) -> list:
    """A stream per sentence, its whole source pushed."""
    made = []
    for text in sentences:
        stream = translator.new_stream(**session_kwargs)
        stream.push(text.split(), finished=True)
        made.append(stream)
    return made


def count_full_rounds(engine: Engine, streams: int) -> list:
    """Count, from now on, the rounds of ``engine`` in which ``streams`` streams are live: [rounds, target tokens
    they wrote, their seconds] (a list that fills as the engine runs). A step accepts the tokens of the forward
    before it, so the count lags by one forward (about 1 / rounds)."""
    full = [0, 0, 0.0]
    step, live, device = engine.step, engine.streams, engine.runner.device  # (``streams``: changed in place)

    def counted():
        if len(live) < streams:
            return step()
        rows = list(live)
        before, begun = sum(len(s.target_tokens) for s in rows), time.perf_counter()
        events = step()
        _synchronize(device)
        full[0] += 1
        full[1] += sum(len(s.target_tokens) for s in rows) - before
        full[2] += time.perf_counter() - begun
        return events
    engine.step = counted
    return full


def measure(translator, sentences: list[str], streams: int, session_kwargs: dict) -> StreamsPoint:
    """Translate ``sentences`` with ``streams`` streams at a time; time it all."""
    made = pushed_streams(translator, sentences, session_kwargs)
    engine = Engine(translator.runner)
    full = count_full_rounds(engine, streams)  # rounds with every stream live (before the drain at the end)
    start = time.perf_counter()
    run_batched(made, engine, streams)
    seconds = time.perf_counter() - start
    gaps = []
    for stream in made:
        previous = 0.0
        for word in stream.written:
            gaps.append(word.elapsed_ms - previous)
            previous = word.elapsed_ms
    return StreamsPoint(
        streams=streams, sentences=len(sentences), seconds=seconds,
        target_tokens=sum(len(s.target_tokens) for s in made), target_words=sum(len(s.written) for s in made),
        forwards=engine.stats.forwards, ms_per_word_p50=_percentile(gaps, 50), ms_per_word_p95=_percentile(gaps, 95),
        cache_peak_mb=engine.stats.peak_cache_bytes / 2**20, tokens_computed=engine.stats.tokens,
        logit_rows=engine.stats.logit_rows, full_rounds=full[0], full_target_tokens=full[1], full_seconds=full[2])


@torch.no_grad()
def plain_decode(model, batch: int, steps: int = 16, context: int = 32, seed: int = 0, head=None) -> float:
    """Aggregate tokens/s of a plain batched greedy decode: random prompts of ``context`` tokens, then 2 x ``steps``
    single-token steps for every row, of which the second ``steps`` are timed (a GPU loads its kernels and picks its
    matrix algorithms at a shape's first use, and timing from the first step counted that), so the timed steps
    attend over ``context + steps`` to ``context + 2 * steps`` keys; a CUDA device is synchronised around them.
    ``head``: the engine's LM head when it is not the model's own (a head vocabulary: the same head for both)."""
    from transformers import DynamicCache

    from simulmt.core.runner import cache_argument

    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(100, min(vocab, 20000), (batch, context), generator=generator).to(device)
    cache = DynamicCache()
    last, first = torch.tensor([context - 1], device=device), torch.tensor([0], device=device)
    cache_arg = cache_argument(model)
    decoder = model.get_decoder() if head is not None else None

    def step(tokens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        if decoder is None:
            out = model(input_ids=tokens, use_cache=True, logits_to_keep=keep, **{cache_arg: cache})
            return out.logits[:, -1].argmax(-1, keepdim=True)
        hidden = decoder(input_ids=tokens, use_cache=True, **{cache_argument(decoder): cache}).last_hidden_state
        return head(hidden[:, -1]).argmax(-1, keepdim=True)

    token = step(ids, last)

    def seconds() -> float:
        nonlocal token
        _synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            token = step(token, first)
        _synchronize(device)  # the GPU's queue, not only the launches
        return time.perf_counter() - start

    seconds()  # untimed
    return batch * steps / seconds()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_all(translator, sentences: list[str], counts: list[int], session_kwargs: dict, *,
                plain: bool = True, progress=None) -> list[StreamsPoint]:
    translator.translate_many(sentences[:2], batch_size=2, **session_kwargs)  # warm-up: nothing below is cold
    static = translator.runner.static
    replays = static is not None and static.graphs
    points = []
    for count in counts:
        for _ in range(3 if replays else 0):  # a CUDA graph is recorded at its shape's first forward (tens of ms
            recorded = static.recorded  # each) and again when the cache's store grows: untimed runs until one
            measure(translator, sentences, count, session_kwargs)  # records nothing, so the timed run replays
            if static.recorded == recorded:
                break
        point = measure(translator, sentences, count, session_kwargs)
        if plain:
            point = StreamsPoint(**{**asdict(point), "plain_tokens_per_s": plain_decode(translator.model, count,
                                                                                 head=translator.runner.shortlist)})
        points.append(point)
        if progress is not None:
            progress(point)
    return points


def report_rows(points: list[StreamsPoint]) -> tuple[list[str], list[list[str]]]:
    """Markdown table: every figure with its ratio to the first stream count (normally 1)."""
    base = points[0]
    header = ["streams", "target tok/s", f"x {base.streams} stream", "ms/word p50", "ms/word p95",
              "KV cache peak MB", "tokens / target token", "LM head rows / target token", "plain loop tok/s",
              f"plain x {base.streams}", "engine / plain", "every stream live: tok/s", "/ plain"]
    rows = []
    for p in points:
        ratio = p.tokens_per_s / base.tokens_per_s if base.tokens_per_s else 0.0
        plain = f"{p.plain_tokens_per_s:.1f}" if p.plain_tokens_per_s else "-"
        plain_ratio = (f"{p.plain_tokens_per_s / base.plain_tokens_per_s:.2f}"
                       if p.plain_tokens_per_s and base.plain_tokens_per_s else "-")
        versus = f"{p.tokens_per_s / p.plain_tokens_per_s:.2f}" if p.plain_tokens_per_s else "-"
        per = max(1, p.target_tokens)
        full = f"{p.tokens_per_s_full:.2f}" if p.full_rounds else "-"
        full_versus = (f"{p.tokens_per_s_full / p.plain_tokens_per_s:.2f}"
                       if p.full_rounds and p.plain_tokens_per_s else "-")
        rows.append([str(p.streams), f"{p.tokens_per_s:.2f}", f"{ratio:.2f}", f"{p.ms_per_word_p50:.0f}",
                     f"{p.ms_per_word_p95:.0f}", f"{p.cache_peak_mb:.1f}", f"{p.tokens_computed / per:.2f}",
                     f"{p.logit_rows / per:.2f}", plain, plain_ratio, versus, full, full_versus])
    return header, rows


def markdown(points: list[StreamsPoint]) -> str:
    header, rows = report_rows(points)
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
