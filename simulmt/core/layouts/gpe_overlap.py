"""GPE as its authors' code sets it up (issue 42, E4): both position groups count from 0, so they overlap.

``gpe`` (gpe.py) starts the target group at ``phi`` (default 256) and refuses a source that reaches it, so its
groups never overlap: a stronger GPE than the one the ExPosST paper argues against ("the relative positional
intervals between source tokens and target tokens in GPE may be zero or fractional"). Here the target group starts
at 0, as in GPE's own code (its default phi = 0)::

    source group:  prompt 0 .. P-1, source tokens P, P+1, ...
    target group:  target opener 0, 1, ..., then the target tokens (sharing positions with the prompt and source)

GPE's positions may also be fractional, which the integer position ids of the models simulmt serves cannot carry,
so this layout keeps whole positions. Everything else (deferral, visibility) is ``gpe``'s.
"""

from __future__ import annotations

from simulmt.core.layouts.base import LayoutState, place_source_before_last_target, retract_tentative_opener
from simulmt.core.layouts.gpe import GroupPositions


class GroupPositionsOverlap(GroupPositions):
    name = "gpe-overlap"

    def __init__(self):
        self.phi = 0

    def read(self, state: LayoutState, unit: tuple[int, ...]) -> None:
        retract_tentative_opener(state)
        place_source_before_last_target(state, unit, len(state.fmt.prompt) + state.source_tokens)

    def describe(self) -> str:
        return "gpe-overlap"
