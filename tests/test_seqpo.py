"""SeqPO-SiMT pieces: the fused reward on hand-computed groups, the multi-step rollout (chunks, history, empty
steps, parity of its tokens with one training forward), and the GRPO loss on a tiny model."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import SOURCE, tiny_translator
from simulmt.core.examples import IGNORE
from simulmt.core.layouts import SeqPO
from simulmt.core.placed import Role
from simulmt.errors import SimulmtError
from simulmt.rl.grpo import group_advantages, grpo_loss, token_logprobs
from simulmt.rl.reward import fused_rewards, latency_score, normalise, quality_scores
from simulmt.rl.rollout import sample_groups
from simulmt.translator import Translator
from tiny_models import make_model, make_tokenizer

Z = math.sqrt(1.5)


def fresh_translator() -> Translator:
    """Not the shared (cached) tiny translator: these tests patch or wrap its model."""
    tok = make_tokenizer(chat=True)
    return Translator(make_model("llama", len(tok)), tok, name="tiny-llama")  # normalise([1, 2, 3]) = [-Z, 0, Z]


# ---- reward --------------------------------------------------------------------------------------------------------
def test_normalise_and_the_papers_truncation():
    assert normalise([1, 2, 3]) == pytest.approx([-Z, 0.0, Z])
    assert normalise([4, 4, 4]) == [0.0, 0.0, 0.0]
    # paper: L = max(m, z(L^)); m = 1 truncates the two low latencies to 1
    assert fused_rewards([1, 2, 3], [1, 2, 3], chunk=1) == pytest.approx([-2 * Z - 1, -1.0, 2 * Z - Z])
    # with m = 3 every normalised latency is below m: latency is the constant 3 (the formula as written)
    assert fused_rewards([1, 2, 3], [30, 20, 10], chunk=3) == pytest.approx([-2 * Z - 3, -3.0, 2 * Z - 3])
    assert fused_rewards([1, 2, 3], [1, 2, 3], chunk=1, lam=0.0) == pytest.approx([-1.0, -1.0, -Z])


def test_raw_truncation_and_errors():
    # raw: max(2, L^) = [2, 2, 3] -> z = [-1/sqrt2, -1/sqrt2, sqrt2]
    s2 = math.sqrt(2)
    assert fused_rewards([1, 2, 3], [1, 2, 3], chunk=2, truncation="raw") == pytest.approx(
        [-2 * Z + 1 / s2, 1 / s2, 2 * Z - s2])
    with pytest.raises(SimulmtError, match="truncation"):
        fused_rewards([1], [1], chunk=1, truncation="nope")
    with pytest.raises(SimulmtError, match="2 quality scores but 1"):
        fused_rewards([1, 2], [1], chunk=1)


def test_per_trajectory_scores():
    chrf = quality_scores(["Das Wetter ist schön", "Katze"], ["Das Wetter ist schön"] * 2, ["x", "x"], "chrf")
    assert chrf[0] == pytest.approx(100.0) and chrf[1] < 20
    assert latency_score([1, 2, 3], 3, "a b c", "AL") == pytest.approx(1.0)
    assert latency_score([], 7, "a b c") == 7.0  # wrote nothing: lags the whole source
    with pytest.raises(SimulmtError, match="unknown quality metric"):
        quality_scores(["a"], ["a"], ["a"], "meteor")


# ---- rollout -------------------------------------------------------------------------------------------------------
def test_rollout_chunks_history_and_parity():
    tr = tiny_translator("llama")
    words = SOURCE.split()
    (group,) = sample_groups(tr, [(SOURCE, "Das Wetter")], group=3, chunk=3, temperature=1.5, seed=1, record=True)
    assert len(group) == 3 and len({t.prediction for t in group}) > 1  # seeded samples differ
    again = sample_groups(tr, [(SOURCE, "Das Wetter")], group=3, chunk=3, temperature=1.5, seed=1)[0]
    assert [t.prediction for t in again] == [t.prediction for t in group]  # and are reproducible
    for t in group:
        assert t.steps == math.ceil(len(words) / 3)  # one assistant turn per chunk
        units = [tok.unit for tok in t.tokens if tok.role is Role.SOURCE]
        assert units == sorted(units)
        # parity: every labelled token's log-probability from ONE training forward equals the stream's proposal
        (logp,) = token_logprobs(tr.model, [t.example], tr.tokenizer.pad_token_id)
        proposals = {p.context: p.logits for p in t.stream.proposals}
        row = 0
        for i, label in enumerate(t.example.labels):
            if label == IGNORE:
                continue
            streamed = F.log_softmax(proposals[tuple(t.tokens[: i + 1])].float(), dim=-1)[label]
            assert float((logp[row].detach() - streamed).abs()) <= 1e-4
            row += 1
        assert row == len(logp) >= 1


def test_labels_are_the_sampled_tokens_even_where_a_rule_overrode_them():
    """A segment bound of one word closes each turn after its first word: the placed token there is the turn's
    end, but what the model sampled (and what GRPO must weigh) is the next word's first token."""
    tr = tiny_translator("llama")
    (group,) = sample_groups(tr, [(SOURCE, "x")], group=2, chunk=3, temperature=1.5, seed=5, max_segment_words=1)
    overridden = 0
    for t in group:
        ex = t.example
        labelled = [i for i, label in enumerate(ex.labels) if label != IGNORE]
        assert len(labelled) == sum(1 for length in t.choices if length <= len(t.tokens))
        for i in labelled:
            placed = t.tokens[i + 1] if i + 1 < len(t.tokens) else None
            if placed is not None and placed.role is Role.END and ex.labels[i] != placed.token_id:
                overridden += 1
                assert tr.vocabulary.word_starts[ex.labels[i]]  # a word the bound did not let it write
    assert overridden >= 1


