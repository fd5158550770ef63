"""The streaming session: one sentence translated while its source arrives, greedy, word by word.

Loop (the policy decides, the layout places, the session feeds the model)::

    at a word boundary: policy(state) -> READ  -> layout.read(next unit)          (or wait for more source)
                                      -> WRITE -> layout.open_target; feed what the cache lacks; propose a token
    proposal starts a new word -> the current word is complete: commit it, ask the policy again;
    (or is an end token)          on READ the proposal is dropped and made again after the read
    end token at a boundary    -> end of the sentence (source finished) or of the segment (read-n)
    otherwise                  -> layout.write(token): the token joins the current word

Feeding is lazy and generic: before a proposal the session compares the layout's placed list with the list the
KV cache holds, crops the cache to their common prefix and feeds the rest (one forward, logits of the last token
only). For ``expost`` this is the one-token rollback at word boundaries; for ``prefix`` it is the recompute of
the new source and the whole target prefix. The session keeps honest counts: tokens fed, FLOPs, forward calls,
cache crops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

from simulmt.errors import SimulmtError
from simulmt.layouts.base import Layout
from simulmt.placed import PlacedToken, common_prefix_length
from simulmt.policies import Action, Policy, StreamState
from simulmt.prompt_format import PromptFormat, source_units
from simulmt.runner import ModelRunner, crop_cache, new_cache


@dataclass(frozen=True)
class DecodeConfig:
    """Bounds of greedy decoding. Every bound reached acts as an end token proposed by the model: the end of the
    sentence once the source is finished, a READ before (under a policy that lets the model end segments)."""

    max_len_a: float = 2.0  # after the source ends: at most a * |X| + b target words
    max_len_b: int = 10
    max_tokens_per_word: int = 24  # a word that never ends is cut here
    max_tokens_a: float = 2.0  # at any time: at most a * (source tokens read) + b target tokens
    max_tokens_b: int = 16
    no_repeat_ngram: int = 4  # a token that would repeat an n-token sequence of the sentence ends instead (0: off)

    def __post_init__(self):
        if (self.max_len_a < 0 or self.max_len_b < 1 or self.max_tokens_per_word < 1 or self.max_tokens_a < 0
                or self.max_tokens_b < 1 or self.no_repeat_ngram < 0 or self.no_repeat_ngram == 1):
            raise SimulmtError(f"invalid decoding bounds: {self}")

    def max_target_tokens(self, source_tokens_read: int) -> int:
        return int(self.max_tokens_a * source_tokens_read) + self.max_tokens_b


def repeated_ngram_bans(tokens: list[int], n: int) -> set[int]:
    """Tokens that would complete an n-gram already in ``tokens`` (Hugging Face's ``no_repeat_ngram_size``)."""
    if n < 2 or len(tokens) < n:
        return set()
    tail = tokens[len(tokens) - n + 1:]
    return {tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tokens[i:i + n - 1] == tail}


@dataclass(frozen=True)
class WrittenWord:
    index: int  # 0-based target word index
    text: str
    tokens: tuple[int, ...]
    delay: int  # source units read when the word was written
    elapsed_ms: float  # wall time since the session started


@dataclass(frozen=True)
class Proposal:
    """A recorded proposal (for parity tests): the placed tokens in the cache, the logits of the last one."""

    context: tuple[PlacedToken, ...]
    logits: torch.Tensor
    token: int


@dataclass
class Translation:
    source: str
    prediction: str
    delays: list[int]
    elapsed: list[float]  # ms since the start, per target word
    tokens_fed: int
    flops: float
    layout: str
    policy: str
    slot: int | None
    model: str = ""
    source_length: int = 0
    forward_calls: int = 0
    cache_crops: int = 0
    refed_tokens: int = 0
    wall_ms: float = 0.0
    error: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


class StreamingSession:
    def __init__(self, runner: ModelRunner, tokenizer, fmt: PromptFormat, layout: Layout, policy: Policy,
                 word_starts: torch.Tensor, config: DecodeConfig = DecodeConfig(), *,
                 forced: list[tuple[int, int]] | None = None, record: bool = False, model_name: str = "",
                 banned: torch.Tensor | None = None):
        self.runner, self.tokenizer, self.fmt = runner, tokenizer, fmt
        self.layout, self.policy, self.config = layout, policy, config
        self.word_starts = word_starts
        self.forced = forced  # teacher forcing: (token id, target word index) per target token, then the end
        self.record = record
        self.model_name = model_name
        self.state = layout.start(fmt)
        self.cache = new_cache()
        self.fed: list[PlacedToken] = []  # what the KV cache holds, in order
        self.last_logits: torch.Tensor | None = None
        self.source_words: list[str] = []
        self.units: list[tuple[int, ...]] = []
        self.stream_finished = False
        self.written: list[WrittenWord] = []
        self.current: list[int] = []  # tokens of the word being written
        self.current_delay = 0
        self.held: int | None = None  # a proposal not yet acted on
        self.accepted = 0  # target tokens accepted (index into ``forced``)
        self.target_tokens: list[int] = []  # every target token accepted, in order
        self.segment_reads = self.segment_words = 0
        self.model_ended_segment = False
        self.done = False
        self.tokens_fed = self.forward_calls = self.cache_crops = self.refed_tokens = 0
        self.flops = 0.0
        self.proposals: list[Proposal] = []
        self.t0: float | None = None
        stops = torch.zeros_like(word_starts)
        stops[[i for i in fmt.stop_ids if i < len(stops)]] = True
        self.stops = stops
        # never proposed: special tokens that are not end tokens (e.g. <start_of_image>, markup)
        self.banned = (banned & ~stops) if banned is not None else torch.zeros_like(stops)

    # ---- the source side -------------------------------------------------------------------------------------
    def push(self, words: list[str], finished: bool = False) -> None:
        """More source words arrived (``finished``: none will follow)."""
        if self.stream_finished:
            raise SimulmtError("the source of this session has already finished")
        if self.t0 is None:
            self.t0 = time.perf_counter()
        self.units += source_units(self.tokenizer, self.fmt, words, first_index=len(self.source_words))
        self.source_words += words
        self.stream_finished = finished

    @property
    def source_finished(self) -> bool:
        return self.stream_finished and self.state.units_read == len(self.units)

    def stream_state(self) -> StreamState:
        return StreamState(self.state.units_read, self.source_finished, len(self.written), self.segment_reads,
                           self.segment_words, self.model_ended_segment)

    # ---- the loop --------------------------------------------------------------------------------------------
    def advance(self) -> Iterator[WrittenWord]:
        """Act until the sentence is done or more source is needed; yields each word as it is written."""
        while not self.done:
            if not self.current:  # a word boundary: the policy decides
                if self.policy.decide(self.stream_state()) is Action.READ:
                    if self.state.units_read < len(self.units):
                        self._read()
                        continue
                    if not self.stream_finished:
                        return  # wait for more source
                    raise SimulmtError(f"policy {self.policy.describe()} asked to read past the end of the source")
            if self.held is None:
                if self._at_token_bound():  # as if the model proposed the end
                    self.held = self.fmt.end_id
                else:
                    self.layout.open_target(self.state)
                    self.held = self._propose(self._sync())
            token = self.held
            if self.current and (self._is_end(token) or self._starts_word(token)):
                yield from self._commit()  # the word is complete; the policy decides before the proposal is used
                continue
            if self._is_end(token):
                if self.source_finished:
                    self.done = True
                elif self.policy.lets_model_end_segment:
                    self.model_ended_segment, self.held = True, None  # the policy will read
                else:
                    raise SimulmtError(f"an end token was forced before the source finished, under "
                                       f"{self.policy.describe()} which does not let the model end segments")
                continue
            self._accept(token)
            if len(self.current) >= self.config.max_tokens_per_word:
                yield from self._commit()
            if self.source_finished and len(self.written) + bool(self.current) >= self._max_words():
                yield from self._commit()
                self.done = True

    def run(self, text: str) -> Translation:
        """Translate a complete sentence as a simulated stream."""
        for _ in self.stream(text):
            pass
        return self.result()

    def stream(self, text: str) -> Iterator[WrittenWord]:
        words = text.split()
        self.push(words, finished=True)
        if not words:  # an empty line: an empty translation, no model call
            self.done = True
            return
        yield from self.advance()

    # ---- steps -----------------------------------------------------------------------------------------------
    def _read(self) -> None:
        self.layout.read(self.state, self.units[self.state.units_read])
        self.held = None
        self.segment_reads += 1
        self.segment_words = 0
        self.model_ended_segment = False

    def _accept(self, token: int) -> None:
        if not self.current:
            self.current_delay = self.state.units_read
            self.segment_reads = 0
        self.layout.write(self.state, token, len(self.written))
        self.current.append(token)
        self.target_tokens.append(token)
        self.accepted += 1
        self.held = None

    def _commit(self) -> Iterator[WrittenWord]:
        if not self.current:
            return
        text = self.tokenizer.decode(self.current, skip_special_tokens=True).strip()
        tokens, self.current = tuple(self.current), []
        if not text:  # e.g. a lone space token: it stays in the target text but is not a word of its own
            return
        elapsed = (time.perf_counter() - self.t0) * 1000.0
        word = WrittenWord(len(self.written), text, tokens, self.current_delay, elapsed)
        self.written.append(word)
        self.segment_words += 1
        yield word

    def _at_token_bound(self) -> bool:
        if self.forced is not None:
            return False
        return len(self.target_tokens) >= self.config.max_target_tokens(self.state.source_tokens)

    def _max_words(self) -> int:
        return int(self.config.max_len_a * len(self.units)) + self.config.max_len_b

    def _is_end(self, token: int) -> bool:
        return token < len(self.stops) and bool(self.stops[token])

    def _starts_word(self, token: int) -> bool:
        if self.forced is not None:  # teacher forcing: the word index says where words start
            return self.forced[self.accepted][1] != len(self.written)
        return token < len(self.word_starts) and bool(self.word_starts[token])

    def _propose(self, logits: torch.Tensor) -> int:
        if self.forced is not None:
            if self.accepted >= len(self.forced):
                raise SimulmtError("teacher forcing ran past the forced target")
            token = self.forced[self.accepted][0]
        else:
            scores = logits.clone()
            n = min(len(scores), len(self.word_starts))
            scores[:n][self.banned[:n]] = float("-inf")
            if not self.source_finished and not self.policy.lets_model_end_segment:
                scores[:n][self.stops[:n]] = float("-inf")
            if not self.current and self.written and self.layout.continues_text(self.state):
                # the previous word is complete: the next token must start a new word (or end)
                scores[:n][~(self.word_starts[:n] | self.stops[:n])] = float("-inf")
                scores[n:] = float("-inf")
            token = int(torch.argmax(scores))
            if token in repeated_ngram_bans(self.target_tokens, self.config.no_repeat_ngram):
                # the model wants to repeat itself: it has nothing new to say, which is an end proposal
                # (a READ before the source is finished); where the policy forbids that, its next best token
                end_allowed = self.source_finished or self.policy.lets_model_end_segment
                token = self.fmt.end_id if end_allowed else self._next_best(scores)
        if self.record:
            self.proposals.append(Proposal(tuple(self.fed), logits, token))
        return token

    def _next_best(self, scores: torch.Tensor) -> int:
        scores = scores.clone()
        scores[list(repeated_ngram_bans(self.target_tokens, self.config.no_repeat_ngram))] = float("-inf")
        return int(torch.argmax(scores))

    def _sync(self) -> torch.Tensor:
        """Make the KV cache hold the layout's placed list; return the logits of its last token."""
        target = self.state.tokens
        keep = common_prefix_length(self.fed, target)
        if keep == len(target) == len(self.fed) and self.last_logits is not None:
            return self.last_logits
        keep = min(keep, len(target) - 1)  # at least the last token is fed: its logits are needed
        if keep < len(self.fed):
            dropped = set(self.fed[keep:])
            crop_cache(self.cache, keep)
            self.cache_crops += 1
            self.refed_tokens += sum(t in dropped for t in target[keep:])
        new = target[keep:]
        visible = self.layout.visibility.matrix(target, keep)
        logits, flops = self.runner.forward([t.token_id for t in new], [t.position for t in new], visible, keep,
                                            self.cache, logits_to_keep=1)
        self.fed = list(target)
        self.last_logits = logits[-1]
        self.tokens_fed += len(new)
        self.forward_calls += 1
        self.flops += flops
        return self.last_logits

    # ---- the result ------------------------------------------------------------------------------------------
    def result(self) -> Translation:
        words, delays, elapsed = [], [], []
        for w in self.written:
            for piece in w.text.split():  # a token group may decode to several words (or none)
                words.append(piece)
                delays.append(w.delay)
                elapsed.append(round(w.elapsed_ms, 3))
        wall = (time.perf_counter() - self.t0) * 1000.0 if self.t0 is not None else 0.0
        return Translation(
            source=" ".join(self.source_words), prediction=" ".join(words), delays=delays, elapsed=elapsed,
            tokens_fed=self.tokens_fed, flops=self.flops, layout=self.layout.describe(),
            policy=self.policy.describe(), slot=getattr(self.layout, "slot", None), model=self.model_name,
            source_length=len(self.source_words), forward_calls=self.forward_calls, cache_crops=self.cache_crops,
            refed_tokens=self.refed_tokens, wall_ms=round(wall, 3))


