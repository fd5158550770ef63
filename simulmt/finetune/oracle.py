"""Oracle READ/WRITE labels from the model itself: write a target word as soon as the model would get it right.

A schedule (wait-k, read-n) labels a policy head by counting words, so a head fitted to it can at best count
words too. EASiST labels semantically aligned chunks that a large LLM cut, which cannot be made offline here; this
oracle asks the translation model instead (the model-based oracle of adaptive simultaneous MT, as in Zheng et al.
2019): for each source prefix of i units, one teacher-forced pass over the whole reference target tells, for every
target word j, whether the model's greedy choice of the word's first token is the reference's. Word j's oracle delay is the shortest prefix from which that holds for
every longer prefix as well, made non-decreasing; a word that is wrong even from the whole source keeps the
previous word's delay::

    i \\ j      Ein  Mann  fährt  Fahrrad
    1 (A)       ok    -      -      -
    2 (man)     ok    ok     -      -
    3 (rides)   ok    ok     ok     -          -> delays 1, 2, 3, 5
    4 (a)       ok    ok     ok     -
    5 (bike)    ok    ok     ok     ok

The passes are the layout's own training sequences for the schedule "read i units, then write everything"
(``build_examples``), cut after the last target token and run as one padded batch per sentence, so a token sees
exactly what it sees in that sequence (tests/test_oracle.py checks it against ``ModelRunner.hidden_states``).
"""

from __future__ import annotations

import torch

from simulmt.core.examples import IGNORE, build_examples
from simulmt.core.layouts.base import Layout
from simulmt.core.placed import Role
from simulmt.core.runner import render_masks


def first_token_predictions(tokens, labels) -> dict[int, int]:
    """{target word j: index of the position whose label is the first token of word j} in one laid-out sequence."""
    out: dict[int, int] = {}
    for i, label in enumerate(labels):
        if label == IGNORE:
            continue
        nxt = next(t for t in tokens[i + 1:] if t.role.target_side)
        if nxt.role is Role.TARGET and nxt.unit not in out:
            out[nxt.unit] = i
    return out


def correct_matrix(translator, layout: Layout, units: list[tuple[int, ...]], target_words: list[str],
                   embedded: torch.Tensor | None = None) -> torch.Tensor:
    """(len(units), len(target_words)) bool: row i-1 says, for prefix i, which words' first tokens the model
    predicts right under teacher forcing. ``embedded``: the rows of embedded source units (speech), if any."""
    logits, truth = first_token_logits(translator, layout, units, target_words, embedded)
    return logits.argmax(-1).cpu() == truth


def first_token_logits(translator, layout: Layout, units: list[tuple[int, ...]], target_words: list[str],
                       embedded: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (n, m, vocab) before any soft-capping, reference first tokens (n, m)) for prefixes 1..n of the
    ``n`` source units and the ``m`` target words."""
    runner, fmt, tok = translator.runner, translator.fmt, translator.tokenizer
    m = len(target_words)
    seqs = []
    for i in range(1, len(units) + 1):
        (ex,) = build_examples(layout, fmt, tok, units, target_words, [i] * m)
        where = first_token_predictions(ex.tokens, ex.labels)
        cut = max(where.values()) + 1
        ids = ex.input_ids[:cut]
        rows = None
        if embedded is not None:
            rows = embedded[: int((ids < 0).sum())]
        seqs.append((ids, ex.position_ids[:cut], ex.visible(layout)[:cut, :cut], where,
                     torch.tensor([ex.labels[where[j]] for j in range(m)]), rows))
    length = max(len(s[0]) for s in seqs)
    b = len(seqs)
    ids = torch.zeros(b, length, dtype=torch.long)
    positions = torch.zeros(b, length, dtype=torch.long)
    visible = torch.eye(length, dtype=torch.bool).expand(b, length, length).clone()  # padding sees itself
    for r, (i, p, v, *_rest) in enumerate(seqs):
        ids[r, : len(i)], positions[r, : len(i)], visible[r, : len(i), : len(i)] = i, p, v
    runner.check_positions(positions.flatten().tolist())
    embedded_rows = None
    if embedded is not None:
        embedded_rows = torch.cat([s[5] for s in seqs])
    with torch.no_grad():
        out = runner.decoder(inputs_embeds=runner.embed(ids, embedded_rows), position_ids=positions.to(runner.device),
                             attention_mask=render_masks(visible, 0, runner.attention_types, runner.window,
                                                         runner.dtype, runner.device), use_cache=False)
        hidden = out.last_hidden_state
        rows = torch.stack([hidden[r, [s[3][j] for j in range(m)]] for r, s in enumerate(seqs)])  # (n, m, d)
        logits = runner.head(rows)  # soft-capping (Gemma 2) is monotonic: the argmax is the same without it
    return logits, torch.stack([s[4] for s in seqs])


def oracle_delays(correct: torch.Tensor) -> list[int]:
    """Word delays from a ``correct_matrix``: for word j the first prefix from which it stays right, non-decreasing,
    at least 1. A word the model gets wrong even from the whole source (a paraphrase, a rare word) says nothing
    about when the source suffices: it takes the previous word's delay instead of holding every later word back
    to the end of the source."""
    n, m = correct.shape
    delays, floor = [], 1
    for j in range(m):
        column = correct[:, j].tolist()
        if column[n - 1]:
            d = n
            while d > 1 and column[d - 2]:  # extend back while the shorter prefix is right too
                d -= 1
            floor = max(floor, d)
        delays.append(floor)
    return delays
