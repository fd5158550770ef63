"""A KV cache for many streams: one row per stream, each row's keys contiguous from index 0, explicit lengths.

Per layer, keys and values are (rows, kv heads, capacity, head dim). Row r holds its stream's placed tokens in time
order at indices 0 .. length[r]-1, so a key's index in the row is its index in the stream's own placed list, and
the visibility rule and sliding windows (index distance) are the same as for one stream alone::

    capacity  0 1 2 3 4 5 6 7 8 9
    row 0     p p s s m t t . . .      length 7
    row 1     p p s m t . . . . .      length 5
    row 2     p p s s s s m t t .      length 9

Per-row rollback is a length: ``crop(row, keep)`` sets ``length[row] = keep``; the keys beyond it are stale and
are overwritten by the next write (and masked until then). No holes, no compaction, no copy (one exception,
``move``: a guess's alternative that the layout placed takes the guess's slot, one key per layer; stream.py).

A forward is packed, never padded: every new token is a query of its own, in the batch dimension, with Q = 1.
Stream r feeding Q_r tokens contributes Q_r query rows that all map to cache row r (``prepare``)::

    queries (N = sum Q_r, 1)    cache row    writes index     attends over (mask: causal in the row + the rule)
    q0  stream 0, token 0       0            7                row 0, keys 0..7
    q1  stream 1, token 0       1            5                row 1, keys 0..5
    q2  stream 1, token 1       1            6                row 1, keys 0..6   (sees q1's key: written first)
    q3  stream 1, token 2       1            7                row 1, keys 0..7

Each layer's ``update`` first writes all the new keys/values, then returns, for every query, the keys of its
cache row (a view when every row feeds exactly one token, the decode case; a gather otherwise), so a stream that
reads (feeds its new source tokens and the rolled-back target token) costs its own tokens only, not the widest
row's times the batch. Only each stream's last query needs logits: the engine applies the LM head to those.

Streams join and leave at any time: ``add_row`` appends a row, ``remove_row`` drops one and shrinks the capacity
to what the remaining rows use, so a finished stream's memory is released at once (one copy of the cache per
stream that leaves).

Why not transformers' continuous batching (packed single row + paged cache): our streams do not only append.
Source tokens join a row after its target tokens with smaller position ids, a source query must not see the
target keys cached before it, and every word boundary crops one token. A single packed row would need a
block-diagonal mask over all streams' keys (quadratic in the total) for the eager/SDPA paths we use on CPU;
one query per batch row over its own stream's keys keeps every mask a (1, K) row and makes a crop free.

The object is duck-typed for Hugging Face attention layers: they call ``update(keys, values, layer_idx)`` and
attend over what it returns, with the 4-D masks the engine passes.
"""

from __future__ import annotations

import torch


