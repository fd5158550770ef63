"""EASiST on text: the interleaved recipe (marker tokens added and trained), the learned READ/WRITE policy, and the
policy head trained on the hidden states streaming hands it (the same states: tested here, like the parity of the
logits in test_parity.py)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch

from helpers import SOURCE, TARGET, forced_tokens, tiny_interleaved_translator
from simulmt import cli
from simulmt.core.decisions import Action, StreamState
from simulmt.core.examples import decision_points
from simulmt.core.layouts import Expost, Interleaved
from simulmt.core.learned_policy import HEAD_FILE, Learned, PolicyHead
from simulmt.core.prompt_format import source_units
from simulmt.errors import SimulmtError
from simulmt.finetune.policy_head import collect, fit_head
from simulmt.finetune.schedules import Schedule, read_n, wait_k
from simulmt.translator import Translator
from tiny_models import CORPUS, make_model, make_tokenizer, set_execution

X, Y = len(SOURCE.split()), len(TARGET.split())


@dataclass(frozen=True, eq=False)
class RecordingSchedule:
    """Follows a schedule (like ``Scheduled``) but asks for the hidden state where a learned policy would, and
    keeps it: (units read, features)."""

    delays: tuple[int, ...]
    seen: list = field(default_factory=list)
    head: PolicyHead | None = None  # only its ``layer`` matters: which layer's output the features are
    name: ClassVar[str] = "recording"
    per_arrival: ClassVar[bool] = False
    lets_model_end_segment: ClassVar[bool] = False
    wants_features: ClassVar[bool] = True

    def consults_head(self, state: StreamState) -> bool:
        return Learned.consults_head(self, state)

    def decide(self, state: StreamState) -> Action:
        if self.consults_head(state):  # (asked again at the same point, e.g. by the engine: the same state)
            if self.seen and self.seen[-1][0] == state.source_read:
                assert torch.equal(self.seen[-1][1], state.features)
            else:
                self.seen.append((state.source_read, state.features.clone()))
        if state.source_finished:
            return Action.WRITE
        j = state.target_words
        return Action.WRITE if j < len(self.delays) and state.source_read >= self.delays[j] else Action.READ

    def describe(self) -> str:
        return "recording"


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])
@pytest.mark.parametrize("schedule", ["wait-2", "read-3"])
@pytest.mark.parametrize("layer", [None, 0])
def test_the_head_reads_the_same_hidden_states_in_training_and_streaming(arch, schedule, layer):
    """The last hidden state, or a head on layer 0's output (whose READs stop their forwards there)."""
    tr = tiny_interleaved_translator(arch)
    delays = wait_k(2, X, Y) if schedule == "wait-2" else read_n(3, X, Y)
    layout = Interleaved()
    units = source_units(tr.tokenizer, tr.fmt, SOURCE.split())
    points = decision_points(layout, tr.fmt, tr.tokenizer, units, TARGET.split(), delays)
    ex = points.example
    hidden = tr.runner.hidden_states(ex.input_ids.tolist(), ex.position_ids.tolist(), ex.visible(layout), layer=layer)
    d = tr.model.config.hidden_size
    policy = RecordingSchedule(tuple(delays), head=PolicyHead(torch.zeros(2, d), torch.zeros(2), {"layer": layer}))
    session = tr.session(layout, policy, forced=forced_tokens(ex, tr.fmt.end_id))
    result = session.run(SOURCE)
    assert result.prediction == TARGET
    # (a READ after the first word feeds the prompt, which is not computed twice: read-3 then reads on, wait-2 writes)
    assert (result.stopped_forwards > 0) == (layer is not None and schedule == "read-3")
    assert [units for units, _ in policy.seen] == list(range(1, X))  # after every read but the last
    assert len(points.indices) == X - 1
    for (units, features), index in zip(policy.seen, points.indices):
        assert float((features - hidden[index]).abs().max()) <= 1e-4
    assert points.labels == [int(u in set(delays)) for u in range(1, X)]
    assert all(ex.tokens[i].role.value == "source" for i in points.indices)


