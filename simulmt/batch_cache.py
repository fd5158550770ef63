"""A KV cache for many streams: one row per stream, each row's keys contiguous from index 0, explicit lengths.

Per layer, keys and values are (rows, kv heads, capacity, head dim). Row r holds its stream's placed tokens in time
order at indices 0 .. length[r]-1, so a key's index in the row is its index in the stream's own placed list, and
the visibility rule and sliding windows (index distance) are the same as for one stream alone::

    capacity  0 1 2 3 4 5 6 7 8 9          (T = trash column, the last index: padding queries write there)
    row 0     p p s s m t t . . T          length 7
    row 1     p p s m t . . . . T          length 5
    row 2     p p s s s s m t t T          length 9

Per-row rollback is a length: ``crop(row, keep)`` sets ``length[row] = keep``; the keys beyond it are stale and
are overwritten by the next write (and masked until then). No holes, no compaction, no copy.

A forward serves some rows (``prepare``): row r feeds Q_r new tokens, right-aligned in a (R, Q = max Q_r) query
block, so that the last query of every row is the one whose logits are needed (``logits_to_keep=1``). Query j of
row r is written at index ``length[r] - (Q - Q_r) + j``; the padding queries on the left write to the trash column,
which no real query ever sees. Attention then reads indices 0 .. max(length + Q_r) - 1 of the served rows.

Streams join and leave at any time: ``add_row`` appends a row, ``remove_row`` drops one and shrinks the capacity
to what the remaining rows use, so a finished stream's memory is released at once (one copy of the cache per
stream that leaves).

Why not transformers' continuous batching (packed single row + paged cache): our streams do not only append.
Source tokens join a row after its target tokens with smaller position ids, a source query must not see the
target keys cached before it, and every word boundary crops one token. Packing would need a block-diagonal
mask over all streams' keys (quadratic in the total) for the eager/SDPA paths we use on CPU; per-row keys with
explicit lengths keep every mask a per-row (Q, K) block and make a crop free.

The object is duck-typed for Hugging Face attention layers: they call ``update(keys, values, layer_idx)`` and
attend over what it returns, with the 4-D masks the engine passes.
"""

from __future__ import annotations

import torch


class BatchKVCache:
    def __init__(self, capacity: int = 64):
        self.capacity = max(2, capacity)  # includes the trash column
        self.lengths: list[int] = []  # cached tokens per row
        self.target_side: torch.Tensor = torch.zeros(0, self.capacity, dtype=torch.bool)  # per key, for masks
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        self._served: torch.Tensor | None = None  # rows of the forward under way
        self._write: torch.Tensor | None = None  # (R, Q) indices the forward's queries write to
        self._key_count = 0  # keys the forward's queries attend over

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
        keep = [r for r in range(self.rows) if r != row]
        del self.lengths[row]
        used = max(self.lengths, default=0)
        capacity = max(2, min(self.capacity, _grown(used + 1)))
        index = torch.tensor(keep, dtype=torch.long)
        self.target_side = self._shrink(self.target_side, index, capacity, seq_dim=1)
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:
                    store[i] = self._shrink(t, index.to(t.device), capacity, seq_dim=2)
        self.capacity = capacity

    def _shrink(self, t: torch.Tensor, index: torch.Tensor, capacity: int, seq_dim: int) -> torch.Tensor:
        t = t.index_select(0, index).narrow(seq_dim, 0, capacity - 1)
        trash = t.new_zeros((*t.shape[:seq_dim], 1, *t.shape[seq_dim + 1:]))
        return torch.cat([t, trash], dim=seq_dim).contiguous()  # a fresh tensor: the old memory is freed

    def crop(self, row: int, keep: int) -> None:
        if not 0 <= keep <= self.lengths[row]:
            raise ValueError(f"cannot keep {keep} cached tokens of row {row}: it holds {self.lengths[row]}")
        self.lengths[row] = keep

    # ---- one forward -----------------------------------------------------------------------------------------
    def prepare(self, rows: list[int], new_tokens: list[int], target_side: torch.Tensor) -> torch.Tensor:
        """Lay out a forward: row ``rows[i]`` feeds ``new_tokens[i]`` tokens (their target-side flags are
        ``target_side[i]``, right-aligned in (R, Q)). Returns the (R, Q) key index of each query, -1 for padding."""
        width = max(new_tokens)
        need = max(self.lengths[r] + n for r, n in zip(rows, new_tokens))
        if need + 1 > self.capacity:
            self._grow(_grown(need + 1))
        q_index = torch.full((len(rows), width), -1, dtype=torch.long)
        for i, (r, n) in enumerate(zip(rows, new_tokens)):
            q_index[i, width - n:] = torch.arange(self.lengths[r], self.lengths[r] + n)
        served = torch.tensor(rows, dtype=torch.long)
        write = torch.where(q_index >= 0, q_index, self.capacity - 1)
        real = q_index >= 0
        self.target_side[served[:, None].expand_as(write)[real], write[real]] = target_side[real]
        self._served, self._write, self._key_count = served, write, need
        self._all_rows = rows == list(range(self.rows))
        for r, n in zip(rows, new_tokens):
            self.lengths[r] += n
        return q_index

    def key_sides(self) -> torch.Tensor:
        """(R, K) target-side flags of the keys the prepared forward attends over."""
        return self.target_side.index_select(0, self._served)[:, : self._key_count]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Called by every attention layer: write the new (R, H, Q, D) keys/values, return the served rows'."""
        while len(self.keys) <= layer_idx:
            self.keys.append(None)
            self.values.append(None)
        out = []
        for store, new in ((self.keys, key_states), (self.values, value_states)):
            if store[layer_idx] is None:
                store[layer_idx] = new.new_zeros((self.rows, new.shape[1], self.capacity, new.shape[3]))
            full = store[layer_idx]
            served, write = self._served.to(full.device), self._write.to(full.device)
            full[served[:, None], :, write, :] = new.transpose(1, 2).to(full.dtype)
            window = full[:, :, : self._key_count]
            out.append(window if self._all_rows else window.index_select(0, served))
        return out[0], out[1]

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        self.target_side = torch.cat([self.target_side[:, :-1], torch.zeros(self.rows, extra + 1, dtype=torch.bool)],
                                     dim=1)
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:
                    pad = t.new_zeros((t.shape[0], t.shape[1], extra + 1, t.shape[3]))
                    store[i] = torch.cat([t[:, :, :-1], pad], dim=2)
        self.capacity = capacity

    # ---- what transformers may ask -----------------------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.lengths, default=0)

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for store in (self.keys, self.values) for t in store if t is not None)


def _grown(needed: int) -> int:
    """Capacities grow in powers of two (amortised copies)."""
    capacity = 64
    while capacity < needed:
        capacity *= 2
    return capacity
