"""A stream: one sentence translated while its source arrives. Model-free: it says what it needs, the engine acts.

The stream owns the layout state, the policy, the sampler and the decoding state, but no model and no cache. Its
``step()`` runs the decoding loop until it needs something from outside and says what:

* ``NEEDS_MODEL`` with a ``ForwardRequest``: "keep the first ``keep`` of my cached tokens, feed these placed
  tokens after them, and give me the logits (and the hidden state) of the last one" -> ``receive(logits, hidden)``;
  (a learned policy, ``wants_features``, also gets the hidden state it decides on this way: what was read is fed
  before it is asked);
* ``NEEDS_SOURCE``: the policy wants to read and no source word is waiting -> ``push(words)``;
* ``DONE``: the sentence is finished -> ``result()``.

The loop (the policy decides, the layout places, the sampler chooses)::

    at a word boundary: policy(state) -> READ  -> layout.read(next unit)          (or wait for more source)
                                      -> WRITE -> layout.open_target; ask for the logits; propose a token
    proposal starts a new word -> the current word is complete: commit it, ask the policy again;
    (or is an end token)          on READ the proposal is dropped and made again after the read
    end token at a boundary    -> end of the sentence (source finished), or a READ (the model has said all
                                  it can from what it read; wait-k and read-n let it)
    otherwise                  -> layout.write(token): the token joins the current word

What to feed is generic: the stream compares the layout's placed list with the list its cache row holds and asks
to keep their common prefix and feed the rest. For ``expost`` this is the one-token rollback at word boundaries;
for ``prefix`` the recompute of the new source and the whole target prefix. The stream keeps honest counts:
tokens fed, FLOPs, forward calls, cache crops, re-fed tokens, guessed tokens.

Guesses (speculative decoding with a free draft). A READ between two target words costs a forward that offline
decoding does not have: the new source must be fed before the next proposal. The stream makes that forward also
feed its guess of what comes next, placed as the layout would place it, and asks for the answers at those tokens
too: after a READ, the target token the model wanted to write before it (or its best token that is not an end,
when it ended its segment); with a learned policy, whose hidden state after a read is fed in a forward of its own,
also the opener a WRITE would place. A guess the layout then places is in the cache already and its answer is at
hand (no forward); a wrong one is dropped from the cache row at the next forward (not a crop of the layout's
list). The output is exactly the same either way (``Stream.speculate = False``: tests/test_speculation.py).

Read-ahead (``Stream.read_ahead``): when the source a READ would read is here already (text given whole, or words
that came in the speech block of the last word read), the READ need not wait for the next proposal to be fed. The
forward of a word's token then also feeds, as a guess, what the layout would place if the word ended there and a
policy that decides on counts (wait-k, read-n) read until it writes: the READ's closing token, the units, the next
opener. If the word ends there, the answer at the opener is at hand after the read (one forward instead of two); if
it goes on, the guess is dropped. Interleaved wait-3 on 20 Multi30k sentences given whole: 1.44 -> 1.10 forwards per
target token, 0.81x the time, the same output (a learned policy, which decides on the hidden state after the read,
gets none).

Stops (a learned policy whose head reads an inner layer, ``PolicyHead.layer``): the forward that feeds what was
read asks at that layer; when the policy reads on, the forward stops there (no layer above, no LM head) and the
cache row keeps only what it held before: the tokens come again, whole, with the next request (``receive(...,
stopped=True)``; rows cost little, layers a lot). A forward that computes the prompt does not stop. The output is the
same either way (``Stream.stop_at_head = False``: tests/test_layer_split.py).

The draft is the model's first choice before the read; its next choices (``Stream.alternatives`` of them, none by
default) can be fed in the same forward as alternatives: each at the draft's place (same position id), seeing what
the draft sees but not the draft nor each other (the engine's mask), so each one's answer is what it would be in the
draft's place. When the layout places one of them, the stream asks the next forward to move its keys and values into
the draft's cache slot (``ForwardRequest.move``) and uses its answer: its list is then as if that token had been fed
there.

Decoding never writes garbage (each rule has a test in tests/test_decoding.py): special and markup tokens are
never proposed; an end proposed before the source is finished is a READ under policies that allow it; a token
that only ends a segment (the layout's ``segment_ends``) is not proposed once the source is finished; a
proposal that would repeat a 4-token sequence of the sentence is an end proposal; the target tokens of a sentence
are bounded by ``DecodeConfig.max_target_tokens`` of the source tokens read, and its words by ``max_len_a/b``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import Enum

import torch

from simulmt.errors import SimulmtError
from simulmt.core.best_tokens import BestTokens
from simulmt.core.layouts.base import Layout
from simulmt.core.placed import PlacedToken, common_prefix_length, embedded_units, embedding_row
from simulmt.core.policies import Action, Policy, StreamState
from simulmt.core.prompt_format import PromptFormat, source_units
from simulmt.core.runner import ContextOverflowError
from simulmt.core.samplers import Forced, Greedy, Sampler


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
    speculated: int = 0  # tokens fed ahead of the layout's list (a guess of what it places next; stream.py)
    speculated_kept: int = 0  # of those, the tokens the layout then placed (the others were computed in vain)
    stopped_forwards: int = 0  # forwards that stopped at a policy head's inner layer (a READ: layer_split.py)
    wall_ms: float = 0.0
    error: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Vocabulary:
    """Per-token tables of the model's vocabulary, built once per model (``simulmt.core.vocabulary``)."""

    word_starts: torch.Tensor  # (vocab,) bool: the token begins a new word
    stops: torch.Tensor  # (vocab,) bool: the token ends a segment or the sentence
    banned: torch.Tensor  # (vocab,) bool: never proposed (special tokens that are not stops)

    def __post_init__(self):
        minus_inf = lambda table: torch.zeros(table.shape).masked_fill(table, float("-inf"))  # noqa: E731
        biases = {"banned": minus_inf(self.banned), "stops": minus_inf(self.stops),
                  "inside_word": minus_inf(~(self.word_starts | self.stops))}
        object.__setattr__(self, "_biases", {torch.device("cpu"): biases})
        # the same tables as bytes, for a stream's per-token questions (a tensor lookup costs microseconds)
        object.__setattr__(self, "_starts", bytes(self.word_starts.tolist()))
        object.__setattr__(self, "_stops", bytes(self.stops.tolist()))
        object.__setattr__(self, "_best", None)

    def is_stop(self, token: int) -> bool:
        return 0 <= token < len(self._stops) and bool(self._stops[token])

    def is_word_start(self, token: int) -> bool:
        return 0 <= token < len(self._starts) and bool(self._starts[token])

    def best(self, logits: torch.Tensor) -> torch.Tensor:
        """(rows, 2) the first argmax of each row without the banned tokens, and without the banned and the stops
        (best_tokens.py): what greedy proposals and drafts need, for every row of a forward at once."""
        if self._best is None:
            object.__setattr__(self, "_best", BestTokens([self.banned, self.banned | self.stops]))
        return self._best(logits)

    def bias(self, name: str, device: torch.device | str = "cpu") -> torch.Tensor:
        """(vocab,) float: -inf on the tokens of the named rule, 0 elsewhere; on ``device`` (the logits' device:
        the tables are copied there once, so decoding on a GPU adds them where the logits are)."""
        device = torch.device(device)
        if device not in self._biases:  # (two threads may both copy; the dict keeps one)
            self._biases.setdefault(device, {k: v.to(device) for k, v in self._biases[torch.device("cpu")].items()})
        return self._biases[device][name]