def test_decision_points_refuse_a_layout_that_moves_the_decision_token():
    tr = tiny_interleaved_translator("llama")
    units = source_units(tr.tokenizer, tr.fmt, SOURCE.split())
    with pytest.raises(SimulmtError, match="moves tokens after a read"):
        decision_points(Expost(slot=64), tr.fmt, tr.tokenizer, units, TARGET.split(), read_n(3, X, Y))


def head_for(tr: Translator, write_bias: float) -> PolicyHead:
    d = tr.model.config.hidden_size
    return PolicyHead(torch.zeros(2, d), torch.tensor([0.0, write_bias]))


def test_the_threshold_moves_the_policy_from_writing_at_once_to_reading_everything():
    tr = tiny_interleaved_translator("llama")
    eager = tr.translate(SOURCE, "interleaved", Learned(0.5, head_for(tr, 5.0)))
    patient = tr.translate(SOURCE, "interleaved", Learned(0.5, head_for(tr, -5.0)))
    assert patient.delays and set(patient.delays) == {X}  # never writes before the end: offline
    assert eager.delays and eager.delays[0] == 1  # writes after the first word
    # p(WRITE) = sigmoid(5) = 0.993: tau above it reads everything, below it writes at once
    assert set(tr.translate(SOURCE, "interleaved", Learned(0.999, head_for(tr, 5.0))).delays) == {X}
    assert tr.translate(SOURCE, "interleaved", Learned(0.99, head_for(tr, 5.0))).delays[0] == 1


def test_learned_policy_batched_equals_one_stream():
    tr = tiny_interleaved_translator("gemma3")
    torch.manual_seed(0)
    d = tr.model.config.hidden_size
    head = PolicyHead(torch.randn(2, d), torch.zeros(2))
    policy = Learned(0.5, head)
    sources = CORPUS[:5]
    alone = [tr.translate(s, "interleaved", policy) for s in sources]
    batched = tr.translate_many(sources, "interleaved", policy, batch_size=5)
    assert [(a.prediction, a.delays) for a in alone] == [(b.prediction, b.delays) for b in batched]
    assert len({tuple(a.delays) for a in alone}) > 1 or any(0 < a.delays[0] < len(s.split())
                                                              for a, s in zip(alone, sources))


def test_fit_head_separates_and_reads_raw_hidden_states(tmp_path):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(400, 8, generator=g) * 3 + 10  # far from standardised
    labels = (hidden[:, 2] - 10 + 0.3 * torch.randn(400, generator=g) > 1.0).long()  # imbalanced: ~25% WRITE
    head, fit = fit_head(hidden, labels, heldout=0.25)
    assert fit.heldout_balanced_accuracy > 0.85 and 0.1 < fit.write_fraction < 0.4
    assert float(((head.p_write(hidden) >= 0.5).long() == labels).float().mean()) > 0.85
    head.save(tmp_path)
    again = PolicyHead.load(tmp_path)
    assert torch.equal(again.weight, head.weight) and again.info["fit"]["rows"] == fit.rows
    with pytest.raises(SimulmtError, match="both READ and WRITE"):
        fit_head(hidden, torch.zeros(400, dtype=torch.long))


def test_collecting_hidden_states_without_a_terminal_prints_a_line_per_tenth(capsys):
    @dataclass
    class Pair:
        source: str
        target: str

    tr = tiny_interleaved_translator("llama")
    pairs = [Pair(" ".join(SOURCE.split()[: 3 + i % 4]), " ".join(TARGET.split()[: 3 + i % 3])) for i in range(20)]
    hidden, labels = collect(tr, Interleaved(), pairs, Schedule("read-n", n=2), progress=False)
    assert hidden.shape[0] == labels.shape[0] > 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "hidden states of" in line]
    assert [line.split(" of ")[1].split(" pairs")[0] for line in lines] == [f"{i}/20" for i in range(2, 20, 2)]


