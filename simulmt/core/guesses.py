"""A stream's speculation: guesses of what its layout places next, fed in the forward it needs anyway.

Guesses (speculative decoding with a free draft). A READ between two target words costs a forward that offline
decoding does not have: the new source must be fed before the next proposal. The stream makes that forward also
feed its guess of what comes next, placed as the layout would place it, and asks for the answers at those tokens
too: after a READ, the target token the model wanted to write before it (or its best token that is not an end,
when it ended its segment); with a learned policy, whose hidden state after a read is fed in a forward of its own,
also the opener a WRITE would place. A guess the layout then places is in the cache already and its answer is at
hand (no forward); a wrong one is dropped from the cache row at the next forward (not a crop of the layout's
list). The output is exactly the same either way (``Execution.speculate``: tests/test_speculation.py).


Read-ahead (``Execution.read_ahead``): when the source a READ would read is here already (text given whole, or words
that came in the speech block of the last word read), the READ need not wait for the next proposal to be fed. The
forward of a word's token then also feeds, as a guess, what the layout would place if the word ended there and a
policy that decides on counts (wait-k, read-n) read until it writes: the READ's closing token, the units, the next
opener. If the word ends there, the answer at the opener is at hand after the read (one forward instead of two); if
it goes on, the guess is dropped. Interleaved wait-3 on 20 Multi30k sentences given whole: 1.44 -> 1.10 forwards per
target token, 0.81x the time, the same output (a learned policy, which decides on the hidden state after the read,
gets none).

Where the read moves the list's last token after the units (expost's, gpe's and naive's deferral of the last
target token), the guess is the units and that token placed again (``ForwardRequest.replaces``: the guessed tokens
do not see its first copy). If the word ends there, the row without the first copy is the layout's list: the next
request takes it out (``ForwardRequest.drop``), and the read costs no forward of its own
(``Execution.moved_guesses``).

The draft is the model's first choice before the read; its next choices (``Execution.alternatives`` of them, none by
default) can be fed in the same forward as alternatives: each at the draft's place (same position id), seeing what
the draft sees but not the draft nor each other (the engine's mask), so each one's answer is what it would be in the
draft's place. When the layout places one of them, the stream asks the next forward to move its keys and values into
the draft's cache slot (``ForwardRequest.move``) and uses its answer: its list is then as if that token had been fed
there.

"""

from __future__ import annotations

from dataclasses import replace

import torch

from simulmt.core.placed import PlacedToken, common_prefix_length
from simulmt.core.policies import Action