class BatchKVCache:
    def __init__(self, capacity: int = 64):
        self.capacity = max(1, capacity)
        self.lengths: list[int] = []  # cached tokens per row
        self.target_side: torch.Tensor = torch.zeros(0, self.capacity, dtype=torch.bool)  # per key, for masks
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        self._served: torch.Tensor | None = None  # (N,) cache row of each query of the forward under way
        self._write: torch.Tensor | None = None  # (N,) index each query writes its key to
        self._key_count = 0  # keys the forward's queries attend over
        self._indices_on: tuple[torch.device, torch.Tensor, torch.Tensor] | None = None  # see _on
        self._view = False  # every row feeds exactly one token, in row order: attention reads a view

    # ---- rows ------------------------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return len(self.lengths)

    def add_row(self) -> int:
        self.lengths.append(0)
        self.target_side = torch.cat([self.target_side, torch.zeros(1, self.capacity, dtype=torch.bool)])
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:
                    store[i] = torch.cat([t, t.new_zeros((1, *t.shape[1:]))])
        return self.rows - 1

    def remove_row(self, row: int) -> None:
        """Drop a row (later rows move up by one) and shrink the capacity to what the other rows use."""
        keep = torch.tensor([r for r in range(self.rows) if r != row], dtype=torch.long)
        del self.lengths[row]
        capacity = min(self.capacity, _grown(max(self.lengths, default=0)))
        self.target_side = self.target_side.index_select(0, keep)[:, :capacity].clone()
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:  # a fresh tensor: the old memory is freed
                    store[i] = t.index_select(0, keep.to(t.device))[:, :, :capacity].contiguous()
        self.capacity = capacity

    def move(self, row: int, source: int, target: int) -> None:
        """Copy the cached token at index ``source`` of a row to index ``target`` (a guessed alternative takes the
        place of the guess it stood in for; stream.py). The row's length is unchanged: crop it after."""
        if not 0 <= target < source < self.lengths[row]:
            raise ValueError(f"cannot move cached token {source} of row {row} to {target}: it holds "
                             f"{self.lengths[row]}")
        self.target_side[row, target] = self.target_side[row, source]
        for store in (self.keys, self.values):
            for t in store:
                if t is not None:
                    t[row, :, target] = t[row, :, source]

    def crop(self, row: int, keep: int) -> None:
        if not 0 <= keep <= self.lengths[row]:
            raise ValueError(f"cannot keep {keep} cached tokens of row {row}: it holds {self.lengths[row]}")
        self.lengths[row] = keep

    # ---- shared prompts (prompt_cache.py) ---------------------------------------------------------------------
    def copy_in(self, row: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """An empty row takes ``keys``/``values`` (per layer (kv heads, L, head dim)) as its first L source-side keys."""
        if self.lengths[row] != 0:
            raise ValueError(f"row {row} is not empty: it holds {self.lengths[row]} cached tokens")
        length = keys[0].shape[1]
        if length > self.capacity:
            self._grow(_grown(length))
        for store, given in ((self.keys, keys), (self.values, values)):
            for layer, t in enumerate(given):
                store[layer][row, :, :length] = t.to(store[layer].dtype)
        self.target_side[row, :length] = False
        self.lengths[row] = length

    def copy_out(self, row: int, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The first ``length`` keys and values of a row, per layer, as fresh tensors."""
        return ([t[row, :, :length].clone() for t in self.keys], [t[row, :, :length].clone() for t in self.values])

    @property
    def layers_ready(self) -> bool:
        """Every layer's store exists (after the first forward)."""
        return bool(self.keys) and all(t is not None for t in self.keys)

    # ---- one forward -----------------------------------------------------------------------------------------
    def prepare(self, rows: list[int], new_tokens: list[int], target_side: torch.Tensor) -> torch.Tensor:
        """Lay out a packed forward: row ``rows[i]`` feeds ``new_tokens[i]`` tokens, one query each, in order;
        ``target_side`` (N,) flags them. Returns the (N,) key index of each query in its row."""
        need = max(self.lengths[r] + n for r, n in zip(rows, new_tokens))
        if need > self.capacity:
            self._grow(_grown(need))
        served = torch.repeat_interleave(torch.tensor(rows, dtype=torch.long), torch.tensor(new_tokens))
        q_index = torch.cat([torch.arange(self.lengths[r], self.lengths[r] + n) for r, n in zip(rows, new_tokens)])
        self.target_side[served, q_index] = target_side
        self._served, self._write, self._key_count = served, q_index, need
        self._indices_on = None  # (device, served, write) there; see _on
        self._view = len(served) == self.rows and bool((served == torch.arange(self.rows)).all())
        for r, n in zip(rows, new_tokens):
            self.lengths[r] += n
        return q_index

    def _on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The prepared forward's rows and key slots as index tensors on ``device`` (copied once per forward, not
        per layer: on a GPU each copy is a host-to-device transfer)."""
        if self._indices_on is None or self._indices_on[0] != device:
            self._indices_on = (device, self._served.to(device), self._write.to(device))
        return self._indices_on[1], self._indices_on[2]

    def key_sides(self) -> torch.Tensor:
        """(N, K) target-side flags of the keys each query of the prepared forward attends over."""
        return self.target_side[:, : self._key_count].index_select(0, self._served)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Called by every attention layer with the (N, H, 1, D) new keys/values: write them, return (N, H, K, D)."""
        while len(self.keys) <= layer_idx:
            self.keys.append(None)
            self.values.append(None)
        out = []
        for store, new in ((self.keys, key_states), (self.values, value_states)):
            if store[layer_idx] is None:
                store[layer_idx] = new.new_zeros((self.rows, new.shape[1], self.capacity, new.shape[3]))
            full = store[layer_idx]
            served, write = self._on(full.device)
            full[served, :, write, :] = new[:, :, 0, :].to(full.dtype)
            window = full[:, :, : self._key_count]
            out.append(window if self._view else window.index_select(0, served))
        return out[0], out[1]

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        self.target_side = torch.cat([self.target_side, torch.zeros(self.rows, extra, dtype=torch.bool)], dim=1)
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:
                    store[i] = torch.cat([t, t.new_zeros((t.shape[0], t.shape[1], extra, t.shape[3]))], dim=2)
        self.capacity = capacity

    # ---- what transformers may ask -----------------------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.lengths, default=0)

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for store in (self.keys, self.values) for t in store if t is not None)


def _grown(needed: int) -> int:
    """Capacities grow in powers of two (amortised copies)."""
    capacity = 16
    while capacity < needed:
        capacity *= 2
    return capacity