def test_policy_errors():
    with pytest.raises(SimulmtError, match="needs a policy head"):
        Learned(0.5, None).decide(StreamState(2, False, 0, features=torch.zeros(4)))
    with pytest.raises(SimulmtError, match="within 0..1"):
        Learned(1.5, PolicyHead(torch.zeros(2, 4), torch.zeros(2)))
    tok = make_tokenizer(chat=True)
    tr = Translator(make_model("llama", len(tok)), tok)
    with pytest.raises(SimulmtError, match="marker tokens"):
        tr.translate(SOURCE, "interleaved", "read-n")
    with pytest.raises(SimulmtError, match="needs a policy head"):
        tr.translate(SOURCE, "interleaved", "learned")


def saved_model_and_pairs(folder, pairs: int):
    """A tiny model saved to ``folder/tiny`` (returned) and ``pairs`` training pairs in ``folder/src``, ``/tgt``."""
    from helpers import save_tiny_model

    (folder / "src").write_text("\n".join(CORPUS[:pairs]) + "\n")
    (folder / "tgt").write_text("\n".join(CORPUS[16:16 + pairs]) + "\n")
    return save_tiny_model(folder / "tiny")


def test_interleaved_recipe_then_policy_head_from_the_command_line(tmp_path):
    """EASiST's text stages on a tiny model saved to disk: the interleaved recipe adds and trains the two markers,
    the adapter loads back with them; the policy-head recipe fits a head on that adapter; the learned policy
    translates with it, and tau moves the latency."""
    tok = make_tokenizer(chat=True)
    model_dir = saved_model_and_pairs(tmp_path, 16)
    data = ["--train-source", str(tmp_path / "src"), "--train-target", str(tmp_path / "tgt"), "--model",
            str(model_dir)]
    assert cli.main(["finetune", *data, "--output", str(tmp_path / "mt"), "--recipe", "interleaved", "--n", "2",
                     "--max-steps", "3", "--batch-size", "4", "--grad-accum", "1", "--lora-rank", "4"]) == 0
    adapter = tmp_path / "mt" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["trainable_token_indices"] and len(tok) in sum(
        (v if isinstance(v, list) else [] for v in [config["trainable_token_indices"]]), [])
    tr = Translator.load(str(model_dir), adapter=str(adapter), device="cpu")
    assert tr.fmt.end_of_read == len(tok) and tr.fmt.end_of_write == len(tok) + 1
    assert tr.translate(CORPUS[0], layout="interleaved", policy="read-n", n=2).delays
    assert tr.policy_head is None

    assert cli.main(["finetune", *data, "--output", str(tmp_path / "head"), "--recipe", "policy-head", "--n", "2",
                     "--init-adapter", str(adapter)]) == 0
    card = json.loads((tmp_path / "head" / "training.json").read_text())
    assert card["serve_with"] == {"layout": "interleaved", "policy": "learned", "slot": 16, "phi": 256}
    assert card["fit"]["rows"] > 50 and 0 < card["fit"]["write_fraction"] < 1
    served = tmp_path / "head" / "adapter"
    assert (served / HEAD_FILE).is_file() and (served / "adapter_config.json").is_file()
    tr = Translator.load(str(model_dir), adapter=str(served), device="cpu")
    assert tr.policy_head is not None
    low = [tr.translate(s, "interleaved", "learned", tau=0.0).delays for s in CORPUS[:4]]
    high = [tr.translate(s, "interleaved", "learned", tau=1.0).delays for s in CORPUS[:4]]
    assert all(d[0] == 1 for d in low if d)  # tau 0: write after the first word
    assert all(set(d) == {len(s.split())} for d, s in zip(high, CORPUS[:4]) if d)  # tau 1: read everything

    # a head on an inner layer: the card and the head say which; the translator's streams stop their READs there
    assert cli.main(["finetune", *data, "--output", str(tmp_path / "head1"), "--recipe", "policy-head", "--n", "2",
                     "--init-adapter", str(adapter), "--head-layer", "1"]) == 0
    assert json.loads((tmp_path / "head1" / "training.json").read_text())["policy_head"]["layer"] == 1
    tr = Translator.load(str(model_dir), adapter=str(tmp_path / "head1" / "adapter"), device="cpu")
    assert tr.policy_head.layer == 1 and tr.translate(CORPUS[0], "interleaved", "learned", tau=0.5).delays
    assert cli.main(["finetune", *data, "--output", str(tmp_path / "head9"), "--recipe", "policy-head", "--n", "2",
                     "--init-adapter", str(adapter), "--head-layer", "9"]) == 1


