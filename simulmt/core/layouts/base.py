"""What every layout is: a small state machine over placed tokens, driven by READ / open / WRITE events.

The same events drive both sides, so no layout logic is written twice:

* training (``simulmt.core.examples``) replays a whole sentence pair along a schedule and takes the final list of
  placed tokens as one training sequence;
* streaming inference (``simulmt.core.session``) sends the events as they happen and, before every proposal, feeds the
  model whatever part of the list is not already in the KV cache (cropping the cache where the list changed).

Events:

* ``read(state, unit)``: a source unit's tokens arrive.
* ``open_target(state)``: make the last placed token one whose output predicts the next target token.
* ``write(state, token, word)``: a target token (of target word ``word``) is accepted.
* ``write_end(state, token)``: the token that ends the translation (training only; never fed in streaming).

Deferral (the one-token rollback of docs/design.md §2): the token whose output predicts the first token of word j
must see the source read for word j. When a read comes after target text, layouts that append source into the
cache take the last target token off the list, place the new source, and put that token back after it. Its
position id does not change, only its place in time, so streaming crops it from the cache and feeds it again
together with the new source: one forward, exact parity with training.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from simulmt.core.placed import PlacedToken, Role
from simulmt.core.prompt_format import PromptFormat
from simulmt.core.visibility import Visibility


@dataclass
class LayoutState:
    fmt: PromptFormat
    tokens: list[PlacedToken] = field(default_factory=list)  # time order == KV cache order
    units_read: int = 0
    source_tokens: int = 0  # source tokens placed so far
    opened: bool = False  # a target opener is placed for the current slot / turn
    target_written: bool = False  # target tokens follow that opener
    new_slots: int = 0  # slots opened after target text (expost; issue 42 counts early ends after one)

    @property
    def next_position(self) -> int:
        return self.tokens[-1].position + 1 if self.tokens else 0


class Layout(ABC):
    name: ClassVar[str]
    visibility: ClassVar[Visibility] = Visibility(source_sees_target=False)
    reuses_cache: ClassVar[bool] = True  # False: the target prefix is recomputed at reads

    def start(self, fmt: PromptFormat) -> LayoutState:
        state = self.new_state(fmt)
        place(state, fmt.prompt, Role.PROMPT, 0)
        return state

    def new_state(self, fmt: PromptFormat) -> LayoutState:
        return LayoutState(fmt)

    @abstractmethod
    def read(self, state: LayoutState, unit: tuple[int, ...]) -> None: ...

    @abstractmethod
    def open_target(self, state: LayoutState) -> None: ...

    def read_keeps_list(self, state: LayoutState, unit: tuple[int, ...], moving_last: bool = False) -> bool:
        """Would ``read(state, unit)`` now leave every token placed so far where it is (``moving_last``: but perhaps
        the last one, moved after what the read places, as expost defers its last target token)? A stream guesses
        ahead of a read (read-ahead, guesses.py) only then: a read that moves or takes back placed tokens (prefix
        taking the target off, a tentative opener retracted) makes the guess wrong whatever it is. True unless the
        layout knows better; saying True where it is not only costs the guess's placing."""
        return True

    def write(self, state: LayoutState, token_id: int, word: int) -> None:
        if not state.tokens[-1].role.target_side:
            raise RuntimeError(f"{self.name}: write before open_target")
        state.tokens.append(self.placed_write(state, token_id, word))
        state.target_written = True

    def placed_write(self, state: LayoutState, token_id: int, word: int) -> PlacedToken:
        """The token ``write`` would place now (a stream feeds it as a draft before the token is accepted)."""
        return PlacedToken(token_id, state.next_position, Role.TARGET, word)

    def write_end(self, state: LayoutState, token_id: int) -> None:
        state.tokens.append(PlacedToken(token_id, state.next_position, Role.END))

    def segment_ends(self, fmt: PromptFormat) -> tuple[int, ...]:
        """Tokens that end a segment but never the translation: once the source is complete, they are not
        proposed (there is nothing left to read)."""
        return ()

    def continues_text(self, state: LayoutState) -> bool:
        """Does the next target token continue the target text directly (no marker in between)?"""
        return bool(state.tokens) and state.tokens[-1].role is Role.TARGET

    def context_ids(self, fmt: PromptFormat, source: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
        """A finished sentence pair as context before a later sentence of the same talk (talk.py): appended to the
        prompt, it ends where a new sentence's source begins: a finished turn of the conversation, whatever the
        layout."""
        return source + fmt.target_opener + target + fmt.turn_end + fmt.user_header

    def training_view(self, tokens: list[PlacedToken]) -> list[PlacedToken]:
        """The placed list that training uses for the final list of a sentence (the same, except for ``naive``)."""
        return tokens

    def describe(self) -> str:
        return self.name


def place(state: LayoutState, ids: tuple[int, ...], role: Role, first_position: int, unit: int = -1) -> None:
    """Append ``ids`` with consecutive positions starting at ``first_position``."""
    for i, token_id in enumerate(ids):
        state.tokens.append(PlacedToken(token_id, first_position + i, role, unit))


def retract_tentative_opener(state: LayoutState) -> None:
    """An opener with no target text after it was only placed to ask for a proposal: take it back.

    It is placed again by the next ``open_target``, after the new source, so that it sees it.
    """
    if state.opened and not state.target_written:
        while state.tokens and state.tokens[-1].role is Role.TARGET_MARKER:
            state.tokens.pop()
        state.opened = False


def keeps_placed(state: LayoutState, moving_last: bool = False) -> bool:
    """Do ``retract_tentative_opener`` and ``place_source_before_last_target`` leave every placed token where it is
    (no tentative opener to take back; a last target token to defer only if ``moving_last`` allows it)?"""
    last = state.tokens[-1].role if state.tokens else None
    if state.opened and not state.target_written and last is Role.TARGET_MARKER:
        return False
    return moving_last or not (state.target_written and last is Role.TARGET)


def place_source_before_last_target(state: LayoutState, unit: tuple[int, ...], first_position: int) -> None:
    """Place a source unit; if target text ends the list, its last token is moved after the unit (deferral)."""
    deferred = state.tokens.pop() if state.target_written and state.tokens[-1].role is Role.TARGET else None
    place(state, unit, Role.SOURCE, first_position, unit=state.units_read)
    if deferred is not None:
        state.tokens.append(deferred)
    state.units_read += 1
    state.source_tokens += len(unit)
