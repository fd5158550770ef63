"""Conversational SimulMT: an append-only chat, one user turn per source chunk, one assistant turn per target chunk.

    prompt+instruction | s1 s2 | opener | t1 t2 <end_of_turn> | \\n<start_of_turn>user\\n | s3 | opener | t3 ...

The end-of-turn token that closes a target chunk is predicted (a label in training); the model ends its own
segments under read-n, and a policy that reads mid-turn (wait-k) closes the turn with it. Attention is plain
causal, as in any chat (source turns see earlier target turns). Positions are contiguous: nothing is ever
re-fed except a tentative opener.
"""

from __future__ import annotations

from simulmt.core.layouts.base import Layout, LayoutState, place, retract_tentative_opener
from simulmt.core.placed import Role
from simulmt.core.visibility import Visibility


class Conversation(Layout):
    name = "conversation"
    visibility = Visibility(source_sees_target=True)

    def read(self, state: LayoutState, unit: tuple[int, ...]) -> None:
        retract_tentative_opener(state)
        if state.opened:  # a target turn is open: it ends here
            self.close_target(state)
            state.opened = state.target_written = False
        place(state, unit, Role.SOURCE, state.next_position, unit=state.units_read)
        state.units_read += 1
        state.source_tokens += len(unit)

    def close_target(self, state: LayoutState) -> None:
        """Close the open target turn (its end token: a label) and open a user turn."""
        place(state, state.fmt.turn_end, Role.END, state.next_position)
        place(state, state.fmt.user_header, Role.SOURCE_MARKER, state.next_position)

    def open_target(self, state: LayoutState) -> None:
        if not state.opened:
            place(state, state.fmt.target_opener, Role.TARGET_MARKER, state.next_position)
            state.opened, state.target_written = True, False
