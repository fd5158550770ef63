"""Prefix layout with recomputation (the Simul-LLM / prefix fine-tuning baseline).

Always contiguous: ``prompt | source read so far | opener | target so far``. A read takes the opener and the
whole target off the list, appends the source, and the next ``open_target`` places the opener and the target
again at their new positions. Streaming keeps the cache of prompt and old source and recomputes the new source
and the whole target prefix: its cost grows with the square of the target length. Training uses one example per
read point (prefix pairs), see ``simulmt.core.examples``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulmt.core.layouts.base import Layout, LayoutState, place
from simulmt.core.placed import PlacedToken, Role
from simulmt.core.prompt_format import PromptFormat


@dataclass
class PrefixState(LayoutState):
    target: list[PlacedToken] = field(default_factory=list)  # target tokens taken off the list at a read


class PrefixRecompute(Layout):
    name = "prefix"
    reuses_cache = False

    def new_state(self, fmt: PromptFormat) -> PrefixState:
        return PrefixState(fmt)

    def read(self, state: PrefixState, unit: tuple[int, ...]) -> None:
        if state.opened:
            state.target = [t for t in state.tokens if t.role is Role.TARGET]
            state.tokens = [t for t in state.tokens if not t.role.target_side]
            state.opened = False
        place(state, unit, Role.SOURCE, state.next_position, unit=state.units_read)
        state.units_read += 1
        state.source_tokens += len(unit)

    def read_keeps_list(self, state: PrefixState, unit: tuple[int, ...], moving_last: bool = False) -> bool:
        return not state.opened  # (an opened target is taken off at a read)

    def open_target(self, state: PrefixState) -> None:
        if not state.opened:
            place(state, state.fmt.target_opener, Role.TARGET_MARKER, state.next_position)
            for t in state.target:
                state.tokens.append(t.moved_to(state.next_position))
            state.target, state.opened = [], True
            state.target_written = any(t.role is Role.TARGET for t in state.tokens)