def test_an_empty_step_is_kept_as_an_end_token():
    """A model that ends every turn at once writes nothing, but each step's decision stays in the sequence."""
    tr = fresh_translator()
    forward = tr.runner.forward_packed
    opener_last = tr.fmt.target_opener[-1]

    def always_wait(queries, *args, **kwargs):
        answer = forward(queries, *args, **kwargs)
        for row, query in enumerate(queries.last.tolist()):
            if int(queries.ids[query]) == opener_last:
                answer.logits[row, tr.fmt.end_id] += 100.0
        return answer

    tr.runner.forward_packed = always_wait
    (group,) = sample_groups(tr, [(SOURCE, "x")], group=1, chunk=4)
    t = group[0]
    assert t.prediction == "" and t.delays == []
    chunks = math.ceil(len(SOURCE.split()) / 4)
    assert t.steps == chunks
    ends = [i for i, tok in enumerate(t.tokens) if tok.role is Role.END]
    assert len(ends) == chunks and all(t.tokens[i - 1].role is Role.TARGET_MARKER for i in ends)
    labels = t.example.labels
    assert [labels[i - 1] for i in ends] == [tr.fmt.end_id] * chunks  # each wait is a labelled choice
    assert SeqPO().name == "seqpo"


# ---- GRPO ----------------------------------------------------------------------------------------------------------
def test_grpo_step_raises_the_best_sample_and_kl_grows_from_zero():
    from peft import LoraConfig, get_peft_model

    tr = fresh_translator()
    (group,) = sample_groups(tr, [(SOURCE, "x")], group=4, chunk=3, temperature=1.5, seed=3)
    examples = [t.example for t in group]
    torch.manual_seed(0)
    model = get_peft_model(tr.model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    pad = tr.tokenizer.pad_token_id
    rewards = [float(i) for i in range(len(group))]  # the last sample is the best
    advantages = group_advantages(rewards)
    assert advantages == pytest.approx(normalise(rewards)) and sum(advantages) == pytest.approx(0.0)
    with torch.no_grad():
        before = [lp.sum().item() for lp in token_logprobs(model, examples, pad)]
    loss, stats = grpo_loss(model, examples, advantages, pad, beta=0.02)
    assert stats.kl == pytest.approx(0.0, abs=1e-6)  # LoRA starts as the reference
    assert stats.tokens == sum(sum(label != IGNORE for label in ex.labels) for ex in examples)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        after = [lp.sum().item() for lp in token_logprobs(model, examples, pad)]
    assert after[-1] > before[-1] and after[0] < before[0], (before, after)
    _, stats = grpo_loss(model, examples, advantages, pad, beta=0.02)
    assert stats.kl > 0


# ---- simulmt rl ----------------------------------------------------------------------------------------------------
def _files(tmp_path):
    from tiny_models import CORPUS

    (tmp_path / "src").write_text("\n".join(CORPUS[:6]) + "\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("\n".join(CORPUS[16:22]) + "\n", encoding="utf-8")
    return str(tmp_path / "src"), str(tmp_path / "tgt")


def test_rl_trains_logs_resumes_and_saves_one_servable_adapter(tmp_path):
    """Warm-up adapter -> rl on top -> one adapter (rank r1 + r2) whose model equals warm-up + trained LoRA;
    a run cut after its checkpoint and resumed logs the same steps as an uncut run."""
    from simulmt.finetune.options import FinetuneOptions
    from simulmt.finetune.trainer import finetune
    from simulmt.models import load_model
    from simulmt.rl.options import RLOptions
    from simulmt.rl.train import sentence_order, train

    src, tgt = _files(tmp_path)
    model_dir = tmp_path / "model"
    tok = make_tokenizer(chat=True)
    make_model("llama", len(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    finetune(FinetuneOptions(train_source=src, train_target=tgt, model=str(model_dir), recipe="conversation", n=3,
                             output=str(tmp_path / "warm"), batch_size=2, grad_accum=1, lora_rank=4, max_steps=2,
                             eval_lines=0, lr=1e-2, warmup_steps=0), progress=False)
    warm = str(tmp_path / "warm" / "adapter")

    def options(out, **kw):
        base = dict(train_source=src, train_target=tgt, model=str(model_dir), init_adapter=warm, lora_rank=4,
                    group=3, sentences=2, steps=3, lr=1e-3, chunk=3, save_steps=2, output=str(tmp_path / out),
                    rollout_batch=6, temperature=1.5)
        return RLOptions(**{**base, **kw})

    whole = train(options("whole"), progress=False)
    log = [json.loads(line) for line in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3] and whole["steps"] == 3
    assert all(r["trajectories"] == 6 and r["tokens"] > 0 and math.isfinite(r["reward"]) for r in log)
    assert (tmp_path / "whole" / "curves.png").stat().st_size > 1000
    # cut after the step-2 checkpoint, then resume: the same steps, the same numbers
    train(options("cut", steps=2), progress=False)
    with pytest.raises(SimulmtError, match="already holds a run"):
        train(options("cut"), progress=False)
    with pytest.raises(SimulmtError, match="--beta"):
        train(options("cut", resume=True, beta=0.5), progress=False)
    train(options("cut", resume=True), progress=False)
    cut = [json.loads(line) for line in (tmp_path / "cut" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in cut] == [1, 2, 3]
    assert [r["reward"] for r in cut] == pytest.approx([r["reward"] for r in log])
    assert cut[-1]["loss"] == pytest.approx(log[-1]["loss"], abs=1e-5)
    # the saved adapter: warm-up (r=4) and the trained LoRA (r=4) as one rank-8 adapter
    config = json.loads((tmp_path / "whole" / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["lora_alpha"] == 8
    stacked = load_model(str(model_dir), str(tmp_path / "whole" / "adapter"), device="cpu").model
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    merged = load_model(str(model_dir), warm, device="cpu").model  # the warm-up, merged: the reference
    ids = torch.tensor([[2, 40, 41, 42, 43, 44]])
    with torch.no_grad():
        warm_only = merged(input_ids=ids).logits
    trained = get_peft_model(merged, LoraConfig(r=4, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear",
                                                task_type="CAUSAL_LM"))
    set_peft_model_state_dict(trained, torch.load(tmp_path / "whole" / "checkpoint" / "state.pt", weights_only=True)["lora"])
    with torch.no_grad():
        mine, expected = stacked(input_ids=ids).logits, trained(input_ids=ids).logits
    assert float((mine - expected).abs().max()) < 1e-4
    assert float((mine - warm_only).abs().max()) > 1e-6  # the trained LoRA changed the model
    first_epoch = sentence_order(6, 0, 0, 4) + sentence_order(6, 0, 1, 4)[:2]
    assert sorted(first_epoch) == list(range(6))
