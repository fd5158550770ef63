"""EASiST's interleaved format: source chunks and target chunks alternate, separated by marker tokens.

    prompt | s1 s2 s3 | <|end-of-read|> | t1 t2 | <|end-of-write|> | s4 s5 | <|end-of-read|> | t3 ...
           ... <|end-of-translation|>

A policy decides when to write (a learned policy head, or wait-k / read-n): the layout then places the
end-of-read marker, and the model writes target words until it predicts the end-of-write token. The translation
ends with ``<|end-of-translation|>`` where the tokenizer has it (``simulmt.core.markers``: once the source is
complete, end-of-write, which asks for more source, may not be proposed), else with end-of-write, as every chunk.
A policy that reads while a chunk is open (wait-k) closes it with an end-of-write token. Append-only with
contiguous positions, so the KV cache is always reused; attention is plain causal, as in EASiST's training (source
chunks see earlier target chunks). It is the conversation layout with markers instead of chat turns. The markers
are tokens the model must have: ``simulmt.core.markers.add_interleaved_markers``.
"""

from __future__ import annotations

from simulmt.core.layouts.base import LayoutState, place
from simulmt.core.layouts.conversation import Conversation
from simulmt.core.placed import PlacedToken, Role
from simulmt.core.prompt_format import END_OF_READ, END_OF_WRITE, PromptFormat
from simulmt.errors import SimulmtError


class Interleaved(Conversation):
    name = "interleaved"

    def start(self, fmt: PromptFormat) -> LayoutState:
        if fmt.end_of_read is None or fmt.end_of_write is None:
            raise SimulmtError(f"the interleaved layout needs the marker tokens {END_OF_READ} and {END_OF_WRITE}, "
                               f"which this model's tokenizer lacks: use a model fine-tuned with the interleaved "
                               f"recipe (its adapter carries them), or add them with "
                               f"simulmt.core.markers.add_interleaved_markers(model, tokenizer) before building the "
                               f"Translator")
        return super().start(fmt)

    def close_target(self, state: LayoutState) -> None:
        """An open target chunk ends with the end-of-write token (a label); the next source chunk follows at once."""
        place(state, (state.fmt.end_of_write,), Role.END, state.next_position)

    def open_target(self, state: LayoutState) -> None:
        if not state.opened:
            place(state, (state.fmt.end_of_read,), Role.TARGET_MARKER, state.next_position)
            state.opened, state.target_written = True, False

    def write_end(self, state: LayoutState, token_id: int) -> None:
        """The translation ends with the end-of-translation token, or (two markers) as every chunk does, with the
        end-of-write token (whatever end token was given)."""
        end = state.fmt.end_of_translation if state.fmt.end_of_translation is not None else state.fmt.end_of_write
        state.tokens.append(PlacedToken(end, state.next_position, Role.END))

    def context_ids(self, fmt: PromptFormat, source: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
        """A finished pair as context: its one chunk, as the interleaved translation ends."""
        end = fmt.end_of_translation if fmt.end_of_translation is not None else fmt.end_of_write
        return source + (fmt.end_of_read,) + target + (end,)

    def segment_ends(self, fmt: PromptFormat) -> tuple[int, ...]:
        """End-of-write asks for more source: with an end-of-translation token, it cannot end the translation."""
        return (fmt.end_of_write,) if fmt.end_of_translation is not None else ()
