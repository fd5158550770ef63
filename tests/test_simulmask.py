"""SimulMask and ALiBi models (Bloom, Falcon-RW): the bias simulmt renders into its masks, the modified ALiBi's
parity (training forward == streaming, batched == one stream), and the stock ALiBi ablation that breaks it."""

from __future__ import annotations

import random

import pytest
import torch

from helpers import SOURCE, TARGET, teacher_forced_parity
from simulmt.core.alibi import adopt_alibi, alibi_slopes
from simulmt.core.engine import Engine, run_batched
from simulmt.core.examples import IGNORE
from simulmt.core.layouts import (Conversation, Expost, GroupPositions, NaiveReuse, PrefixRecompute, SimulMask,
                                  SimulMaskStock, make_layout)
from simulmt.core.placed import Role
from simulmt.core.policies import ReadN, Scheduled, WaitK
from simulmt.core.runner import attention_spec
from simulmt.core.visibility import Distance, Visibility, key_distances
from simulmt.errors import SimulmtError
from simulmt.finetune import data
from simulmt.finetune.collator import SimulCollator
from simulmt.finetune.recipes import Recipe
from simulmt.finetune.schedules import Schedule, read_n, wait_k
from simulmt.translator import Translator
from tiny_models import ALIBI_ARCHS, make_model, make_tokenizer

TOLERANCE = 1e-4
X, Y = len(SOURCE.split()), len(TARGET.split())
SCHEDULES = {"wait-1": wait_k(1, X, Y), "wait-3": wait_k(3, X, Y), "read-3": read_n(3, X, Y)}
MODELS = [("bloom", "eager"), ("falcon", "eager"), ("falcon", "sdpa")]  # Falcon's two attention paths differ


def alibi_translator(arch: str, attn: str = "eager", chat: bool = True) -> Translator:
    tok = make_tokenizer(chat=chat)
    return Translator(make_model(arch, len(tok), attn_implementation=attn), tok, name=f"tiny-{arch}-{attn}")


# ---- the distance rule -----------------------------------------------------------------------------------------
def test_distances_on_the_docstring_example():
    """wait-1 on "sa sb sc": time order p sa m tX sb tX' sc ...; the query tX' (predicting Y after reading sa, sb)
    sees p sa m tX sb tX'. Stock counts sc (unread, but in the training row); modified does not."""
    sides = torch.tensor([False, False, True, True, False, True, False])  # p sa m tX sb tX' sc
    vis = Visibility().matrix_from_sides(sides)[None]
    q_index = torch.arange(7)[None]
    valid = torch.ones(1, 7, dtype=torch.bool)
    d = {name: key_distances(rule, vis, q_index, sides[None], sides[None], valid)[0, 5]
         for name, rule in {"time": Distance(), "modified": Distance("sides", "visible"),
                            "stock": Distance("sides", "all")}.items()}
    # keys:                          p  sa  m  tX  sb  tX'
    assert d["time"][:6].tolist() == [5, 4, 3, 2, 1, 0]
    assert d["modified"][:6].tolist() == [5, 4, 2, 1, 3, 0]  # order p sa sb | m tX tX'
    assert d["stock"][:6].tolist() == [6, 5, 2, 1, 4, 0]  # order p sa sb sc | m tX tX': sc counts
    with pytest.raises(ValueError, match="order in"):
        Distance("offline", "all")


def test_slopes_are_the_alibi_papers():
    assert alibi_slopes(8).tolist() == [2.0 ** -i for i in range(1, 9)]
    six = alibi_slopes(6)  # not a power of two: 4 geometric slopes, then 2 interleaved from the 8-head series
    assert six[:4].tolist() == [2.0 ** -(2 * i) for i in range(1, 5)] and six[4:].tolist() == [2.0 ** -1, 2.0 ** -3]


