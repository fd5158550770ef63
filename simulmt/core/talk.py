"""A talk: a whole talk as one stream on one cache row, its sentences in turn, earlier pairs kept as context.

A talk's source never finishes per sentence: words arrive (``push``) and the talk cuts them into sentences itself,
with the rule of sentence_ends.py and a bound of ``max_words`` words where no end comes (a recogniser without
punctuation). A word goes to the current sentence as soon as it arrives; whether it ended the sentence is known
when the next word comes (which then waits for the next sentence). Each sentence is decoded as a
``Stream`` sentence is (same layout, policy and rules); when it is done, the next one starts on the same cache
row, after a prompt that holds the instruction and the last finished pairs (the context)::

    sentence 1:  [prompt] s1 s1 s1 ... t1 t1 t1
    sentence 2:  [prompt  s1 t1]  s2 s2 ... t2 t2               context: pair 1, as a finished turn
    sentence 3:  [prompt  s1 t1  s2 t2]  s3 s3 ... t3
    sentence 4:  [prompt  s3 t3]  s4 ...                         the window overflowed: oldest pairs dropped

The context is a prompt like any other: the layout places it as prompt tokens (position 0 on), so parity and the
visibility rule are those of a stream whose prompt holds it, and training with context is a training example with
that prompt (``Talk.context_format``). The cache row is never emptied: the next sentence's list is compared with
what the row holds, as at every step of a stream (``Stream.fed``), and the common prefix is kept: the prompt and
context of the sentence before. So a sentence computes the newest pair (as context: its tokens were placed with
the roles of a sentence, which the visibility rule reads) and its own tokens. When the window overflows, the oldest
pairs go until half the window is left (``ContextWindow``), and the context is computed again once, not at every
sentence. Positions restart at 0 with every prompt, so a talk of hours never runs past the model's context, and
the cache row holds at most the window plus one sentence.

Delays are counted on the talk's clock: a word's delay is the source words of the talk read when it was written,
its ``elapsed`` the time since the talk began. ``result()`` is the talk's ``Translation`` (its sentences merged).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from simulmt.core.decoding import DecodeConfig, Vocabulary
from simulmt.core.layouts.base import Layout
from simulmt.core.policies import Policy
from simulmt.core.prompt_format import PromptFormat
from simulmt.core.requests import Status, Step
from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS, ends_sentence
from simulmt.core.stream import Stream
from simulmt.core.translation import Translation, WrittenWord, merge_translations
from simulmt.errors import SimulmtError

CUT = object()  # in a talk's queue: the sentence ends here (``Talk.cut``)


@dataclass(frozen=True)
class ContextWindow:
    """Which earlier sentence pairs a sentence sees: at most ``pairs`` of them and ``tokens`` tokens (their source,
    target and markers). When a finished pair makes the window overflow, the oldest pairs go until at most half of
    each bound is left (``(pairs + 1) // 2`` pairs, ``tokens // 2`` tokens): the context changes, and is computed
    again, once every few sentences. ``pairs=0``: no context (each sentence alone, still one stream)."""

    pairs: int = 0  # (no context by default: the shipped adapters were trained without it)
    tokens: int = 384

    def __post_init__(self):
        if self.pairs < 0 or self.tokens < 0:
            raise SimulmtError(f"a context window takes at least 0 pairs and 0 tokens, got {self.pairs} and "
                               f"{self.tokens}")

    def evict(self, lengths: list[int]) -> int:
        """How many of the oldest pairs to drop from a window of pairs of these token ``lengths``, oldest first."""
        if self.pairs == 0 or self.tokens == 0:
            return len(lengths)
        if len(lengths) <= self.pairs and sum(lengths) <= self.tokens:
            return 0
        drop, total = 0, sum(lengths)
        while drop < len(lengths) and (len(lengths) - drop > (self.pairs + 1) // 2 or total > self.tokens // 2):
            total -= lengths[drop]
            drop += 1
        return drop

    def describe(self) -> str:
        return "no context" if self.pairs == 0 or self.tokens == 0 else f"{self.pairs} pairs / {self.tokens} tokens"


def context_prompts(layout: Layout, fmt: PromptFormat, pairs: list[tuple[tuple[int, ...], tuple[int, ...]]],
                    window: ContextWindow) -> list[tuple[int, ...]]:
    """The context each sentence of a document sees, by the talk's rule, given every pair (source ids, target ids)
    in order: the ids appended to the prompt for sentence i (training with context uses this; a talk gets the
    same from its own output as it goes)."""
    rendered = [layout.context_ids(fmt, s, t) for s, t in pairs]
    out, start = [], 0
    for i in range(len(pairs)):
        out.append(tuple(t for pair in rendered[start:i] for t in pair))
        start += window.evict([len(p) for p in rendered[start:i + 1]])
    return out


class Talk(Stream):
    """A whole talk as one stream (see the module docstring). ``push`` words as they come (``finished``: the talk
    is over); ``step`` as for a stream; ``result()`` once it is done."""

    def __init__(self, tokenizer, fmt: PromptFormat, layout: Layout, policy: Policy, vocabulary: Vocabulary,
                 config: DecodeConfig = DecodeConfig(), *, window: ContextWindow = ContextWindow(),
                 max_words: int = DEFAULT_MAX_WORDS, **kwargs):
        if kwargs.get("forced") is not None:
            raise SimulmtError("a talk is decoded, not teacher-forced: force a sentence stream with its context "
                               "prompt instead")
        if max_words < 1:
            raise SimulmtError(f"max_words must be at least 1, got {max_words}")
        super().__init__(tokenizer, fmt, layout, policy, vocabulary, config, **kwargs)
        self.talk_format, self.window, self.max_words = fmt, window, max_words
        self.queue: deque[tuple[str, int]] = deque()  # (word, arrival) pushed but not yet given to a sentence
        self.talk_finished = False
        self.talk_arrivals = 0
        self.context: deque[tuple[int, ...]] = deque()  # the window's pairs, oldest first (``context_ids``)
        self.sentences: list[Translation] = []  # each finished sentence's translation (its own delays)
        self.keep = True  # keep them (``result``); False: a service's talk of hours keeps none (``on_sentence``)
        self.source_before = self.words_before = 0  # source words and target words of the finished sentences
        self.target_tokens_before = 0  # target tokens of the finished sentences
        self.sentences_closed = False  # the last sentence is done and counted
        self.recorded: list = []  # with ``record``: (prompt format, source ids, target ids, proposals) per sentence
        self.on_sentence: Callable[[Translation], None] | None = None  # sees each sentence's translation when done

    # ---- the source side -------------------------------------------------------------------------------------
    def push(self, words: list[str], finished: bool = False, arrivals: list[int] | None = None) -> None:
        """More words of the talk arrived (``finished``: the talk is over). ``arrivals`` as for a stream."""
        if self.talk_finished:
            raise SimulmtError("this talk has already finished")
        if arrivals is not None and len(arrivals) != len(words):
            raise SimulmtError(f"arrivals must number each of the {len(words)} words; got {arrivals}")
        for i, word in enumerate(words):  # checked now: a bad word is refused alone, not when its sentence starts
            try:
                word.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise SimulmtError(f"word {i + 1} of the words pushed is not valid text ({exc.reason}); read the "
                                   f"input as UTF-8") from None
        if arrivals is None:
            arrivals = [self.talk_arrivals] * len(words)
        if arrivals:
            self.talk_arrivals = arrivals[-1] + 1
        self.queue.extend(zip(words, arrivals))
        self.talk_finished = finished
        self._route()

    def cut(self) -> None:
        """The sentence ends after the words pushed so far (a speaker's pause, a client's boundary); nothing if
        it has none."""
        if self.talk_finished:
            raise SimulmtError("this talk has already finished")
        self.queue.append((CUT, self.talk_arrivals))
        self._route()

    def push_embedded(self, *args, **kwargs) -> None:
        raise SimulmtError("a talk takes words (a recogniser's transcript); embedded speech units are decoded "
                           "per utterance")

    def _route(self) -> None:
        """Give the current sentence the queued words that belong to it, at once; close it when the next word
        says it has ended (or at ``max_words``, or at the talk's end)."""
        if self.stream_finished:
            return  # the sentence has all its words: the rest waits for the next one
        take, ends = [], False
        while self.queue:
            word = self.queue[0][0]
            if word is CUT:
                self.queue.popleft()
                if take or self.source_words:
                    ends = True
                    break
                continue
            before = take[-1][0] if take else (self.source_words[-1] if self.source_words else None)
            if before is not None and ends_sentence(before, word):
                ends = True  # the word begins the next sentence
                break
            take.append(self.queue.popleft())
            if len(self.source_words) + len(take) >= self.max_words:
                ends = True
                break
        ends = ends or (self.talk_finished and not self.queue)
        if take or ends:
            Stream.push(self, [w for w, _ in take], finished=ends, arrivals=[a for _, a in take] or None)

    # ---- the loop --------------------------------------------------------------------------------------------
    def step(self) -> Step:
        """As a stream's, over the whole talk. A sentence that fails (a ``SimulmtError``: too long for the model's
        context, ...) is recorded with its error and no target words, and the next one starts all the same."""
        words: list[WrittenWord] = []
        if self.done_talk and self.sentences_closed:
            return Step([], Status.DONE, None)  # (stepped again after its end: nothing more)
        while True:
            try:
                step = super().step()
            except SimulmtError as exc:
                self.error, self.done = exc, True
                self._finish_source()
                step = Step([], Status.DONE, None)
            words += [replace(w, index=w.index + self.words_before, delay=w.delay + self.source_before)
                      for w in step.words]
            if step.status is not Status.DONE:
                return Step(words, step.status, step.request)
            last = self.talk_finished and not self._words_waiting()
            self._next_sentence(last)
            if last:
                self.sentences_closed = True
                return Step(words, Status.DONE, None)

    def _finish_source(self) -> None:
        """A failed sentence takes the rest of its words (up to its end) before the next one starts."""
        while not self.stream_finished and (self.queue or self.talk_finished):
            self._route()
            if not self.stream_finished and not self.queue and not self.talk_finished:
                break

    def _next_sentence(self, last: bool) -> None:
        """The sentence is done: keep its translation and its pair, and (unless it was the last) start the next
        one on the same cache row, after the context."""
        part = super().result()
        empty = not self.source_words and not self.written and part.error is None  # (a talk that ended after a
        # cut, or said nothing: no sentence)
        if self.keep and not empty:
            self.sentences.append(part)
        if self.record:  # (parity tests: each sentence's prompt, pair and proposals)
            self.recorded.append((self.fmt, tuple(t for unit in self.units for t in unit), tuple(self.target_tokens),
                                  self.proposals))
        self.source_before += part.source_length
        self.words_before += len(self.written)
        self.target_tokens_before += len(self.target_tokens)
        if self.on_sentence is not None and not empty:  # (its words are numbered below ``words_before`` now)
            self.on_sentence(part)
        if last:
            return
        if part.error is None:  # (a failed sentence is not context)
            source = tuple(t for unit in self.units for t in unit)
            self.context.append(self.layout.context_ids(self.talk_format, source, tuple(self.target_tokens)))
        for _ in range(self.window.evict([len(p) for p in self.context])):
            self.context.popleft()
        fed, guessed, t0, move, drop = self.fed, self.guessed, self.t0, self.move, self.drop
        self._begin(self.context_format())
        self.fed, self.t0 = fed[:len(fed) - guessed], t0  # the row holds these (a guess at the end is not kept)
        self.move, self.drop = move, drop  # (what the row still owes ``fed``: the next forward makes it)
        self._route()

    def context_format(self) -> PromptFormat:
        """The talk's prompt format with the current context after its prompt."""
        return replace(self.talk_format, prompt=self.talk_format.prompt + tuple(t for p in self.context for t in p))

    def _words_waiting(self) -> bool:
        return any(word is not CUT for word, _ in self.queue)

    @property
    def done_talk(self) -> bool:
        return self.done and self.talk_finished and not self._words_waiting()

    def result(self) -> Translation:
        """The talk's translation so far: its finished sentences, and the current one if it has written words."""
        parts = list(self.sentences)
        if not self.done_talk and (self.written or self.source_words):
            parts.append(super().result())
        if not parts:
            return super().result()
        return merge_translations(parts, shared_clock=True)
