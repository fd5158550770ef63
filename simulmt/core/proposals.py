"""A stream's proposal: the model's next token under the decoding rules, and what the stream logs of the rules.

A mixin of ``Stream`` (stream.py), which owns the state: the rules' bounds (``config``: decoding.py), the
vocabulary's tables, the n-grams of the target so far, the early ends logged (an end proposed before the source
finished, with its cause and whether a new slot or turn had opened: the rate issue 42's experiments measure).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from simulmt.core.decoding import Rules
from simulmt.core.sentence_ends import has_terminal
from simulmt.core.vocabulary import word_text
from simulmt.core.placed import Role
from simulmt.core.requests import Answer
from simulmt.core.translation import Proposal
from simulmt.errors import SimulmtError

_NONE: frozenset[int] = frozenset()  # no token banned


class Proposals:
    def _note_early_end(self, token: int) -> None:
        """An end before the source finished (a READ follows): why, and where (``early_ends``)."""
        cause = self._held_cause
        if cause == "model":
            ends = {self.fmt.end_id, self.fmt.end_of_write, self.fmt.end_of_translation, self.tokenizer.eos_token_id}
            cause = "end" if token in ends else ("newline" if not self.fmt.chat else "stop")
        words = sum(len(w.text.split()) for w in self.written)  # (words of the prediction, as its delays count)
        self.early_ends.append((words, cause, self._after_header()))

    def _after_header(self) -> bool:
        """Has a new slot (expost's, marked or not) or turn header (a source marker) been placed in this
        sentence?"""
        if not self._header_seen and self.state.new_slots:
            self._header_seen = True
        if not self._header_seen:
            tokens = self.state.tokens
            for i in range(min(self._header_scan, len(tokens)), len(tokens)):
                if tokens[i].role is Role.SOURCE_MARKER:
                    self._header_seen = True
                    break
            self._header_scan = len(tokens)
        return self._header_seen

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

    def _propose(self, answer: Answer) -> int:
        """The next token from the answer's logits under the decoding rules. A greedy sampler's choice is the best
        allowed token: where the engine found it for every row at once (``answer.best``) and the rules it does not
        know allow it, it is taken as it is, with no pass over the vocabulary here (nor the logits' row taken out:
        ``Answer``)."""
        best = answer.best
        if self.forced is not None:
            if self.accepted >= len(self.forced):
                raise SimulmtError("teacher forcing ran past the forced target")
            if self.logprobs:
                token, self._held_logprob = self.sampler.choose(answer.logits, self.accepted)
            else:  # the forced token, with no pass over the vocabulary (nor the logits' row taken out)
                token, self._held_logprob = self.forced[self.accepted][0], float("nan")
        else:
            rules = self._rules()
            picks_best = best is not None and getattr(self.sampler, "picks_best", False)
            token = self._best_allowed(best, rules) if picks_best else None
            if token is not None:
                self._scores, self._chosen_from = None, (answer, rules)
                if self.logprobs:
                    self._held_logprob = float(torch.log_softmax(self._allowed(answer.logits, rules).float(),
                                                                 -1)[token])
            else:
                self._scores, self._chosen_from = self._allowed(answer.logits, rules), None
                token, self._held_logprob = self.sampler.choose(self._scores, self.accepted)
            self.choices[len(self.state.tokens)] = token  # what the model chose, before any rule below overrides it
            self._held_cause = "model"
            if token in self._repeat_bans():
                # the model wants to repeat itself: it has nothing new to say, which is an end proposal
                # (a READ before the source is finished); where the policy forbids that, its next best token
                if self.source_finished or (self.policy.lets_model_end_segment and self.config.early_end == "read"):
                    token, self._held_cause = self.fmt.end_id, "repeat"
                else:
                    scores = self._allowed(answer.logits, rules)
                    scores[list(self._repeat_bans())] = -torch.inf
                    token, self._held_logprob = self.sampler.choose(scores, self.accepted)
        if self.record:
            self.proposals.append(Proposal(tuple(self.state.tokens), answer.logits, token))
        return token


    def _repeat_bans(self) -> set[int] | frozenset[int]:
        """``repeated_ngram_bans`` of the target so far, from the n-grams kept as it grew."""
        return self._ngrams.get(self._tail, _NONE) if self._tail else _NONE

    def _rules(self) -> Rules:
        """Which decoding rules exclude tokens now (besides the special tokens, always excluded)."""
        finished = self.source_finished
        return Rules.of(stops=not finished and (not self.policy.lets_model_end_segment
                                                or self.config.early_end == "ban"),
                        segment_ends=bool(finished and self.segment_ends),  # e.g. end-of-write: nothing is left to
                        # read
                        word_start=bool(not self.current and self.written and self.layout.continues_text(self.state)),
                        # the previous word is complete: the next token must start a new word (or end)
                        sentence_end=self.config.sentence_end == "source" and self._ahead_of_source())

    def _ahead_of_source(self) -> bool:
        """``sentence_end="source"``: would a sentence end now put the target ahead of the source read? Never once
        the source is finished, nor after a number (a full stop there is an ordinal's or an abbreviation's)."""
        if self.source_finished or (self.current and word_text(self.tokenizer, tuple(self.current))[-1:].isdigit()):
            return False
        read = sum(has_terminal(w) for w in self.source_words[:self.state.units_read])
        return self.target_sentences >= read

    def _best_allowed(self, best: Sequence[int], rules: Rules) -> int | None:
        """The best token the rules allow, from the engine's best tokens (``Vocabulary.best``: without the special
        tokens, and without them and the stops); None where it cannot tell (a rule excludes that token, or no token
        is left): the scores must be looked at."""
        token = best[1] if rules.stops else best[0]
        if token < 0 or (rules.segment_ends and token in self.segment_ends):
            return None
        if rules.word_start and not (self.vocabulary.is_word_start(token) or self.vocabulary.is_stop(token)):
            return None
        if rules.sentence_end and self.vocabulary.is_sentence_end(token) and not self.vocabulary.is_stop(token):
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
        if rules.sentence_end:
            scores = scores + v.bias("sentence_ends", logits.device)
        if len(logits) > len(scores):  # logits beyond the tokenizer's vocabulary are never proposed
            scores = torch.cat([scores, logits.new_full((len(logits) - len(scores),), float("-inf"))])
        return scores