# ---- the model's own ALiBi, reproduced through simulmt's masks ---------------------------------------------------
@pytest.mark.parametrize("arch, attn", MODELS)
def test_causal_masks_with_the_default_rule_give_the_models_own_output(arch, attn):
    """A causal mask + the time-order distance == the model's stock ALiBi (Falcon's reference is SDPA: its eager
    path adds ALiBi twice when given a mask), and a 2-D mask still reaches the model's own code."""
    tr = alibi_translator(arch, attn)
    reference = make_model(arch, tr.model.config.vocab_size, attn_implementation="sdpa" if arch == "falcon" else attn)
    ids = torch.tensor([[2, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]], device=tr.model.device)
    with torch.no_grad():
        own = reference(input_ids=ids).logits[0]
        n = ids.shape[1]
        visible = torch.tril(torch.ones(n, n, dtype=torch.bool))
        mask = tr.runner.masks(visible, 0, torch.zeros(n, dtype=torch.bool))
        assert mask.shape == (1, tr.model.config.num_attention_heads if arch == "falcon" else tr.model.config.n_head,
                              n, n)
        mine = tr.model(input_ids=ids, attention_mask=mask.to(ids.device)).logits[0]
        stock_again = tr.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0]
    assert float((mine - own).abs().max()) <= TOLERANCE
    if attn == "sdpa" or arch == "bloom":
        assert float((stock_again - own).abs().max()) <= TOLERANCE  # the model is unchanged for its own masks
    assert adopt_alibi(tr.model) is tr.runner.alibi  # idempotent


def test_an_alibi_architecture_simulmt_does_not_handle_is_refused():
    import transformers

    config = transformers.MptConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=300, max_seq_len=64)
    with pytest.raises(SimulmtError, match="MPT"):
        adopt_alibi(transformers.MptForCausalLM(config))


# ---- parity --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arch, attn", MODELS)
def test_simulmask_training_forward_equals_streaming(arch, attn, schedule):
    tr = alibi_translator(arch, attn)
    run = teacher_forced_parity(tr, SimulMask(), SOURCE, TARGET, SCHEDULES[schedule], match_positions=False)
    assert run.labels >= Y + 1 and run.unmatched == 0
    assert run.max_diff <= TOLERANCE
    assert run.session.result().prediction == TARGET and run.session.result().delays == SCHEDULES[schedule]
    assert run.session.cache_crops >= 1, "source arrived after target text (the case stock ALiBi gets wrong)"


@pytest.mark.parametrize("arch, attn", MODELS)
def test_stock_alibi_breaks_parity(arch, attn):
    """SimulMask with stock ALiBi: unread source adds distance in training, not at inference."""
    tr = alibi_translator(arch, attn)
    for name in ("wait-1", "wait-3"):
        run = teacher_forced_parity(tr, SimulMaskStock(), SOURCE, TARGET, SCHEDULES[name], match_positions=False)
        assert run.unmatched == 0
        assert run.max_diff > 1e-2


@pytest.mark.parametrize("layout", ["expost", "gpe", "conversation", "prefix", "naive"])
@pytest.mark.parametrize("arch", ALIBI_ARCHS)
def test_every_cache_layout_keeps_parity_on_alibi_models(arch, layout):
    """The default rule is the model's own distance over the time-ordered cache, which training lays out too.
    Position ids do not exist for ALiBi, so even ``naive``'s colliding positions are harmless there."""
    tr = alibi_translator(arch)
    made = {"expost": lambda: Expost(slot=4), "gpe": lambda: GroupPositions(phi=300), "conversation": Conversation,
            "prefix": PrefixRecompute, "naive": NaiveReuse}[layout]()
    for delays in (SCHEDULES["wait-1"], SCHEDULES["read-3"]):
        run = teacher_forced_parity(tr, made, SOURCE, TARGET, delays, match_positions=layout != "naive")
        assert run.unmatched == 0 and run.max_diff <= TOLERANCE


@pytest.mark.parametrize("arch", ALIBI_ARCHS)
def test_batched_equals_one_stream_with_mixed_distance_rules(arch):
    """SimulMask (sides order, visible keys), its stock ablation and expost (time order) in the same forwards."""
    tr = alibi_translator(arch)
    sources = [SOURCE, "Where is the train station?", "The children are playing in the garden.",
               "Thank you very much for your patience.", SOURCE + " " + SOURCE]
    mix = [(SimulMask(), WaitK(1)), (SimulMaskStock(), WaitK(2)), (Expost(slot=4), WaitK(1)),
           (SimulMask(), ReadN(2, max_segment_words=2)), (make_layout("simulmask"), WaitK(3))]
    singles = []
    for text, (layout, policy) in zip(sources, mix):
        session = tr.session(layout, policy, record=True)
        session.run(text)
        singles.append(session)
    streams = []
    for text, (layout, policy) in zip(sources, mix):
        stream = tr.new_stream(layout, policy, record=True)
        stream.push(text.split(), finished=True)
        streams.append(stream)
    engine = Engine(tr.runner)
    run_batched(streams, engine, batch_size=3)
    assert max(engine.stats.batch_sizes) == 3
    for single, stream in zip(singles, streams):
        a, b = single.result(), stream.result()
        assert (b.prediction, b.delays, b.tokens_fed) == (a.prediction, a.delays, a.tokens_fed)
        assert a.prediction
        for p, q in zip(single.proposals, stream.proposals):
            assert p.context == q.context and p.token == q.token
            assert float((p.logits - q.logits).abs().max()) <= TOLERANCE * max(1.0, float(p.logits.abs().max()))