def test_the_interleaved_adapter_stores_only_the_marker_rows_and_reloads_exactly(tmp_path):
    """The saved adapter holds the three markers' embedding deltas, not the whole resized embedding; loaded again on
    the base model it gives the trained model's logits."""
    from safetensors.torch import load_file

    from simulmt.finetune.options import FinetuneOptions
    from simulmt.finetune.trainer import finetune

    model_dir = saved_model_and_pairs(tmp_path, 8)
    trained = Translator.load(str(model_dir), adapter=None, device="cpu", fuse=False)  # finetune trains it in place
    finetune(FinetuneOptions(train_source=str(tmp_path / "src"), train_target=str(tmp_path / "tgt"),
                             model=str(model_dir), output=str(tmp_path / "run"), recipe="interleaved", n=2,
                             max_steps=3, batch_size=4, grad_accum=1, lora_rank=4, lr=5e-2, warmup_steps=0,
                             eval_lines=0), translator=trained, progress=False)
    adapter = tmp_path / "run" / "adapter"
    stored = load_file(adapter / "adapter_model.safetensors")
    assert not any(k.endswith(("embed_tokens.weight", "lm_head.weight", "base_layer.weight")) for k in stored)
    deltas = [v for k, v in stored.items() if "trainable_tokens_delta" in k]
    assert deltas and deltas[0].shape[0] == 3 and float(deltas[0].abs().max()) > 0  # the three markers, trained
    merged = Translator.load(str(model_dir), adapter=str(adapter), device="cpu")
    ids = torch.tensor([[1, 5, 9, merged.fmt.end_of_read, 12, merged.fmt.end_of_write]])
    trained.model.eval()
    with torch.no_grad():
        a, b = merged.model(input_ids=ids).logits, trained.model(input_ids=ids.to(trained.model.device)).logits.cpu()
    assert float((a - b).abs().max()) < 1e-4


def test_evaluate_sweeps_the_threshold(tmp_path):
    """``simulmt evaluate --policies learned --taus ...``: one run per tau, labelled and scored like any policy; a
    lower tau writes earlier."""
    from helpers import write_test_set
    from simulmt.evaluation.grid import evaluate
    from simulmt.evaluation.options import EvaluateOptions

    base = tiny_interleaved_translator("llama")
    d = base.model.config.hidden_size
    g = torch.Generator().manual_seed(3)
    tr = Translator(base.model, base.tokenizer, name="tiny-learned",
                    policy_head=PolicyHead(torch.randn(2, d, generator=g), torch.zeros(2)))
    src, ref = write_test_set(tmp_path, CORPUS[:4], CORPUS[16:20])
    options = EvaluateOptions(source=str(src), reference=str(ref), output=str(tmp_path / "grid"),
                              layouts="interleaved", policies="learned", taus="0,1", no_offline=True)
    evaluate(tr, options, progress=False)
    runs = {p.name: json.loads((p / "scores.json").read_text()) for p in (tmp_path / "grid").iterdir()
            if (p / "scores.json").is_file()}
    assert set(runs) == {"interleaved.learned-0", "interleaved.learned-1"}
    config = json.loads((tmp_path / "grid" / "interleaved.learned-0" / "config.json").read_text())
    assert config["policy"] == "learned" and config["tau"] == 0
    assert runs["interleaved.learned-0"]["AL"] < runs["interleaved.learned-1"]["AL"]
    with pytest.raises(SimulmtError, match="--taus"):
        EvaluateOptions(source=str(src), reference=str(ref), output=str(tmp_path / "x"), policies="learned",
                        taus="0.5,2")


