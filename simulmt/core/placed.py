"""Placed tokens: the one representation shared by training and streaming inference.

Every token the model sees is a ``PlacedToken``: its id, its explicit position id, its role, and which source unit
or target word it belongs to. A layout (``simulmt.core.layouts``) decides which tokens exist, their order and their
positions; the visibility rule (``simulmt.core.visibility``) decides who may attend to whom. The list of placed tokens
is kept in *time order*: the order in which streaming inference feeds them, which is also the order of the KV
cache. Training lays out the same list for a whole sentence and runs one forward pass over it.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class Role(str, Enum):
    PROMPT = "prompt"  # instruction and chat header before the first source token
    SOURCE = "source"  # a token of a source unit (a word of the source text)
    SOURCE_MARKER = "source_marker"  # opens a new source slot or user turn (chat role markers)
    TARGET_MARKER = "target_marker"  # opens the target side (closes the user turn, opens the assistant turn)
    TARGET = "target"  # a token of a target word
    END = "end"  # a predicted token that ends a target segment or the sentence (end-of-turn, eos)

    # (plain attributes, set below for each member: the engine asks them of every token, and an enum's property
    # costs a descriptor call each time)
    target_side: bool  # target-side tokens may see source-side ones; the reverse is the layout's choice
    predicted: bool  # tokens the model is trained to predict (labels); markers are forced by the layout


for _role in Role:
    _role.target_side = _role in (Role.TARGET_MARKER, Role.TARGET, Role.END)
    _role.predicted = _role in (Role.TARGET, Role.END)
del _role


class PlacedToken(NamedTuple):
    """(A named tuple: made, compared and hashed in C; the engine compares a stream's lists every step.)"""

    token_id: int
    position: int
    role: Role
    unit: int = -1  # source unit index for SOURCE, target word index for TARGET, -1 otherwise

    def moved_to(self, position: int) -> "PlacedToken":
        return PlacedToken(self.token_id, position, self.role, self.unit)


def embedded_units(sizes: list[int], first_row: int = 0) -> list[tuple[int, ...]]:
    """Token ids of source units that carry embeddings instead of vocabulary ids (speech blocks): ``sizes[i]``
    rows for unit i, and row f of the stream's embeddings is placed as id ``-1 - f`` (``embedding_row``)."""
    units, row = [], first_row
    for n in sizes:
        units.append(tuple(-1 - f for f in range(row, row + n)))
        row += n
    return units


def embedding_row(token_id: int) -> int:
    """The row of the stream's embeddings that an embedded token (id < 0) carries."""
    return -1 - token_id


def common_prefix_length(a: list[PlacedToken], b: list[PlacedToken]) -> int:
    """How many leading placed tokens two lists share (same id, position and role).

    Because a token's visibility depends only on the tokens before it and their roles, two lists that share a
    prefix give every token of that prefix the same key/value: that prefix of the KV cache can be kept.
    """
    n = min(len(a), len(b))
    # the common case, one list a prefix of the other: list comparison runs in C, and the lists mostly hold the
    # same objects (compared by identity first)
    if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):
        return n
    equal, unequal = 0, n  # the prefix of length ``equal`` is shared, that of length ``unequal`` is not
    while unequal - equal > 1:
        mid = (equal + unequal) // 2
        if a[equal:mid] == b[equal:mid]:
            equal = mid
        else:
            unequal = mid
    return equal


def labels_for(tokens: list[PlacedToken], ignore_index: int = -100) -> list[int]:
    """Next-token labels of a placed list: a target-side token predicts the next target-side token after it.

    Source tokens that a later read placed in between are skipped (they are not what the token predicts).
    A label exists only where that next target-side token is predicted (a target token or an end token);
    markers are forced by the layout and are never labels.
    """
    labels = [ignore_index] * len(tokens)
    next_target: PlacedToken | None = None
    for i in range(len(tokens) - 1, -1, -1):
        tok = tokens[i]
        if tok.role.target_side:
            if next_target is not None and next_target.role.predicted:
                labels[i] = next_target.token_id
            next_target = tok
    return labels
