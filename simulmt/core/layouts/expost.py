"""ExPosST: source tokens fill a reserved slot of position ids, so target positions never move.

Positions (L = slot length; P = prompt length; m = target opener; u = user header)::

    prompt        slot 1 (L positions)          target segment 1
    0 .. P-1  |  P .. P+L-1 (filled as read)  |  P+L: m  t1 t2 t3 ...
                                                       ^ a source unit that does not fit in the slot opens
    ... t_n | u (new slot header) | slot 2: S .. S+L-1 | S+L: m  t_{n+1} ...   where S = pos(t_n) + 1 + len(u)

* Before any target text follows the current slot, the slot simply grows by L when the source does not fit.
* After target text, a unit that fits goes into the slot (its positions are below the target's, but it joins
  the cache after the target: no target key is recomputed); the last target token is deferred past it (base.py).
* A unit that does not fit opens a new slot right after the current output (with the chat role markers).
  Unused slot positions are skipped, not padded.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulmt.errors import SimulmtError
from simulmt.core.layouts.base import (Layout, LayoutState, keeps_placed, place, place_source_before_last_target,
                                      retract_tentative_opener)
from simulmt.core.placed import Role
from simulmt.core.prompt_format import PromptFormat


@dataclass
class ExpostState(LayoutState):
    slot_start: int = 0
    slot_capacity: int = 0
    slot_used: int = 0


class Expost(Layout):
    name = "expost"

    def __init__(self, slot: int = 16):
        if slot < 1:
            raise SimulmtError(f"slot length must be at least 1, got {slot}")
        self.slot = slot

    def new_state(self, fmt: PromptFormat) -> ExpostState:
        return ExpostState(fmt)

    def start(self, fmt: PromptFormat) -> ExpostState:
        state = super().start(fmt)
        state.slot_start, state.slot_capacity = len(fmt.prompt), self.slot
        return state

    def read(self, state: ExpostState, unit: tuple[int, ...]) -> None:
        retract_tentative_opener(state)
        fits = state.slot_used + len(unit) <= state.slot_capacity
        if state.opened and not fits:  # target text follows this slot: open a new one after the output
            header = state.fmt.turn_end + state.fmt.user_header
            place(state, header, Role.SOURCE_MARKER, state.next_position)
            self._new_slot(state, state.next_position)
            state.opened = state.target_written = False
        self._fill_slot(state, unit)

    def read_keeps_list(self, state: ExpostState, unit: tuple[int, ...], moving_last: bool = False) -> bool:
        if state.opened and state.target_written and state.slot_used + len(unit) > state.slot_capacity:
            return True  # a new slot after the output: the read only appends
        return keeps_placed(state, moving_last)  # (else the last target token moves after the unit)

    @staticmethod
    def _new_slot(state: ExpostState, start: int) -> None:
        """An empty slot from position ``start`` on (it grows as units arrive, until target text follows it)."""
        state.slot_start, state.slot_capacity, state.slot_used = start, 0, 0
        state.new_slots += 1

    def _fill_slot(self, state: ExpostState, unit: tuple[int, ...]) -> None:
        """Place ``unit`` in the current slot, grown by whole slot lengths while it does not fit (no target text
        follows it yet, or the caller would have opened a new one)."""
        while state.slot_used + len(unit) > state.slot_capacity:
            state.slot_capacity += self.slot
        place_source_before_last_target(state, unit, state.slot_start + state.slot_used)
        state.slot_used += len(unit)

    def open_target(self, state: ExpostState) -> None:
        if not state.opened:
            place(state, state.fmt.target_opener, Role.TARGET_MARKER, state.slot_start + state.slot_capacity)
            state.opened, state.target_written = True, False

    def describe(self) -> str:
        return f"expost(slot={self.slot})"