def test_an_adapter_without_markers_continues_as_an_interleaved_adapter(tmp_path):
    """``--recipe interleaved --init-adapter A`` where A was trained without the markers (e.g. the shipped expost
    adapter): A's LoRA weights carry over (unchanged at lr 1e-12), the markers are added and trained alongside."""
    from safetensors.torch import load_file

    model_dir = saved_model_and_pairs(tmp_path, 8)
    data = ["--train-source", str(tmp_path / "src"), "--train-target", str(tmp_path / "tgt"), "--model",
            str(model_dir), "--max-steps", "2", "--batch-size", "4", "--grad-accum", "1", "--eval-lines", "0"]
    assert cli.main(["finetune", *data, "--output", str(tmp_path / "ex"), "--recipe", "expost", "--k", "2",
                     "--lora-rank", "4", "--lr", "5e-2", "--warmup-steps", "0"]) == 0
    first = load_file(tmp_path / "ex" / "adapter" / "adapter_model.safetensors")
    assert cli.main(["finetune", *data, "--output", str(tmp_path / "il"), "--recipe", "interleaved", "--n", "2",
                     "--init-adapter", str(tmp_path / "ex" / "adapter"), "--lr", "1e-12"]) == 0
    adapter = tmp_path / "il" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["trainable_token_indices"]
    second = load_file(adapter / "adapter_model.safetensors")
    lora = [k for k in first if "lora_" in k]
    assert lora and all(torch.allclose(first[k].float(), second[k].float(), atol=1e-7) for k in lora)
    assert any("trainable_tokens_delta" in k for k in second)
    tr = Translator.load(str(model_dir), adapter=str(adapter), device="cpu")
    assert tr.fmt.end_of_read is not None and tr.translate(CORPUS[0], layout="interleaved", policy="read-n", n=2)


def test_the_marker_rows_train_at_their_own_rate(tmp_path):
    """The added markers' rows (peft's trainable tokens) are one optimizer group at ``marker_lr`` without weight
    decay; every other trainable parameter keeps the run's rate."""
    from peft import LoraConfig, get_peft_model
    from transformers import TrainingArguments

    from simulmt.core.markers import add_interleaved_markers
    from simulmt.finetune.trainer import SimulTrainer

    tok = copy.deepcopy(make_tokenizer(chat=True))  # the shared tokenizer must not get the markers
    model = make_model("llama", len(tok))
    ids = add_interleaved_markers(model, tok)
    model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], trainable_token_indices=list(ids)))
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-4, weight_decay=0.1, report_to=[])
    optimizer = SimulTrainer(model=model, args=args, marker_lr=3e-2).create_optimizer()
    names = {id(p): n for n, p in model.named_parameters()}
    marker_groups = [g for g in optimizer.param_groups if any("trainable_tokens" in names[id(p)] for p in g["params"])]
    assert len(marker_groups) == 1 and marker_groups[0]["lr"] == 3e-2 and marker_groups[0]["weight_decay"] == 0
    assert all("trainable_tokens" in names[id(p)] for p in marker_groups[0]["params"])
    others = [g for g in optimizer.param_groups if g is not marker_groups[0]]
    assert all(g["lr"] == 1e-4 for g in others)
    trained = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert trained == {id(p) for p in model.parameters() if p.requires_grad}  # nothing lost, nothing twice
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(trained)


def _decide_with_logits(stream) -> bool:
    """The old rule: a decision forward also computes the LM head row (what a READ then throws away)."""
    return stream._logits() is not None