# ---- training --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch, attn", MODELS)
def test_padded_training_batch_equals_streaming(arch, attn):
    """The collator's per-head masks (padding and all) give the logits streaming computes."""
    from simulmt.finetune.trainer import label_logits

    tr = alibi_translator(arch, attn)
    cases = [(Recipe("simulmask", Schedule("wait-k", (1,))), SOURCE, TARGET),
             (Recipe("simulmask", Schedule("wait-k", (3,))), "Where is the train station?", "Wo ist der Bahnhof?")]
    examples, items = [], []
    for rec, source, target in cases:
        (ex,), _ = rec.examples(tr.fmt, tr.tokenizer, source, target, random.Random(0))
        examples.append(ex)
        items.append(data.encode(ex))
    types, window = attention_spec(tr.model)
    collator = SimulCollator(cases[0][0].visibility, types, window, tr.tokenizer.pad_token_id,
                             alibi=adopt_alibi(tr.model))
    batch = collator(items)
    heads = len(tr.runner.alibi.coefficients)
    assert batch["attention_mask"].shape == (2, heads, len(examples[0]), len(examples[0]))
    with torch.no_grad():
        logits, labels = label_logits(tr.model, batch)  # (it moves the batch to the model's device)
    row, max_diff = 0, 0.0
    for (rec, source, target), ex in zip(cases, examples):
        delays = rec.schedule.delays(len(source.split()), len(target.split()), random.Random(0))[0]
        forced = [(t.token_id, t.unit) for t in ex.tokens if t.role is Role.TARGET] + [(tr.fmt.end_id, -1)]
        session = tr.session(rec.layout(), Scheduled(tuple(delays)), forced=forced, record=True)
        assert session.run(source).prediction == target
        proposals = {tuple((t.token_id, t.role) for t in p.context): p.logits for p in session.proposals}
        for i, label in enumerate(ex.labels):
            if label == IGNORE:
                continue
            assert int(labels[row]) == label
            streamed = proposals[tuple((t.token_id, t.role) for t in ex.tokens[: i + 1])]
            max_diff = max(max_diff, float((logits[row] - streamed).abs().max()))
            row += 1
    assert row == logits.shape[0] and max_diff <= TOLERANCE


def test_the_simulmask_recipe_learns_on_a_tiny_falcon(tmp_path):
    """A few steps of `simulmask` fine-tuning lower the loss, and the adapter serves with parity intact."""
    from simulmt.finetune.options import FinetuneOptions
    from simulmt.finetune.trainer import finetune
    from tiny_models import CORPUS

    for name, lines in {"src": CORPUS[:16], "tgt": CORPUS[16:32]}.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    tr = alibi_translator("falcon")
    options = FinetuneOptions(train_source=str(tmp_path / "src"), train_target=str(tmp_path / "tgt"),
                              output=str(tmp_path / "run"), recipe="simulmask", k_mix="1,3", batch_size=4,
                              grad_accum=2, lora_rank=4, max_steps=8, logging_steps=1, eval_lines=0, lr=1e-2,
                              warmup_steps=0)
    card = finetune(options, translator=tr, progress=False)
    losses = [h["loss"] for h in card["loss_history"]]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.3
    assert card["serve_with"]["layout"] == "simulmask"
    tr.model.eval()
    served = Translator(tr.model, tr.tokenizer, name="tiny-falcon+simulmask")
    run = teacher_forced_parity(served, SimulMask(), SOURCE, TARGET, SCHEDULES["wait-1"], match_positions=False)
    assert run.unmatched == 0 and run.max_diff <= TOLERANCE