@dataclass(frozen=True)
class Rules:
    """The decoding rules that exclude tokens from a proposal (``Stream._rules``), besides the special tokens."""

    stops: bool  # the end tokens: the policy may not end a segment and the source is not finished
    segment_ends: bool  # tokens that only end a segment: the source is finished
    word_start: bool  # tokens that continue a word: the previous word is complete


Answer = tuple  # (logits | None, hidden state | None, best tokens | None): the model's answer at one token


class Status(str, Enum):
    NEEDS_MODEL = "needs_model"
    NEEDS_SOURCE = "needs_source"
    DONE = "done"


@dataclass(frozen=True)
class ForwardRequest:
    """Keep the first ``keep`` cached tokens of the stream, feed ``tokens`` after them, return the logits of the
    last one (``logits=False``: only its hidden state, for a policy that decides on it and whose decision adds
    tokens either way, so the LM head's row would be wasted). ``speculative``: the tokens after the list are a guess
    of what the layout places next (placed as it would place them), and ``alternatives`` more after them are other
    candidates for the guess's last token (same position id); the answer covers the last token of the list and each
    guessed one, ``1 + speculative + alternatives`` rows."""

    keep: int
    tokens: tuple[PlacedToken, ...]
    logits: bool = True
    speculative: int = 0
    alternatives: int = 0  # the last tokens stand in for the last guess: see what it sees, not it (nor each other)
    move: tuple[int, int] | None = None  # before keeping: copy the cached token at index [0] to index [1]
    logits_if: Callable[[torch.Tensor], bool] | None = field(default=None, compare=False)  # given the hidden state
    # of the list's last token: are the logits wanted? (a learned policy that reads on needs none: no LM head)
    decides: bool = False  # the list's last token is a decision point: its features are wanted (at the policy
    # head's layer, ``Stream.features_layer``); a forward without one gives no features to a stream whose head
    # reads an inner layer, and computes no such layer apart
    reads_on: Callable[[torch.Tensor], bool] | None = field(default=None, compare=False)  # given the features at
    # the list's last token (a policy head's inner layer): does the policy read on? Then the forward may stop at
    # that layer, and the tokens are fed again, whole, in the next forward (``Stream.receive(stopped=True)``)


@dataclass(frozen=True)
class Step:
    words: list[WrittenWord]  # written since the last step
    status: Status
    request: ForwardRequest | None = None