@pytest.mark.parametrize("layout", [Interleaved(), Expost(slot=16)])
def test_decision_forwards_skip_the_lm_head_only_where_no_proposal_can_use_it(layout, monkeypatch):
    from simulmt.core.engine import Engine, run_batched
    from simulmt.core.policies import WaitK
    from simulmt.core.stream import Stream

    tr = tiny_interleaved_translator("gemma3")
    set_execution(monkeypatch, tr, speculate=False)  # guesses ask for rows of their own (tests/test_speculation.py)
    torch.manual_seed(1)
    head = PolicyHead(torch.randn(2, tr.model.config.hidden_size), torch.zeros(2))
    rows = []
    hook = tr.runner.head.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))

    def run(policies):
        rows.clear()
        streams = []
        for source, policy in zip(CORPUS[:6], policies):
            stream = tr.new_stream(layout, policy, record=True)
            stream.push(source.split(), finished=True)
            streams.append(stream)
        run_batched(streams, Engine(tr.runner), batch_size=3)
        return streams, sum(rows)

    mixed = [Learned(0.5, head) if i % 2 == 0 else WaitK(2) for i in range(6)]  # rows with and without logits
    now, now_rows = run(mixed)
    with monkeypatch.context() as m:
        m.setattr(Stream, "_features_at_hand", _decide_with_logits)
        before, before_rows = run(mixed)
    hook.remove()
    for a, b in zip(before, now):
        assert (a.result().prediction, a.result().delays) == (b.result().prediction, b.result().delays)
        assert [p.token for p in a.proposals] == [p.token for p in b.proposals]
        assert a.result().tokens_fed == b.result().tokens_fed
    # every logits row computed now is used by a proposal, except where a WRITE could have used it (expost: once
    # the target is open, a decision's logits are the next proposal's if it writes; before, none are computed)
    proposals = sum(len(s.proposals) for s in now)
    if isinstance(layout, Interleaved):
        assert now_rows == proposals < before_rows
    else:
        assert proposals < now_rows < before_rows


def test_an_adapter_keeps_the_markers_it_was_trained_with(tmp_path):
    """Loading grows the base model by exactly the markers in the adapter's tokenizer: two for adapters trained
    before end-of-translation (their translations end with end-of-write), three since."""
    from simulmt.core.markers import MARKERS, MARKERS_V1
    from simulmt.models import adapter_markers as _adapter_markers

    for markers in (MARKERS, MARKERS_V1, ()):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"extra_special_tokens": list(markers)}))
        assert _adapter_markers(tmp_path) == markers
    assert _adapter_markers(tmp_path / "missing") == ()


def test_an_interleaved_adapter_is_continued_with_the_markers_it_has(tmp_path, monkeypatch):
    """--init-adapter with an adapter trained with two markers continues it with its two (its saved marker rows
    fit); a fresh interleaved adapter gets three."""
    from simulmt.core.markers import MARKERS, MARKERS_V1
    from simulmt.finetune import trainer
    from simulmt.finetune.options import FinetuneOptions
    from simulmt.finetune.trainer import finetune
    from simulmt.models import adapter_markers

    model_dir = saved_model_and_pairs(tmp_path, 8)

    def train(out, init=None):
        finetune(FinetuneOptions(train_source=str(tmp_path / "src"), train_target=str(tmp_path / "tgt"),
                                 model=str(model_dir), output=str(out), recipe="interleaved", n=2, max_steps=1,
                                 batch_size=4, grad_accum=1, lora_rank=4, eval_lines=0, init_adapter=init),
                 progress=False)
        return out / "adapter"

    with monkeypatch.context() as patch:
        patch.setattr(trainer, "MARKERS", MARKERS_V1)  # an adapter from before end-of-translation
        old = train(tmp_path / "v1")
    assert adapter_markers(old) == MARKERS_V1
    continued = train(tmp_path / "more", init=str(old))
    assert adapter_markers(continued) == MARKERS_V1
    assert Translator.load(str(model_dir), adapter=str(continued), device="cpu").fmt.end_of_translation is None
    assert adapter_markers(train(tmp_path / "new")) == MARKERS
