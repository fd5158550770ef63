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

Stops (a learned policy whose head reads an inner layer, ``PolicyHead.layer``): the forward that feeds what was
read asks at that layer; when the policy reads on, the forward stops there (no layer above, no LM head) and the
cache row keeps only what it held before: the tokens come again, whole, with the next request (``receive(...,
stopped=True)``; rows cost little, layers a lot). A forward that computes the prompt does not stop. The output is the
same either way (``Execution.stop_at_head``: tests/test_layer_split.py).

Guesses, read-ahead and alternatives (the stream's speculation): guesses.py; the source side (words and speech units
arriving): stream_source.py; a proposal under the decoding rules: proposals.py (the rules' bounds and the
vocabulary's tables: decoding.py); the requests to the engine: requests.py, and what a served forward leaves:
stream_answers.py; the result: translation.py.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from simulmt.errors import SimulmtError
from simulmt.core.execution import Execution
from simulmt.core.sentence_ends import has_terminal
from simulmt.core.vocabulary import word_text
from simulmt.core.decoding import DecodeConfig, Rules, Vocabulary, repeated_ngram_bans  # noqa: F401 (names of
# the stream's API: simulmt.core.stream has always exported them)
from simulmt.core.guesses import Guesses
from simulmt.core.stream_answers import Answers
from simulmt.core.proposals import Proposals
from simulmt.core.stream_source import Source
from simulmt.core.layouts.base import Layout
from simulmt.core.placed import PlacedToken, common_prefix_length
from simulmt.core.policies import Action, Policy
from simulmt.core.prompt_format import PromptFormat
from simulmt.core.requests import Answer, ForwardRequest, Status, Step
from simulmt.core.runner import ContextOverflowError
from simulmt.core.samplers import Forced, Greedy, Sampler
from simulmt.core.translation import Proposal, Translation, WrittenWord


class Stream(Source, Proposals, Guesses, Answers):
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
        self.execution = Execution()  # how it computes (execution.py): the engine's, once it joins one
        self.wants_features = bool(getattr(policy, "wants_features", False))
        head = getattr(policy, "head", None)  # a policy head on an inner layer: its decisions may stop a forward there
        self.features_layer: int | None = getattr(head, "layer", None) if self.wants_features else None
        self._begin(fmt)

    def _begin(self, fmt: PromptFormat) -> None:
        """The state of a sentence about to start, after the prompt ``fmt.prompt`` (a talk starts each of its
        sentences this way, with its context in the prompt: talk.py)."""
        self.fmt = fmt
        self.stopped_at: tuple[int, tuple[PlacedToken, ...], torch.Tensor, float | None] | None = None  # (keep,
        # tokens, features, their score) of the last forward if it stopped at ``features_layer``: the cache row does
        # not hold ``tokens``
        self.state = self.layout.start(fmt)
        self.read_ms: list[float] = []  # per source unit read: ms since the start (the clock of its read)
        self.fed: list[PlacedToken] = []  # what the stream's cache row holds, in order (a guess may end it)
        self.outputs: dict[int, Answer] = {}  # the last forward's answers: context length (tokens of ``fed`` up to
        # and including the token) -> (logits, last hidden state, best tokens: ``Vocabulary.best`` of the logits)
        self.drafts: tuple[int, ...] = ()  # after a READ: the target tokens the model is guessed to write next, best
        # first (the first is fed as the guess, the others as its alternatives)
        self.guessed = 0  # the last tokens of ``fed`` that were fed as a guess (speculative + alternatives)
        self.alternates = 0  # of those, the last ones that are alternatives (``ForwardRequest.alternatives``)
        self.alternate_outputs: dict[int, Answer] = {}  # index in ``fed``
        self.move: tuple[int, int] | None = None  # an alternative the layout placed: its cache slot -> the guess's
        self.replaced: int | None = None  # the cache row's index of a token the guesses after it place again
        self.drop: int | None = None  # a token the next forward takes out of the row (a used guess re-placed it)
        self.guessed_answers: set[int] = set()  # keys of ``outputs`` answered at a guessed token, not yet used
        self.answers_from_guesses = 0  # answers used at a guessed token: each is a forward saved
        self.pending: ForwardRequest | None = None
        self.source_words: list[str] = []
        self.units: list[tuple[int, ...]] = []  # token ids per source unit (ids < 0: rows of ``embeddings``)
        self.arrivals: list[int] = []  # per source unit: which arrival brought it (units of one arrival came at once)
        self.embeddings: list[torch.Tensor] = []  # what embedded source tokens carry (speech frames)
        self.stream_finished = False
        self.written: list[WrittenWord] = []
        self.target_sentences = 0  # written words that end a sentence (the ``sentence_end`` rule)
        self.current: list[int] = []  # tokens of the word being written
        self.current_delay = 0
        self.held: int | None = None  # a proposal not yet acted on
        self._held_logprob = 0.0
        self._scores: torch.Tensor | None = None  # what the last proposal was chosen from (for a draft)
        self._chosen_from: tuple[Answer, Rules] | None = None  # or, when it was the best token the engine found
        # (``Vocabulary.best``): the answer it was found in and the rules then
        self.accepted = 0  # target tokens accepted (index into ``forced``)
        self.target_tokens: list[int] = []  # every target token accepted, in order
        self._ngrams: dict[tuple[int, ...], set[int]] = {}  # every (n-1)-gram of them -> the tokens that followed it
        self._tail: tuple[int, ...] = ()  # their last n-1 (once there are n): the key of the tokens banned next
        self.target_logprobs: list[float] = []  # the sampler's log-probability of each (with ``logprobs`` on)
        self.segment_reads = self.segment_words = 0
        self.model_ended_segment = False
        self.done = False
        self._decision: tuple[tuple, Action] | None = None  # the policy's last answer and where it was given
        # (``decision_point()``)
        self.choices: dict[int, int] = {}  # context length (placed tokens) -> the token the sampler chose there
        self.error: SimulmtError | None = None  # set by an engine when the stream failed
        self.tokens_fed = self.forward_calls = self.cache_crops = self.refed_tokens = 0
        self.speculated = self.speculated_kept = 0
        self.stopped_forwards = 0  # forwards that stopped at the policy head's layer (their tokens are fed again)
        self.flops = 0.0
        self.proposals: list[Proposal] = []
        self._held_cause = "model"  # why the held proposal is what it is: "model", "repeat" (the rule), "bound"
        self.early_ends: list[tuple[int, str, bool]] = []  # ends before the source finished (READs): (target words
        # written, cause: "end" / "newline" (the model's) or "repeat" / "bound" (a rule's), after a new slot/turn)
        self.header_words = 0  # target words written after a new slot or turn header (the rate's denominator)
        self._header_seen, self._header_scan = False, 0
        self.t0: float | None = None

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
                    self.held, self._held_cause = self.fmt.end_id, "bound"
                else:
                    self.layout.open_target(self.state)
                    self._settle_guesses()
                    answer = self._logits(draft=True)
                    if answer is None:
                        return Status.NEEDS_MODEL
                    self.held = self._propose(answer)
            token = self.held
            if self.current and (self._is_end(token) or self._starts_word(token)):
                self._commit(words)  # the word is complete; the policy decides before the proposal is used
                continue
            if self._is_end(token):
                if self.source_finished:
                    self.done = True
                elif self.policy.lets_model_end_segment:
                    self._note_early_end(token)
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
        point = self.decision_point()
        if self._decision is not None and self._decision[0] == point:
            return self._decision[1]
        state = self.stream_state(point)
        consults = getattr(self.policy, "consults_head", None)  # without it: the features, if they are at hand
        if self.wants_features and consults is not None and consults(state) and not self._features_at_hand():
            return None
        action = self.policy.decide(state)
        self._decision = (point, action)
        return action

    # ---- the model side --------------------------------------------------------------------------------------
    def _logits(self, draft: bool = False) -> Answer | None:
        """The answer (logits, ...) at the layout's last placed token if the cache row holds the whole list; otherwise
        post a ``ForwardRequest`` (keep the common prefix, feed the rest) and return None. ``draft``: a proposal is
        asked for; if a READ dropped one (``self.drafts``), it is fed after the list as a guess (speculative decoding
        with the old proposal as the draft), its alternatives after it: proposed again, it needs no forward of its
        own."""
        target = self.state.tokens
        kept = common_prefix_length(self.fed, target)
        output = self._output(kept)
        if output is not None and output.all_logits is not None:
            if draft:
                self.drafts = ()  # (a forward that fed them as guesses answered here, or they were not needed)
            return output
        keep = min(kept, len(target) - 1)  # the last token's logits are needed
        new = tuple(target[keep:])
        furthest = new[0].position if len(new) == 1 else max(t.position for t in new)  # (one token: most requests)
        if self.max_positions is not None and furthest >= self.max_positions:
            raise ContextOverflowError(
                f"the stream needs position id {furthest}, beyond the model's context of "
                f"{self.max_positions} positions; split the input into shorter lines (or use a smaller slot / phi)")
        guesses: tuple[PlacedToken, ...] = ()
        if draft and self.execution.speculate and self.drafts and not self.current and target[-1].role.target_side:
            guesses = tuple(self.layout.placed_write(self.state, t, len(self.written)) for t in self.drafts)
            if self.max_positions is not None and guesses[0].position >= self.max_positions:
                guesses = ()
        if draft:
            self.drafts = ()  # one guess per READ
        alternatives, replaces, inner = max(0, len(guesses) - 1), None, True
        if draft and self.execution.speculate and self.execution.read_ahead and self.current and not guesses:
            (guesses, replaces), alternatives = self._reading_guess(), 0  # (a token it re-places is the list's
            # last, fed in this request: ``keep`` is below it)
            inner = not guesses  # (the proposal is wanted after the read: at the guess's last token alone)
        self.pending = ForwardRequest(keep, new + guesses, speculative=len(guesses) - alternatives,
                                      alternatives=alternatives, move=self.move, drop=self.drop, replaces=replaces,
                                      inner_answers=inner)
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
            guesses, alternatives = self._opening_guess() if self.execution.speculate else ((), ())
            state = self.stream_state()

            def writes(hidden: torch.Tensor, score: float | None) -> bool:  # asked by the engine, inside a forward
                # shared with others (``score``: the policy head's p(WRITE) of ``hidden``, for every row at once)
                try:
                    return self.policy.decide(replace(state, features=hidden, score=score)) is Action.WRITE
                except Exception:  # (this stream's own step raises it again, failing this stream alone; a head
                    return True  # that cannot score the features fails inside the forward: every stream of it)
            self.pending = replace(self.pending, tokens=self.pending.tokens + guesses + alternatives,
                                   speculative=len(guesses), alternatives=len(alternatives), logits=bool(guesses),
                                   logits_if=writes if guesses else None,
                                   decides=True, reads_on=(lambda hidden, score: not writes(hidden, score))
                                   if self.features_layer is not None and self.execution.stop_at_head else None)
        return self.pending is None


    # ---- steps -----------------------------------------------------------------------------------------------
    def _read(self) -> None:
        self.layout.read(self.state, self.units[self.state.units_read])
        self.read_ms.append((time.perf_counter() - self.t0) * 1000.0)
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
            self._tail = tuple(self.target_tokens[1 - n:])  # the (n-1)-gram a repeat would continue
        if self.logprobs:
            self.target_logprobs.append(self._held_logprob)
        self.accepted += 1
        self.held = self._scores = self._chosen_from = None

    def _commit(self, words: list[WrittenWord]) -> None:
        if not self.current:
            return
        tokens, self.current = tuple(self.current), []
        text = word_text(self.tokenizer, tokens)
        if not text:  # e.g. a lone space token: it stays in the target text but is not a word of its own
            return
        elapsed = (time.perf_counter() - self.t0) * 1000.0
        word = WrittenWord(len(self.written), text, tokens, self.current_delay, elapsed)
        self.written.append(word)
        self.target_sentences += has_terminal(text) and not text[:-1][-1:].isdigit()  # (a number's full stop: no)
        self.segment_words += 1
        if self._after_header():
            self.header_words += 1
        words.append(word)

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
            read_elapsed=[round(ms, 3) for ms in self.read_ms]  # (a failed sentence's unread words: read as it failed)
            + [round(wall, 3)] * (len(self.source_words) - len(self.read_ms) if self.error is not None else 0),
            early_ends=[list(e) for e in self.early_ends],
            header_words=self.header_words,
            error=str(self.error) if self.error is not None else None)
