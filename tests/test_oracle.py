"""The model-based oracle that labels the policy head (simulmt/finetune/oracle.py): its batched teacher-forced
passes give the logits the layout's own training sequence gives, and its delay rule by hand."""

from __future__ import annotations

import pytest
import torch

from helpers import SOURCE, TARGET, tiny_interleaved_translator
from simulmt.core.examples import build_examples
from simulmt.core.layouts import Interleaved
from simulmt.core.prompt_format import source_units
from simulmt.finetune.oracle import correct_matrix, first_token_logits, first_token_predictions, oracle_delays


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])
def test_the_batched_passes_equal_one_training_forward_per_prefix(arch):
    tr = tiny_interleaved_translator(arch)
    layout = Interleaved()
    words, target = SOURCE.split()[:6], TARGET.split()[:5]
    units = source_units(tr.tokenizer, tr.fmt, words)
    got = correct_matrix(tr, layout, units, target)
    assert got.shape == (len(units), len(target))
    logits, truth = first_token_logits(tr, layout, units, target)
    for i in range(1, len(units) + 1):
        (ex,) = build_examples(layout, tr.fmt, tr.tokenizer, units, target, [i] * len(target))
        where = first_token_predictions(ex.tokens, ex.labels)
        assert sorted(where) == list(range(len(target)))  # every word's first token is predicted somewhere
        states = tr.runner.hidden_states(ex.input_ids.tolist(), ex.position_ids.tolist(), ex.visible(layout))
        alone = tr.runner.head(states[[where[j] for j in range(len(target))]])
        assert torch.allclose(alone, logits[i - 1], atol=1e-4)
        assert truth[i - 1].tolist() == [ex.labels[where[j]] for j in range(len(target))]
        assert torch.equal(alone.argmax(-1) == truth[i - 1], got[i - 1])


def test_the_delay_rule_by_hand():
    ok, no = True, False
    correct = torch.tensor([  # rows: prefixes 1..5, columns: target words
        [ok, no, no, no, ok],
        [ok, ok, ok, no, no],
        [ok, ok, no, no, no],
        [ok, ok, ok, no, ok],
        [ok, ok, ok, no, ok],
    ])
    # word 1 right from prefix 1; word 2 from 2; word 3 from 4 (wrong at 3); word 4 never right: it keeps word 3's
    # delay (4) instead of holding the rest back; word 5 right from 4
    assert oracle_delays(correct) == [1, 2, 4, 4, 4]
    correct[3:, 4] = True
    correct[:, 4] = torch.tensor([False, False, False, False, True])
    assert oracle_delays(correct) == [1, 2, 4, 4, 5]  # word 5 right only with the whole source
    assert oracle_delays(torch.ones(3, 2, dtype=torch.bool)) == [1, 1]
    assert oracle_delays(torch.zeros(3, 2, dtype=torch.bool)) == [1, 1]  # nothing to wait for


def test_collect_labels_the_decision_points_with_the_oracle_delays(monkeypatch):
    """``--head-labels oracle``: the head's rows are laid out along the oracle's delays, READ until a word's delay."""
    from dataclasses import dataclass

    from simulmt.finetune import policy_head
    from simulmt.finetune.schedules import Schedule

    @dataclass
    class Pair:
        source: str
        target: str

    tr = tiny_interleaved_translator("llama")
    source, target = " ".join(SOURCE.split()[:5]), " ".join(TARGET.split()[:4])
    correct = torch.tensor([[True, False, False, False], [True, True, False, False], [True, True, False, False],
                            [True, True, True, False], [True, True, True, True]])
    monkeypatch.setattr(policy_head, "correct_matrix", lambda *args, **kw: correct)
    _, labels = policy_head.collect(tr, Interleaved(), [Pair(source, target)], Schedule("read-n", (3,), 3),
                                    oracle=True)
    # delays 1, 2, 4, 5: decisions after reading 1, 2, 3, 4 units (not after the last): W W R W
    assert labels.tolist() == [1, 1, 0, 1]


def test_the_passes_carry_embedded_units_like_the_training_forward():
    """Speech: source units that carry embeddings (blocks) go through the batched passes row by row."""
    from simulmt.core.placed import embedded_units

    tr = tiny_interleaved_translator("llama")
    layout = Interleaved()
    d = tr.model.config.hidden_size
    sizes = [3, 2, 4]
    rows = torch.randn(sum(sizes), d, generator=torch.Generator().manual_seed(0))
    units = embedded_units(sizes)
    target = TARGET.split()[:3]
    got = correct_matrix(tr, layout, units, target, rows)
    logits, truth = first_token_logits(tr, layout, units, target, rows)
    for i in range(1, len(units) + 1):
        (ex,) = build_examples(layout, tr.fmt, tr.tokenizer, units, target, [i] * len(target))
        where = first_token_predictions(ex.tokens, ex.labels)
        ids = ex.input_ids.tolist()
        states = tr.runner.hidden_states(ids, ex.position_ids.tolist(), ex.visible(layout),
                                         embedded=rows[: sum(1 for t in ids if t < 0)])
        alone = tr.runner.head(states[[where[j] for j in range(len(target))]])
        assert torch.allclose(alone, logits[i - 1], atol=1e-4)
        assert truth[i - 1].tolist() == [ex.labels[where[j]] for j in range(len(target))]
        assert torch.equal(alone.argmax(-1) == truth[i - 1], got[i - 1])
