"""Cache reuse without slots (the ExPosST ablation): positions are inconsistent on purpose.

Streaming places every token at the position it would have in the contiguous offline layout *at the moment it
is placed*: ``prompt | source read so far | opener | target``. A source unit read after target text therefore gets
positions that collide with the cached opener and target, and the target written later jumps ahead. Training
uses the contiguous layout of the whole sentence (``training_view``), with the same time order and visibility.
The two disagree as soon as source arrives after target text: this layout does not satisfy the parity
invariant, and the test suite checks that it does not.
"""

from __future__ import annotations

from simulmt.core.layouts.base import (Layout, LayoutState, keeps_placed, place, place_source_before_last_target,
                                      retract_tentative_opener)
from simulmt.core.placed import PlacedToken, Role


class NaiveReuse(Layout):
    name = "naive"

    def read(self, state: LayoutState, unit: tuple[int, ...]) -> None:
        retract_tentative_opener(state)
        place_source_before_last_target(state, unit, len(state.fmt.prompt) + state.source_tokens)

    def read_keeps_list(self, state: LayoutState, unit: tuple[int, ...], moving_last: bool = False) -> bool:
        return keeps_placed(state, moving_last)

    def open_target(self, state: LayoutState) -> None:
        if not state.opened:
            first = len(state.fmt.prompt) + state.source_tokens
            place(state, state.fmt.target_opener, Role.TARGET_MARKER, first)
            state.opened, state.target_written = True, False

    def training_view(self, tokens: list[PlacedToken]) -> list[PlacedToken]:
        """Contiguous positions of the whole sentence: prompt, all source, opener, target (time order kept)."""
        source_side = [t for t in tokens if not t.role.target_side]
        target_side = [t for t in tokens if t.role.target_side]
        position = {id(t): i for i, t in enumerate(source_side + target_side)}
        return [t.moved_to(position[id(t)]) for t in tokens]
