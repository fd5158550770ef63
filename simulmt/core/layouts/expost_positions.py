"""ExPosST whose later slots are marked by their position ids alone (issue 42, E3: the separator).

``expost`` opens a new slot after target text with the chat turn markers (``turn_end + user_header``, then the
target opener): a segment after a new slot looks like a fresh, finished request, and the model ends it early.
Here a new slot has no header and no opener: its source follows the output at the positions after the last
target token, that token is deferred past it (as a source unit that fits its slot is), and the target goes on
at the positions after the slot::

    prompt | slot 1: P .. P+L-1 | m t1 .. t_n-1 | slot 2: S .. S+L-1 | t_n | t_n+1 (position S+L) ...
                                                   S = pos(t_n) + 1

So the token before a new slot is labelled with the next target token (its output, which now sees the new
source, predicts it), and nothing in the sequence says "a new request" but the jump in positions. The first slot
is expost's own (prompt, source, opener). The rest (slot growth before any target follows it, deferral, the
visibility rule) is ``expost``'s. Measured (docs/slot-boundaries.md): without the header the model ends early after
a new slot more often, not less.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulmt.core.layouts.base import keeps_placed
from simulmt.core.layouts.expost import Expost, ExpostState
from simulmt.core.placed import PlacedToken, Role
from simulmt.core.prompt_format import PromptFormat


@dataclass
class ExpostPositionsState(ExpostState):
    slot_followed: bool = True  # target text follows the current slot (False from a new slot to the next write)


class ExpostPositions(Expost):
    name = "expost-positions"

    def new_state(self, fmt: PromptFormat) -> ExpostPositionsState:
        return ExpostPositionsState(fmt)

    def read(self, state: ExpostPositionsState, unit: tuple[int, ...]) -> None:
        if not state.target_written:  # before any target text: expost's first slot
            super().read(state, unit)
            return
        if state.slot_followed and state.slot_used + len(unit) > state.slot_capacity:
            self._new_slot(state, state.tokens[-1].position + 1)  # after the last target token, unmarked
            state.slot_followed = False
        self._fill_slot(state, unit)

    def read_keeps_list(self, state: ExpostPositionsState, unit: tuple[int, ...], moving_last: bool = False) -> bool:
        if not state.target_written:
            return super().read_keeps_list(state, unit, moving_last)
        return keeps_placed(state, moving_last)

    def open_target(self, state: ExpostPositionsState) -> None:
        if not state.target_written:
            super().open_target(state)
        # else the last target token (deferred past any new source) is the query: nothing to place

    def placed_write(self, state: ExpostPositionsState, token_id: int, word: int) -> PlacedToken:
        return PlacedToken(token_id, self._next_target_position(state), Role.TARGET, word)

    def write(self, state: ExpostPositionsState, token_id: int, word: int) -> None:
        super().write(state, token_id, word)
        state.slot_followed = True

    def write_end(self, state: ExpostPositionsState, token_id: int) -> None:
        state.tokens.append(PlacedToken(token_id, self._next_target_position(state), Role.END))

    @staticmethod
    def _next_target_position(state: ExpostPositionsState) -> int:
        """After the last target token, or after a new slot that no target text follows yet."""
        if state.slot_followed:
            return state.next_position
        return state.slot_start + state.slot_capacity

    def describe(self) -> str:
        return f"expost-positions(slot={self.slot})"