class Guesses:
    """The speculation part of ``Stream`` (stream.py): it reads and sets the stream's own fields."""

    def _scratch_state(self):
        """A copy of the layout's state to try placements on (its lists copied: the stream's own stay as they are)."""
        scratch = object.__new__(type(self.state))  # (``copy.copy`` without its generic protocol: every round)
        scratch.__dict__.update({k: list(v) if isinstance(v, list) else v for k, v in vars(self.state).items()})
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

    def _reading_guess(self) -> tuple[tuple[PlacedToken, ...], int | None]:
        """Read-ahead: the word being written may end at the proposal this forward answers, and a policy that decides
        on counts alone may then read before it writes again. When the units it would read are here already, the
        tokens the layout would place for them (what a READ closes, the units, the opener of the next target) are
        fed after the last target token as a guess: after the read, the answer at the opener is at hand, and the
        read costs no forward of its own. A wrong guess (the word goes on) is dropped at the next forward.

        Only units of the arrival of the last unit read (or an earlier one) are read ahead: a simulation that pushes
        a whole speech file with each word's arrival must not compute a word before its block has come (which would
        flatter its computation-aware latency); a live stream's words of one block, or a text given whole (one
        arrival), are here.

        Where the read moves the list's last token after what it places (expost's deferral of the last target
        token), the guess starts with what the read places and places that token again; the cache row then holds it
        twice, and if the guess is used the first leaves the row (returned: its index, ``ForwardRequest.replaces``;
        ``_settle_guesses``). Returns the guessed tokens and that index (None: the guess only appends)."""
        if self.wants_features or not 0 < self.state.units_read < len(self.units):
            return (), None
        if not self.layout.read_keeps_list(self.state, self.units[self.state.units_read], self._moves_guess()):
            return (), None  # (the read would move or take back placed tokens: no guess can be right)
        arrived = self.arrivals[self.state.units_read - 1]  # read ahead only what came with what was read
        state = self.stream_state()
        state = replace(state, target_words=state.target_words + 1, segment_words=state.segment_words + 1,
                        model_ended_segment=False, source_waiting=0)  # as if the word ended here
        if self.policy.decide(state) is not Action.READ:
            return (), None
        scratch = self._scratch_state()
        while self.policy.decide(state) is Action.READ:
            if scratch.units_read >= len(self.units) or self.arrivals[scratch.units_read] > arrived:
                return (), None  # it would wait for more source (a later arrival): that forward comes when it does
            self.layout.read(scratch, self.units[scratch.units_read])
            state = replace(state, source_read=scratch.units_read, segment_reads=state.segment_reads + 1,
                            segment_words=0, source_finished=(self.stream_finished
                                                              and scratch.units_read == len(self.units)))
        self.layout.open_target(scratch)
        n, replaces = len(self.state.tokens), None
        if scratch.tokens[:n] != self.state.tokens or len(scratch.tokens) == n:
            last = self.state.tokens[-1]
            if not (self._moves_guess() and scratch.tokens[:n - 1] == self.state.tokens[:n - 1]
                    and last in scratch.tokens[n:]):
                return (), None
            n, replaces = n - 1, n - 1  # the read moved the last token after what it placed: the guess places it
        guesses = tuple(scratch.tokens[n:])
        if self.max_positions is not None and max(t.position for t in guesses) >= self.max_positions:
            return (), None
        return guesses, replaces

    def _moves_guess(self) -> bool:
        """May a guess place a cached token again (``_reading_guess``)? Not where a source-side token sees target
        keys by their index in the row (``earlier_slots``: the row's indices change when the first copy leaves)."""
        return self.execution.moved_guesses and not self.layout.visibility.earlier_slots

    def _settle_guesses(self) -> None:
        """The layout placed more tokens: those that are the guesses the cache row holds are the layout's now. Where
        it placed an alternative instead of the last guess, the alternative takes the guess's place; where the read
        moved the token a guess re-places (``replaces``), the first copy leaves the row."""
        if self.replaced is not None:
            self._settle_replaced()
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

    def _settle_replaced(self) -> None:
        """The guess after the cached token at ``replaced`` placed that token again after what a read places: if the
        layout's list now goes on with the guess where that token was, the read happened as guessed. The token
        leaves the row (the next request's ``drop``) and the row's answers after it move down by one. It counts as
        the crop and the re-fed token that the read costs without the guess."""
        h = self.replaced
        tokens, fed = self.state.tokens, self.fed
        if not (len(tokens) > h and h + 1 < len(fed) and tokens[h] == fed[h + 1]
                and common_prefix_length(fed, tokens) >= h):
            return
        self.replaced, self.drop = None, h
        self.fed = fed[:h] + fed[h + 1:]
        self.outputs = {k - 1: v for k, v in self.outputs.items() if k > h + 1}  # (the answer at the moved token
        # itself was used: it proposed the word end that made the read)
        self.guessed_answers = {k - 1 for k in self.guessed_answers if k > h + 1}
        self.cache_crops += 1
        self.refed_tokens += 1

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
        if first and not self.execution.alternatives:  # (the default: no pass over the vocabulary)
            return first
        if self._scores is None:  # the proposal was the engine's best token: its best that is not a stop
            answer, rules = self._chosen_from
            best = answer.best
            if not self.execution.alternatives:
                token = self._best_allowed(best, replace(rules, stops=True))
                if token is not None or best[1] < 0:
                    return () if token is None else (token,)
            self._scores = self._allowed(answer.logits, rules)  # (a rule it does not know: as before, from the scores)
        scores = self._scores[: len(self.vocabulary.stops)] + self.vocabulary.bias("stops", self._scores.device)
        if first:
            scores[first[0]] = float("-inf")
        best = torch.topk(scores, 1 + self.execution.alternatives - len(first))
        return (first + tuple(int(t) for t, v in zip(best.indices, best.values) if v > float("-inf")))[
            : 1 + self.execution.alternatives]
