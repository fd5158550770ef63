"""A stream's answers from the engine: what a served forward leaves in the stream, and the answer it holds at the
layout's last placed token.

A mixin of ``Stream`` (stream.py), which owns the state it reads and writes: ``fed`` (what the cache row holds),
``outputs`` (the last forward's answers by context length), the guessed and alternative answers (guesses.py), the
stopped forward (``stopped_at``) and the compute counts.
"""

from __future__ import annotations

import torch

from simulmt.core.head_scores import HeadScores
from simulmt.core.placed import common_prefix_length
from simulmt.core.requests import Answer, ForwardRequest
from simulmt.errors import SimulmtError


class Answers:
    @property
    def features(self) -> torch.Tensor | None:
        """The last hidden state of the layout's last placed token, if the last forward returned it."""
        return self.features_and_score(score=False)[0]

    def features_and_score(self, score: bool = True) -> tuple[torch.Tensor | None, float | None]:
        """``features``, and the policy head's p(WRITE) of them when the engine computes it (None: not computed;
        ``score=False``: not asked for, so not computed for this forward's rows: head_scores.py)."""
        output = self._output()
        if output is not None:
            return output.features, output.score if score else None
        if self.stopped_at is not None:  # the decision's features, if the layout's list is still what was fed
            keep, tokens, hidden, score = self.stopped_at
            placed = self.state.tokens
            if len(placed) == keep + len(tokens) and tuple(placed[keep:]) == tokens and placed[:keep] == self.fed:
                return hidden, score
        return None, None

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

    def receive(self, logits: torch.Tensor | None, flops: float, features: torch.Tensor | None = None,
                served: ForwardRequest | None = None, stopped: bool = False,
                best: list | None = None, first: tuple[int, int] = (0, 0),
                scores: HeadScores | None = None) -> None:
        """The engine served the pending request: the cache row now holds the layout's list (and the guessed tokens,
        if any were fed). ``logits``: its ``request.answered`` rows from row ``first[0]`` on (the
        forward's whole tensor: a row is taken out only when the stream uses its answer), None when the request
        asked for none (or its ``logits_if`` said no); ``features`` (the same answers from row ``first[1]`` on,
        hidden): the last hidden states, when the policy wants them. ``served``: the request as the engine served
        it, if not as posted (a forward shared by several streams leaves the alternatives out). ``stopped``: the
        forward stopped at the policy head's layer (the request's ``reads_on`` said so): the cache row holds the
        first ``keep`` tokens only, and ``features`` has the decision's row; the tokens are fed again, whole, with
        the next request. ``best``: per answer, ``Vocabulary.best`` of its logits, when the engine computed them
        (for all rows of the forward at once); ``scores``: the forward's policy-head scores of the features, likewise
        (head_scores.py: computed for every row when first asked)."""
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
        self.move = self.drop = None  # (the engine made them)
        self.replaced = request.replaces if request.speculative else None
        self.stopped_at = None
        if stopped:
            listed = request.tokens[:len(request.tokens) - request.speculative - request.alternatives]
            self.fed = self.fed[: request.keep]
            self.guessed = self.alternates = 0
            self.outputs, self.alternate_outputs, self.guessed_answers = {}, {}, set()
            self.stopped_at = (request.keep, tuple(listed), features[first[1]],
                               None if scores is None else scores.at(first[1]))
            self.tokens_fed += len(request.tokens)
            self.refed_tokens += len(listed)  # (they come again in the next forward)
            self.forward_calls += 1
            self.stopped_forwards += 1
            self.flops += flops
            return
        del self.fed[request.keep:]  # (in place: the list is the stream's own, and a copy costs by its length)
        self.fed += request.tokens
        speculative, alternatives = request.speculative, request.alternatives
        self.guessed, self.alternates = speculative + alternatives, alternatives
        chain = len(self.fed) - alternatives  # tokens up to the last guess, in cache order
        if not speculative and not alternatives:  # (most requests: one answer, at the list's last token)
            self.outputs = {chain: Answer(logits, first[0], features, first[1], None if best is None else best[0],
                                          scores)}
            self.guessed_answers, self.alternate_outputs = set(), {}
        else:
            answers = [Answer(logits, first[0] + i, features, first[1] + i, None if best is None else best[i],
                              scores) for i in range(request.answered)]
            guessed = request.guess_answers  # the guessed tokens answered: each, or the last alone
            self.outputs = {chain - speculative: answers[0]}
            for i in range(1, 1 + guessed):
                self.outputs[chain - guessed + i] = answers[i]
            self.guessed_answers = set(range(chain - guessed + 1, chain + 1))
            self.alternate_outputs = {chain + i: answers[1 + guessed + i] for i in range(alternatives)}
        self.tokens_fed += len(request.tokens)
        self.forward_calls += 1
        self.speculated += speculative + alternatives
        self.flops += flops