class Stream:
    speculate = True  # feed guesses of what the layout places next (the output is the same; False: to measure them)
    alternatives = 0  # the model's next choices fed beside the draft (opt-in: 2 saves forwards for one live stream;
    # a forward shared by several streams feeds none, nor does one of an ALiBi model; docs/speech-cascade.md)
    stop_at_head = True  # a policy head on an inner layer: a READ stops the forward there (False: to measure it)
    read_ahead = True  # mid-word, feed what a READ would place when its source is here already (``_reading_guess``)
    logprobs = False  # keep each target token's log-probability in ``target_logprobs`` (a pass over the vocabulary
    # per token: for sequence-level training, not translation)

    def __init__(self, tokenizer, fmt: PromptFormat, layout: Layout, policy: Policy, vocabulary: Vocabulary,
                 config: DecodeConfig = DecodeConfig(), *, sampler: Sampler | None = None,
                 forced: list[tuple[int, int]] | None = None, record: bool = False, model_name: str = "",
                 max_positions: int | None = None):
        self.tokenizer, self.fmt = tokenizer, fmt
        self.layout, self.policy, self.config = layout, policy, config
        self.vocabulary = vocabulary
        self.segment_ends = list(layout.segment_ends(fmt))  # not proposed once the source is complete
        self.forced = forced  # teacher forcing: (token id, target word index) per target token, then the end
        self.sampler: Sampler = Forced([t for t, _ in forced]) if forced is not None else (sampler or Greedy())
        self.record = record
        self.model_name = model_name
        self.max_positions = max_positions
        self.wants_features = bool(getattr(policy, "wants_features", False))
        head = getattr(policy, "head", None)  # a policy head on an inner layer: its decisions may stop a forward there
        self.features_layer: int | None = getattr(head, "layer", None) if self.wants_features else None
        self.stopped_at: tuple[int, tuple[PlacedToken, ...], torch.Tensor] | None = None  # (keep, tokens, features)
        # of the last forward if it stopped at ``features_layer``: the cache row does not hold ``tokens``
        self.state = layout.start(fmt)
        self.fed: list[PlacedToken] = []  # what the stream's cache row holds, in order (a guess may end it)
        self.outputs: dict[int, Answer] = {}  # the last forward's answers: context length (tokens of ``fed`` up to
        # and including the token) -> (logits, last hidden state, best tokens: ``Vocabulary.best`` of the logits)
        self.drafts: tuple[int, ...] = ()  # after a READ: the target tokens the model is guessed to write next, best
        # first (the first is fed as the guess, the others as its alternatives)
        self.guessed = 0  # the last tokens of ``fed`` that were fed as a guess (speculative + alternatives)
        self.alternates = 0  # of those, the last ones that are alternatives (``ForwardRequest.alternatives``)
        self.alternate_outputs: dict[int, Answer] = {}  # index in ``fed``
        self.move: tuple[int, int] | None = None  # an alternative the layout placed: its cache slot -> the guess's
        self.guessed_answers: set[int] = set()  # keys of ``outputs`` answered at a guessed token, not yet used
        self.answers_from_guesses = 0  # answers used at a guessed token: each is a forward saved
        self.pending: ForwardRequest | None = None
        self.source_words: list[str] = []
        self.units: list[tuple[int, ...]] = []  # token ids per source unit (ids < 0: rows of ``embeddings``)
        self.arrivals: list[int] = []  # per source unit: which arrival brought it (units of one arrival came at once)
        self.embeddings: list[torch.Tensor] = []  # what embedded source tokens carry (speech frames)
        self.stream_finished = False
        self.written: list[WrittenWord] = []
        self.current: list[int] = []  # tokens of the word being written
        self.current_delay = 0
        self.held: int | None = None  # a proposal not yet acted on
        self._held_logprob = 0.0
        self._scores: torch.Tensor | None = None  # what the last proposal was chosen from (for a draft)
        self._chosen_from: tuple[torch.Tensor, tuple[int, int], Rules] | None = None  # or, when it was the best
        # token the engine found (``Vocabulary.best``): the logits, those best tokens and the rules then
        self.accepted = 0  # target tokens accepted (index into ``forced``)
        self.target_tokens: list[int] = []  # every target token accepted, in order
        self._ngrams: dict[tuple[int, ...], set[int]] = {}  # every (n-1)-gram of them -> the tokens that followed it
        self.target_logprobs: list[float] = []  # the sampler's log-probability of each (with ``logprobs`` on)
        self.segment_reads = self.segment_words = 0
        self.model_ended_segment = False
        self.done = False
        self._decision: tuple[StreamState, Action] | None = None  # the policy's last answer and where it was given
        self.choices: dict[int, int] = {}  # context length (placed tokens) -> the token the sampler chose there
        self.error: SimulmtError | None = None  # set by an engine when the stream failed
        self.tokens_fed = self.forward_calls = self.cache_crops = self.refed_tokens = 0
        self.speculated = self.speculated_kept = 0
        self.stopped_forwards = 0  # forwards that stopped at the policy head's layer (their tokens are fed again)
        self.flops = 0.0
        self.proposals: list[Proposal] = []
        self.t0: float | None = None

    # ---- the source side -------------------------------------------------------------------------------------
    def push(self, words: list[str], finished: bool = False, arrivals: list[int] | None = None) -> None:
        """More source words arrived (``finished``: none will follow). They arrived at once, unless ``arrivals``
        numbers each word's arrival (non-decreasing; e.g. the speech block that completed it): a policy may decide
        once per arrival (``StreamState.source_waiting``)."""
        if self.stream_finished:
            raise SimulmtError("the source of this stream has already finished")
        if arrivals is not None and (len(arrivals) != len(words) or arrivals != sorted(arrivals)
                                     or (self.arrivals and arrivals and arrivals[0] < self.arrivals[-1])):
            raise SimulmtError(f"arrivals must number each of the {len(words)} words, in non-decreasing order after "
                               f"the earlier ones; got {arrivals}")
        for word in words:
            try:
                word.encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate: bytes that were not UTF-8, read leniently
                raise SimulmtError(f"source word {len(self.source_words) + 1 + words.index(word)} is not valid text "
                                   f"({exc.reason} at character {exc.start + 1}); read the input as UTF-8") from None
        if self.t0 is None:
            self.t0 = time.perf_counter()
        self.units += source_units(self.tokenizer, self.fmt, words, first_index=len(self.source_words))
        self.arrivals += arrivals if arrivals is not None else [self._next_arrival()] * len(words)
        self.source_words += words
        self.stream_finished = finished
        if finished and not self.source_words:  # an empty line: an empty translation, no model call
            self.done = True

    def push_embedded(self, blocks: list[torch.Tensor], finished: bool = False,
                      labels: list[str] | None = None) -> None:
        """More source units that carry embeddings instead of token ids (speech: one block of adapter outputs,
        (frames, hidden), per unit). Each row becomes a placed token whose id is ``-1 - f``: row f of
        ``self.embeddings``, which the engine feeds in place of a token embedding. ``labels`` name the units
        in the result's ``source`` (default: ``<unit i>``)."""
        if self.stream_finished:
            raise SimulmtError("the source of this stream has already finished")
        if labels is not None and len(labels) != len(blocks):
            raise SimulmtError(f"{len(blocks)} embedded units but {len(labels)} labels")
        if self.t0 is None:
            self.t0 = time.perf_counter()
        for block in blocks:
            if block.dim() != 2 or block.shape[0] == 0:
                raise SimulmtError(f"an embedded unit is a (frames >= 1, hidden) tensor, got {tuple(block.shape)}")
        self.units += embedded_units([b.shape[0] for b in blocks], first_row=len(self.embeddings))
        self.arrivals += [self._next_arrival() + i for i in range(len(blocks))]  # a block is an arrival of its own
        self.embeddings += [row for block in blocks for row in block.detach()]
        self.source_words += labels if labels is not None else [f"<unit {len(self.source_words) + i}>"
                                                                for i in range(len(blocks))]
        self.stream_finished = finished
        if finished and not self.source_words:
            self.done = True

    def _next_arrival(self) -> int:
        return self.arrivals[-1] + 1 if self.arrivals else 0

    def embedding_of(self, token_id: int) -> torch.Tensor:
        """The embedding an embedded source token (id < 0) carries."""
        return self.embeddings[embedding_row(token_id)]

    @property
    def source_finished(self) -> bool:
        return self.stream_finished and self.state.units_read == len(self.units)

    def stream_state(self) -> StreamState:
        read = self.state.units_read
        waiting = 0
        while read and read + waiting < len(self.units) and self.arrivals[read + waiting] == self.arrivals[read - 1]:
            waiting += 1
        return StreamState(read, self.source_finished, len(self.written), self.segment_reads, self.segment_words,
                           self.model_ended_segment, self.features if self.wants_features else None, waiting)

    @property
    def features(self) -> torch.Tensor | None:
        """The last hidden state of the layout's last placed token, if the last forward returned it."""
        output = self._output()
        if output is not None:
            return output[1]
        if self.stopped_at is not None:  # the decision's features, if the layout's list is still what was fed
            keep, tokens, hidden = self.stopped_at
            placed = self.state.tokens
            if len(placed) == keep + len(tokens) and tuple(placed[keep:]) == tokens and placed[:keep] == self.fed:
                return hidden
        return None

    def _output(self, kept: int | None = None) -> Answer | None:
        """The model's answer (logits, hidden state) at the layout's last placed token, if the cache row holds the
        layout's whole list (and perhaps a guess after it) and the last forward answered there. ``kept``: the
        common prefix length of the two lists, when the caller has it."""
        n = len(self.state.tokens)
        if n not in self.outputs:
            return None
        if (common_prefix_length(self.fed, self.state.tokens) if kept is None else kept) != n:
            return None
        if n in self.guessed_answers:  # without the guess, a forward would have been needed for this answer
            self.guessed_answers.discard(n)
            self.answers_from_guesses += 1
        return self.outputs[n]

    # ---- the loop --------------------------------------------------------------------------------------------
    def step(self) -> Step:
        """Act until the model or more source is needed, or the sentence is done."""
        words: list[WrittenWord] = []
        status = self._run(words)
        return Step(words, status, self.pending if status is Status.NEEDS_MODEL else None)

    def _run(self, words: list[WrittenWord]) -> Status:
        while not self.done:
            if not self.current:  # a word boundary: the policy decides
                action = self._decide()
                if action is None:
                    return Status.NEEDS_MODEL  # a learned policy decides on the hidden state of what was read: feed it
                if action is Action.READ:
                    if self.state.units_read < len(self.units):
                        self._read()
                        continue
                    if not self.stream_finished:
                        return Status.NEEDS_SOURCE
                    raise SimulmtError(f"policy {self.policy.describe()} asked to read past the end of the source")
            if self.held is not None and self.source_finished and self.held in self.segment_ends:
                self.held = None  # proposed while source was left (then a READ); none is left now: propose again
            if self.held is None:
                if self._at_token_bound():  # as if the model proposed the end
                    self.held = self.fmt.end_id
                else:
                    self.layout.open_target(self.state)
                    self._settle_guesses()
                    answer = self._logits(draft=True)
                    if answer is None:
                        return Status.NEEDS_MODEL
                    self.held = self._propose(answer[0], answer[2])
            token = self.held
            if self.current and (self._is_end(token) or self._starts_word(token)):
                self._commit(words)  # the word is complete; the policy decides before the proposal is used
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
            if self.forced is not None:  # teacher forcing: the forced tokens say where words and the sentence end
                continue
            if len(self.current) >= self.config.max_tokens_per_word:
                self._commit(words)
            if self.source_finished and len(self.written) + bool(self.current) >= self._max_words():
                self._commit(words)
                self.done = True
        return Status.DONE

    def _decide(self) -> Action | None:
        """The policy's answer at this boundary, asked once: coming back after a forward (the target opener was
        fed) the answer stands, even for a learned policy whose features are now the opener's. None: the policy
        needs the hidden state of what was read, and a forward was requested."""
        state = self.stream_state()
        point = state if state.features is None else replace(state, features=None)
        if self._decision is not None and self._decision[0] == point:
            return self._decision[1]
        consults = getattr(self.policy, "consults_head", None)  # without it: the features, if they are at hand
        if self.wants_features and consults is not None and consults(state) and not self._features_at_hand():
            return None
        action = self.policy.decide(state)
        self._decision = (point, action)
        return action

    # ---- the model side --------------------------------------------------------------------------------------
    def _logits(self, draft: bool = False) -> Answer | None:
        """The answer (logits, ...) at the layout's last placed token if the cache row holds the whole list; otherwise post a
        ``ForwardRequest`` (keep the common prefix, feed the rest) and return None. ``draft``: a proposal is asked
        for; if a READ dropped one (``self.drafts``), it is fed after the list as a guess (speculative decoding with
        the old proposal as the draft), its alternatives after it: proposed again, it needs no forward of its own."""
        target = self.state.tokens
        kept = common_prefix_length(self.fed, target)
        output = self._output(kept)
        if output is not None and output[0] is not None:
            if draft:
                self.drafts = ()  # (a forward that fed them as guesses answered here, or they were not needed)
            return output
        keep = min(kept, len(target) - 1)  # the last token's logits are needed
        new = tuple(target[keep:])
        if self.max_positions is not None and max(t.position for t in new) >= self.max_positions:
            raise ContextOverflowError(
                f"the stream needs position id {max(t.position for t in new)}, beyond the model's context of "
                f"{self.max_positions} positions; split the input into shorter lines (or use a smaller slot / phi)")
        guesses: tuple[PlacedToken, ...] = ()
        if draft and self.speculate and self.drafts and not self.current and target[-1].role.target_side:
            guesses = tuple(self.layout.placed_write(self.state, t, len(self.written)) for t in self.drafts)
            if self.max_positions is not None and guesses[0].position >= self.max_positions:
                guesses = ()
        if draft:
            self.drafts = ()  # one guess per READ
        alternatives = max(0, len(guesses) - 1)
        if draft and self.speculate and self.read_ahead and self.current and not guesses:
            guesses, alternatives = self._reading_guess(), 0
        self.pending = ForwardRequest(keep, new + guesses, speculative=len(guesses) - alternatives,
                                      alternatives=alternatives, move=self.move)
        return None

    def _features_at_hand(self) -> bool:
        """Is the hidden state of the layout's last placed token at hand? If not, post a ``ForwardRequest`` for it.
        In a layout whose target is not open, a WRITE places the opener first (``open_target``): the request then
        also feeds, as a guess, the opener and the token the model is guessed to write after it (``draft``), so
        that a WRITE needs no forward of its own; a READ drops them. Their logits are asked for only if the policy
        writes on the hidden state the forward computes (``logits_if``: a READ costs no LM head), and not at all
        without a guess to make (the next proposal comes from a later forward either way)."""
        if self.features is not None:
            return True
        if self._logits() is None and not self.state.opened:
            guesses, alternatives = self._opening_guess() if self.speculate else ((), ())
            state = self.stream_state()

            def writes(hidden: torch.Tensor) -> bool:  # asked by the engine, inside a forward shared with others
                try:
                    return self.policy.decide(replace(state, features=hidden)) is Action.WRITE
                except Exception:  # (this stream's own step raises it again, failing this stream alone)
                    return True
            self.pending = replace(self.pending, tokens=self.pending.tokens + guesses + alternatives,
                                   speculative=len(guesses), alternatives=len(alternatives), logits=bool(guesses),
                                   logits_if=writes if guesses else None,
                                   decides=True, reads_on=(lambda hidden: not writes(hidden))
                                   if self.features_layer is not None and self.stop_at_head else None)
        return self.pending is None

    def _scratch_state(self):
        """A copy of the layout's state to try placements on (its lists copied: the stream's own stay as they are)."""
        scratch = copy.copy(self.state)
        for name, value in vars(scratch).items():
            if isinstance(value, list):
                setattr(scratch, name, list(value))
        return scratch

    def _opening_guess(self) -> tuple[tuple[PlacedToken, ...], tuple[PlacedToken, ...]]:
        """What ``open_target`` would place now and the draft after it (a scratch copy of the layout's state), and
        the draft's alternatives."""
        scratch = self._scratch_state()
        self.layout.open_target(scratch)
        n = len(self.state.tokens)
        if scratch.tokens[:n] != self.state.tokens or len(scratch.tokens) == n:
            return (), ()
        drafts = tuple(self.layout.placed_write(scratch, t, len(self.written)) for t in self.drafts)
        guesses = tuple(scratch.tokens[n:]) + drafts[:1]
        if self.max_positions is not None and guesses[-1].position >= self.max_positions:
            return (), ()
        return guesses, drafts[1:]

    def _reading_guess(self) -> tuple[PlacedToken, ...]:
        """Read-ahead: the word being written may end at the proposal this forward answers, and a policy that decides
        on counts alone may then read before it writes again. When the units it would read are here already, the
        tokens the layout would place for them (what a READ closes, the units, the opener of the next target) are
        fed after the last target token as a guess: after the read, the answer at the opener is at hand, and the
        read costs no forward of its own. A wrong guess (the word goes on) is dropped at the next forward.

        Only units of the arrival of the last unit read (or an earlier one) are read ahead: a simulation that pushes
        a whole speech file with each word's arrival must not compute a word before its block has come (which would
        flatter its computation-aware latency); a live stream's words of one block, or a text given whole (one
        arrival), are here."""
        if self.wants_features or not 0 < self.state.units_read < len(self.units):
            return ()
        arrived = self.arrivals[self.state.units_read - 1]  # read ahead only what came with what was read
        state = self.stream_state()
        state = replace(state, target_words=state.target_words + 1, segment_words=state.segment_words + 1,
                        model_ended_segment=False, source_waiting=0)  # as if the word ended here
        if self.policy.decide(state) is not Action.READ:
            return ()
        scratch = self._scratch_state()
        while self.policy.decide(state) is Action.READ:
            if scratch.units_read >= len(self.units) or self.arrivals[scratch.units_read] > arrived:
                return ()  # it would wait for more source (a later arrival): that forward comes when it does
            self.layout.read(scratch, self.units[scratch.units_read])
            state = replace(state, source_read=scratch.units_read, segment_reads=state.segment_reads + 1,
                            segment_words=0, source_finished=(self.stream_finished
                                                              and scratch.units_read == len(self.units)))
        self.layout.open_target(scratch)
        n = len(self.state.tokens)
        if scratch.tokens[:n] != self.state.tokens or len(scratch.tokens) == n:
            return ()
        guesses = tuple(scratch.tokens[n:])
        if self.max_positions is not None and guesses[-1].position >= self.max_positions:
            return ()
        return guesses

    def receive(self, logits: torch.Tensor | None, flops: float, features: torch.Tensor | None = None,
                served: ForwardRequest | None = None, stopped: bool = False,
                best: list[tuple[int, int]] | None = None) -> None:
        """The engine served the pending request: the cache row now holds the layout's list (and the guessed tokens,
        if any were fed). ``logits`` (1 + speculative + alternatives, vocab), None when the request asked for none
        (or its ``logits_if`` said no); ``features`` (the same rows, hidden): the last hidden states, when the policy
        wants them. ``served``: the request as the engine served it, if not as posted (a forward shared by several
        streams leaves the alternatives out). ``stopped``: the forward stopped at the policy head's layer (the
        request's ``reads_on`` said so): the cache row holds the first ``keep`` tokens only, and ``features`` has the
        decision's row; the tokens are fed again, whole, with the next request. ``best``: per row of ``logits``,
        ``Vocabulary.best`` of it, when the engine computed them (for all rows of the forward at once)."""
        request, self.pending = self.pending, None
        if request is None:
            raise SimulmtError("receive() without a pending forward request")
        if served is not None:
            if served.tokens != request.tokens[:len(served.tokens)] or served.keep != request.keep:
                raise SimulmtError("the engine served another request than the one posted")
            request = served
        if request.keep < len(self.fed) - self.guessed:  # a crop of the layout's list (not only of a guess)
            dropped = set(self.fed[request.keep:len(self.fed) - self.guessed])  # (not a guess the layout left)
            self.cache_crops += 1
            self.refed_tokens += sum(t in dropped for t in request.tokens)
        self.move = None  # (the engine made it)
        self.stopped_at = None
        if stopped:
            listed = request.tokens[:len(request.tokens) - request.speculative - request.alternatives]
            self.fed = self.fed[: request.keep]
            self.guessed = self.alternates = 0
            self.outputs, self.alternate_outputs, self.guessed_answers = {}, {}, set()
            self.stopped_at = (request.keep, tuple(listed), features[0])
            self.tokens_fed += len(request.tokens)
            self.refed_tokens += len(listed)  # (they come again in the next forward)
            self.forward_calls += 1
            self.stopped_forwards += 1
            self.flops += flops
            return
        self.fed = self.fed[: request.keep] + list(request.tokens)
        self.guessed, self.alternates = request.speculative + request.alternatives, request.alternatives
        answers = [(None if logits is None else logits[i], None if features is None else features[i],
                    None if best is None else best[i]) for i in range(1 + request.speculative + request.alternatives)]
        chain = len(self.fed) - request.alternatives  # tokens up to the last guess, in cache order
        self.outputs = {chain - request.speculative + i: answers[i] for i in range(1 + request.speculative)}
        self.guessed_answers = set(range(chain - request.speculative + 1, chain + 1))
        self.alternate_outputs = {chain + i: answers[1 + request.speculative + i] for i in range(request.alternatives)}
        self.tokens_fed += len(request.tokens)
        self.forward_calls += 1
        self.speculated += request.speculative + request.alternatives
        self.flops += flops

    def _settle_guesses(self) -> None:
        """The layout placed more tokens: those that are the guesses the cache row holds are the layout's now. Where
        it placed an alternative instead of the last guess, the alternative takes the guess's place."""
        start = len(self.fed) - self.guessed
        if not self.guessed or common_prefix_length(self.fed, self.state.tokens) < start:
            return  # (the layout changed before them: they are not its tokens, whatever they look like)
        while (self.guessed > self.alternates and len(self.state.tokens) > start
               and self.state.tokens[start] == self.fed[start]):
            self.guessed, self.speculated_kept, start = self.guessed - 1, self.speculated_kept + 1, start + 1
        if self.guessed - self.alternates != 1 or len(self.state.tokens) <= start:
            return  # (the guesses are all placed, or the layout has not reached the last one yet)
        slots = range(len(self.fed) - self.alternates, len(self.fed))
        chosen = next((i for i in slots if self.fed[i] == self.state.tokens[start]), None)
        if chosen is not None:  # the cache row holds it at ``chosen``; as if it had been fed at ``start``
            self.move = (chosen, start)
            self.fed = self.fed[:start] + [self.fed[chosen]]
            self.outputs = {start + 1: self.alternate_outputs[chosen]}
            self.guessed_answers = {start + 1}
            self.guessed = self.alternates = 0
            self.speculated_kept += 1

    # ---- steps -----------------------------------------------------------------------------------------------
    def _read(self) -> None:
        self.layout.read(self.state, self.units[self.state.units_read])
        self.drafts = self._guess()
        self.held = None
        if self.model_ended_segment:  # reads count from the end of a segment, an empty one too (read-n: n more)
            self.segment_reads = 0
        self.segment_reads += 1
        self.segment_words = 0
        self.model_ended_segment = False

    def _accept(self, token: int) -> None:
        if not self.current:
            self.current_delay = self.state.units_read
            self.segment_reads = 0
        self.layout.write(self.state, token, len(self.written))
        self._settle_guesses()
        self.current.append(token)
        self.target_tokens.append(token)
        n = self.config.no_repeat_ngram
        if n >= 2 and len(self.target_tokens) >= n:  # (repeated_ngram_bans, kept as the sentence grows)
            self._ngrams.setdefault(tuple(self.target_tokens[-n:-1]), set()).add(token)
        if self.logprobs:
            self.target_logprobs.append(self._held_logprob)
        self.accepted += 1
        self.held = self._scores = self._chosen_from = None

    def _commit(self, words: list[WrittenWord]) -> None:
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
        words.append(word)

    def _at_token_bound(self) -> bool:
        if self.forced is not None:
            return False
        return len(self.target_tokens) >= self.config.max_target_tokens(self.state.source_tokens)

    def _max_words(self) -> int:
        return int(self.config.max_len_a * len(self.units)) + self.config.max_len_b

    def _is_end(self, token: int) -> bool:
        return self.vocabulary.is_stop(token)

    def _starts_word(self, token: int) -> bool:
        if self.forced is not None:  # teacher forcing: the word index says where words start
            return self.forced[self.accepted][1] != len(self.written)
        return self.vocabulary.is_word_start(token)

    def _propose(self, logits: torch.Tensor, best: tuple[int, int] | None = None) -> int:
        """The next token from the answer's ``logits`` under the decoding rules. A greedy sampler's choice is the
        best allowed token: where the engine found it for every row at once (``best``) and the rules it does not
        know allow it, it is taken as it is, with no pass over the vocabulary here."""
        if self.forced is not None:
            if self.accepted >= len(self.forced):
                raise SimulmtError("teacher forcing ran past the forced target")
            token, self._held_logprob = self.sampler.choose(logits, self.accepted)
        else:
            rules = self._rules()
            token = self._best_allowed(best, rules) if best is not None and getattr(self.sampler, "picks_best", False) else None
            if token is not None:
                self._scores, self._chosen_from = None, (logits, best, rules)
                if self.logprobs:
                    self._held_logprob = float(torch.log_softmax(self._allowed(logits, rules).float(), -1)[token])
            else:
                self._scores, self._chosen_from = self._allowed(logits, rules), None
                token, self._held_logprob = self.sampler.choose(self._scores, self.accepted)
            self.choices[len(self.state.tokens)] = token  # what the model chose, before any rule below overrides it
            if token in self._repeat_bans():
                # the model wants to repeat itself: it has nothing new to say, which is an end proposal
                # (a READ before the source is finished); where the policy forbids that, its next best token
                if self.source_finished or self.policy.lets_model_end_segment:
                    token = self.fmt.end_id
                else:
                    scores = self._allowed(logits, rules)
                    scores[list(self._repeat_bans())] = -torch.inf
                    token, self._held_logprob = self.sampler.choose(scores, self.accepted)
        if self.record:
            self.proposals.append(Proposal(tuple(self.state.tokens), logits, token))
        return token

    def _guess(self) -> tuple[int, ...]:
        """The tokens the model would write next if it could not end the segment here, best first (its proposal
        before the read, or its best token that is not an end, then its next choices, ``alternatives`` of them):
        after a READ it often writes one of them all the same (a draft)."""
        if self.forced is not None:
            token = self.forced[self.accepted][0] if self.accepted < len(self.forced) else None
            return () if token is None or self._is_end(token) else (token,)
        first = () if self.held is None or self._is_end(self.held) else (self.held,)
        if self._scores is None and self._chosen_from is None:
            return first
        if first and not self.alternatives:  # (the default: no pass over the vocabulary)
            return first
        if self._scores is None:  # the proposal was the engine's best token: its best that is not a stop
            logits, best, rules = self._chosen_from
            if not self.alternatives:
                token = self._best_allowed(best, replace(rules, stops=True))
                if token is not None or best[1] < 0:
                    return () if token is None else (token,)
            self._scores = self._allowed(logits, rules)  # (a rule it does not know: as before, from the scores)
        scores = self._scores[: len(self.vocabulary.stops)] + self.vocabulary.bias("stops", self._scores.device)
        if first:
            scores[first[0]] = float("-inf")
        best = torch.topk(scores, 1 + self.alternatives - len(first))
        return (first + tuple(int(t) for t, v in zip(best.indices, best.values) if v > float("-inf")))[
            : 1 + self.alternatives]

    def _repeat_bans(self) -> set[int]:
        """``repeated_ngram_bans`` of the target so far, from the n-grams kept as it grew."""
        n = self.config.no_repeat_ngram
        if n < 2 or len(self.target_tokens) < n:
            return set()
        return self._ngrams.get(tuple(self.target_tokens[len(self.target_tokens) - n + 1:]), set())

    def _rules(self) -> Rules:
        """Which decoding rules exclude tokens now (besides the special tokens, always excluded)."""
        return Rules(stops=not self.source_finished and not self.policy.lets_model_end_segment,
                     segment_ends=bool(self.source_finished and self.segment_ends),  # e.g. end-of-write: nothing
                     # is left to read
                     word_start=bool(not self.current and self.written and self.layout.continues_text(self.state)))
                     # the previous word is complete: the next token must start a new word (or end)

    def _best_allowed(self, best: tuple[int, int], rules: Rules) -> int | None:
        """The best token the rules allow, from the engine's best tokens (``Vocabulary.best``: without the special
        tokens, and without them and the stops); None where it cannot tell (a rule excludes that token, or no token
        is left): the scores must be looked at."""
        token = best[1] if rules.stops else best[0]
        if token < 0 or (rules.segment_ends and token in self.segment_ends):
            return None
        if rules.word_start and not (self.vocabulary.is_word_start(token) or self.vocabulary.is_stop(token)):
            return None
        return token

    def _allowed(self, logits: torch.Tensor, rules: Rules) -> torch.Tensor:
        """The logits with what ``rules`` exclude set to -inf (additive biases: no per-step indexing)."""
        v = self.vocabulary
        scores = logits[: len(v.word_starts)] + v.bias("banned", logits.device)
        if rules.stops:
            scores = scores + v.bias("stops", logits.device)
        if rules.segment_ends:
            scores[self.segment_ends] = float("-inf")
        if rules.word_start:
            scores = scores + v.bias("inside_word", logits.device)
        if len(logits) > len(scores):  # logits beyond the tokenizer's vocabulary are never proposed
            scores = torch.cat([scores, logits.new_full((len(logits) - len(scores),), float("-inf"))])
        return scores

    # ---- the result ------------------------------------------------------------------------------------------
    def result(self) -> Translation:
        words, delays, elapsed = [], [], []
        for w in self.written:
            for piece in w.text.split():  # a token group may decode to several words (or none)
                words.append(piece)
                delays.append(w.delay)
                elapsed.append(round(w.elapsed_ms, 3))
        wall = (time.perf_counter() - self.t0) * 1000.0 if self.t0 is not None else 0.0
        if self.error is not None:  # a failed sentence: the work done so far, no target words
            words, delays, elapsed = [], [], []
        return Translation(
            source=" ".join(self.source_words), prediction=" ".join(words), delays=delays, elapsed=elapsed,
            tokens_fed=self.tokens_fed, flops=self.flops, layout=self.layout.describe(),
            policy=self.policy.describe(), slot=getattr(self.layout, "slot", None), model=self.model_name,
            source_length=len(self.source_words), forward_calls=self.forward_calls, cache_crops=self.cache_crops,
            refed_tokens=self.refed_tokens, speculated=self.speculated, speculated_kept=self.speculated_kept,
            stopped_forwards=self.stopped_forwards, wall_ms=round(wall, 3),
            error=str(self.error) if self.error is not None else None)
