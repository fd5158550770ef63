"""Group position encoding (GPE): source and target count positions in two separate groups.

    source group:  prompt 0 .. P-1, source tokens P, P+1, ... (as they are read)
    target group:  target opener at phi, phi+1, ..., then the target tokens

New source tokens join the cache after the target with their own group's next positions; the last target
token is deferred past them (base.py), as in expost. ``phi`` must exceed every source-group position.
"""

from __future__ import annotations

from simulmt.errors import SimulmtError
from simulmt.core.layouts.base import (Layout, LayoutState, keeps_placed, place, place_source_before_last_target,
                                      retract_tentative_opener)
from simulmt.core.placed import Role


class GroupPositions(Layout):
    name = "gpe"

    def __init__(self, phi: int = 256):
        if phi < 1:
            raise SimulmtError(f"gpe: phi (first target position) must be at least 1, got {phi}")
        self.phi = phi

    def read(self, state: LayoutState, unit: tuple[int, ...]) -> None:
        retract_tentative_opener(state)
        first = len(state.fmt.prompt) + state.source_tokens
        if first + len(unit) > self.phi:
            raise SimulmtError(f"gpe: the source group reached position {first + len(unit)}, past the target "
                               f"group's start phi={self.phi}; use a larger --phi for sources this long")
        place_source_before_last_target(state, unit, first)

    def read_keeps_list(self, state: LayoutState, unit: tuple[int, ...], moving_last: bool = False) -> bool:
        return keeps_placed(state, moving_last)

    def open_target(self, state: LayoutState) -> None:
        if not state.opened:
            place(state, state.fmt.target_opener, Role.TARGET_MARKER, self.phi)
            state.opened, state.target_written = True, False

    def describe(self) -> str:
        return f"gpe(phi={self.phi})"
