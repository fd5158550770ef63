"""Fine-tuning (simulmt.finetune) on tiny random models: schedules, recipes, the collator, batched parity with
streaming inference, a few training steps, resuming, and the command line."""

from __future__ import annotations

import copy
import json
import random

import pytest
import torch

from simulmt import cli
from simulmt.errors import SimulmtError
from simulmt.core.examples import IGNORE
from simulmt.finetune import data
from simulmt.finetune.collator import SimulCollator
from simulmt.finetune.options import FinetuneOptions
from simulmt.finetune.recipes import RECIPES, Recipe, source_first
from simulmt.finetune.schedules import Schedule, offline, read_n, wait_k
from simulmt.core.layouts import Expost
from simulmt.core.placed import Role
from simulmt.core.policies import Scheduled
from simulmt.core.runner import ModelRunner, attention_spec
from simulmt.translator import Translator
from helpers import tiny_interleaved_translator
from tiny_models import CORPUS, make_model, make_tokenizer

SOURCE = "The weather is nice today and the children play in the garden"
TARGET = "Das Wetter ist heute schön und die Kinder spielen im Garten"
SHORT_SOURCE, SHORT_TARGET = "Where is the train station?", "Wo ist der Bahnhof?"


def fresh_translator(arch: str = "llama", chat: bool = True) -> Translator:
    """A new model each time: LoRA wrapping changes the model in place, so nothing is shared between tests."""
    tok = make_tokenizer(chat=chat)
    return Translator(make_model(arch, len(tok)), tok, name=f"tiny-{arch}")


def recipe(name: str, policy: str = "wait-k", ks=(3,), n: int = 3, slot: int = 4) -> Recipe:
    return Recipe(name, Schedule(policy, tuple(ks), n), slot=slot, phi=300)


def layout_items(tr: Translator, r: Recipe, pairs: list[tuple[str, str]]) -> tuple[list, list[dict]]:
    examples = []
    for source, target in pairs:
        examples += r.examples(tr.fmt, tr.tokenizer, source, target, random.Random(0))[0]
    return examples, [data.encode(ex) for ex in examples]


def collator_for(tr: Translator, r: Recipe) -> SimulCollator:
    types, window = attention_spec(tr.model)
    return SimulCollator(r.visibility, types, window, pad_id=tr.tokenizer.pad_token_id)


# ---- schedules -------------------------------------------------------------------------------------------------
def test_schedules_by_hand():
    assert wait_k(2, 5, 4) == [2, 3, 4, 5]
    assert wait_k(3, 4, 6) == [3, 4, 4, 4, 4, 4]
    assert read_n(2, 5, 4) == [2, 4, 4, 5]  # ceil(j*5/4) = 2 3 4 5, rounded up to multiples of 2, capped at 5
    assert read_n(3, 12, 11) == [3, 3, 6, 6, 6, 9, 9, 9, 12, 12, 12]  # ceil(j*12/11) = 2 3 4 5 6 7 8 9 10 11 12
    assert offline(4, 3) == [4, 4, 4]
    mix = Schedule("wait-k", (1, 3, 5))
    rng = random.Random(0)
    drawn = {mix.delays(10, 10, rng)[1] for _ in range(30)}
    assert drawn == {"wait-1", "wait-3", "wait-5"}
    chunks = Schedule("read-n", ns=(1, 2, 4))  # the n-mix: one chunk size per pair
    runs = [chunks.delays(12, 11, rng) for _ in range(30)]
    assert {name for _, name in runs} == {"read-1", "read-2", "read-4"}
    assert all(delays == read_n(int(name[5:]), 12, 11) for delays, name in runs)
    assert chunks.describe() == "read-n mix 1,2,4"
    again = [Schedule("wait-k", (1, 3, 5)).delays(10, 10, random.Random(7))[0] for _ in range(2)]
    assert again[0] == again[1]  # seeded: a resumed run rebuilds the same data


# ---- recipes ---------------------------------------------------------------------------------------------------
def _segments_text(tokenizer, labels: list[int], end_id: int) -> str:
    """Decode labels segment by segment (a segment ends at an end token), joined by spaces."""
    words, segment = [], []
    for label in labels + [end_id]:
        if label == end_id:
            if segment:
                words.append(tokenizer.decode(segment, skip_special_tokens=True).strip())
            segment = []
        else:
            segment.append(label)
    return " ".join(words)


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_labels_the_target_and_the_end(name):
    interleaved = name in ("interleaved", "policy-head")
    tr = tiny_interleaved_translator("llama") if interleaved else fresh_translator("llama")
    policy = "offline" if name == "offline" else ("read-n" if name == "conversation" else "wait-k")
    examples, _ = layout_items(tr, recipe(name, policy), [(SOURCE, TARGET)])
    labels = [label for ex in examples for label in ex.labels if label != IGNORE]
    end = tr.fmt.end_of_translation if interleaved else tr.fmt.end_id  # the translation's end is labelled
    assert labels[-1] == end
    if interleaved:  # chunks end with <|end-of-write|>, the last with <|end-of-translation|>
        labels = [end if label == tr.fmt.end_of_write else label for label in labels]
    assert _segments_text(tr.tokenizer, labels, end) == TARGET
    if name == "prefix":
        assert len(examples) > 1  # one example per read point
    else:
        assert len(examples) == 1
    if name == "offline":  # plain SFT: contiguous positions, all source before the target
        (ex,) = examples
        assert [t.position for t in ex.tokens] == list(range(len(ex)))
        first_target = next(i for i, t in enumerate(ex.tokens) if t.role.target_side)
        assert all(t.role.target_side for t in ex.tokens[first_target:])


def test_expost_nomask_sees_the_whole_source_with_expost_positions():
    tr = fresh_translator("llama")
    (masked,), _ = layout_items(tr, recipe("expost", ks=(1,)), [(SOURCE, TARGET)])
    (nomask,), _ = layout_items(tr, recipe("expost-nomask", ks=(1,)), [(SOURCE, TARGET)])
    assert nomask.tokens == source_first(masked.tokens)
    assert sorted(nomask.tokens, key=lambda t: (t.position, t.role.value)) == sorted(
        masked.tokens, key=lambda t: (t.position, t.role.value))  # the same placed tokens, only the order moved
    assert {(t, label) for t, label in zip(nomask.tokens, nomask.labels)} == {
        (t, label) for t, label in zip(masked.tokens, masked.labels)}  # same labels on the same tokens
    for ex, every_target_sees_all in ((nomask, True), (masked, False)):
        visible = ex.visible(Expost(slot=4))
        src = [i for i, t in enumerate(ex.tokens) if t.role is Role.SOURCE]
        rows = [i for i, t in enumerate(ex.tokens) if t.role.target_side]
        assert bool(visible[rows][:, src].all()) is every_target_sees_all


def test_slotless_is_the_naive_training_view_and_gpe_refuses_long_sources():
    tr = fresh_translator("llama")
    (ex,), _ = layout_items(tr, recipe("slotless"), [(SOURCE, TARGET)])
    order = sorted(ex.tokens, key=lambda t: t.position)
    assert [t.position for t in order] == list(range(len(ex)))  # contiguous
    assert all(not t.role.target_side for t in order[: sum(not t.role.target_side for t in order)])
    long = Recipe("gpe", Schedule("wait-k", (3,)), phi=len(tr.fmt.prompt) + 2)  # room for a one-token source
    ds = data.build_dataset(long, tr.fmt, tr.tokenizer, [data.Pair(SOURCE, TARGET)] * 2 + [data.Pair("a", "b")],
                            512, 0)
    assert ds.stats.unplaceable == 2 and len(ds) == 1


# ---- the collator ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_collator_rows_equal_the_single_examples(arch):
    tr = fresh_translator(arch)
    r = recipe("expost")
    examples, items = layout_items(tr, r, [(SOURCE, TARGET), (SHORT_SOURCE, SHORT_TARGET)])
    assert len(examples[0]) != len(examples[1])
    batch = collator_for(tr, r)(items)
    length = max(len(ex) for ex in examples)
    runner = ModelRunner(tr.model)
    masks = batch["attention_mask"]
    if arch == "gemma3":
        assert isinstance(masks, dict) and set(masks) == {"full_attention", "sliding_attention"}
        assert length > 2 * tr.model.config.sliding_window
    else:
        masks = {"full_attention": masks}
    for b, ex in enumerate(examples):
        n = len(ex)
        assert batch["input_ids"][b, :n].tolist() == ex.input_ids.tolist()
        assert batch["position_ids"][b, :n].tolist() == ex.position_ids.tolist()
        assert batch["labels"][b, :n].tolist() == ex.labels
        assert (batch["labels"][b, n:] == IGNORE).all()
        assert (batch["input_ids"][b, n:] == tr.tokenizer.pad_token_id).all()
        single = runner.masks(ex.visible(r.layout()), 0)
        single = single if isinstance(single, dict) else {"full_attention": single}
        for kind, mask in masks.items():
            assert mask.shape == (2, 1, length, length)
            assert torch.equal(mask[b, 0, :n, :n], single[kind][0, 0])
            blocked = torch.finfo(mask.dtype).min
            assert (mask[b, 0, :n, n:] == blocked).all()  # no real token sees a pad
            pad_rows = mask[b, 0, n:, :]
            assert torch.equal(pad_rows == 0, torch.eye(length, dtype=torch.bool)[n:])  # pads see only themselves
    assert int(batch["real_tokens"]) == sum(len(ex) for ex in examples)


# ---- parity: the padded training batch vs streaming inference ---------------------------------------------------
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_batched_training_logits_equal_streaming(arch):
    from simulmt.finetune.trainer import label_logits

    tr = fresh_translator(arch)
    r = Recipe("expost", Schedule("wait-k", (1,)), slot=4)  # several slots, multi-token words, rollbacks
    short = Recipe("expost", Schedule("wait-k", (3,)), slot=4)
    cases = [(r, SOURCE, TARGET), (short, SHORT_SOURCE, SHORT_TARGET)]
    examples, items = [], []
    for rec, source, target in cases:
        (ex,), _ = rec.examples(tr.fmt, tr.tokenizer, source, target, random.Random(0))
        examples.append(ex)
        items.append(data.encode(ex))
    batch = collator_for(tr, r)(items)
    with torch.no_grad():
        logits, labels = label_logits(tr.model, batch)
    assert logits.shape == (sum(label != IGNORE for ex in examples for label in ex.labels), tr.model.config.vocab_size)
    row, max_diff = 0, 0.0
    for (rec, source, target), ex in zip(cases, examples):
        delays = rec.schedule.delays(len(source.split()), len(target.split()), random.Random(0))[0]
        forced = [(t.token_id, t.unit) for t in ex.tokens if t.role is Role.TARGET] + [(tr.fmt.end_id, -1)]
        session = tr.session(rec.layout(), Scheduled(tuple(delays)), forced=forced, record=True)
        assert session.run(source).prediction == target
        proposals = {p.context: p.logits for p in session.proposals}
        for i, label in enumerate(ex.labels):
            if label == IGNORE:
                continue
            assert int(labels[row]) == label
            streamed = proposals[tuple(ex.tokens[: i + 1])]  # the proposal made from the same cached context
            max_diff = max(max_diff, float((logits[row] - streamed).abs().max()))
            row += 1
    assert row == logits.shape[0]
    assert max_diff <= 1e-4


# ---- training ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("corpus")
    files = {"train_source": CORPUS[:16], "train_target": CORPUS[16:32],
             "dev_source": CORPUS[:2], "dev_reference": CORPUS[16:18]}
    for name, lines in files.items():
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {name: str(folder / name) for name in files}


def options(corpus, output, **kwargs) -> FinetuneOptions:
    base = dict(train_source=corpus["train_source"], train_target=corpus["train_target"], output=str(output),
                batch_size=4, grad_accum=2, lora_rank=4, max_steps=8, save_steps=4, logging_steps=1, eval_lines=0,
                lr=1e-2, warmup_steps=0)
    base.update(kwargs)
    return FinetuneOptions(**base)


@pytest.mark.parametrize("full, bf16", [(False, False), (True, False), (False, True)])
def test_a_few_steps_lower_the_loss(corpus, tmp_path, full, bf16):
    from simulmt.finetune.trainer import finetune

    card = finetune(options(corpus, tmp_path / "run", full=full, bf16=bf16, lr=1e-3 if full else 1e-2, max_steps=8),
                    translator=fresh_translator("llama"), progress=False)
    losses = [h["loss"] for h in card["loss_history"]]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.3
    saved = tmp_path / "run" / ("model" if full else "adapter")
    assert (saved / ("config.json" if full else "adapter_config.json")).is_file()
    written = json.loads((tmp_path / "run" / "training.json").read_text())
    assert written["steps"] == 8 and written["tokens_per_s"] > 0 and written["average_train_length"] > 20
    assert written["data"]["examples"] == 16 and written["serve_with"]["layout"] == "expost"
    assert written["activation_checkpointing"] == {"on": False, "why": "auto: off on a CPU (memory is not what limits it)"}
    assert written["weights_dtype"] == "float32"  # (a CPU run keeps float32 weights, --bf16 or not)
    assert set(written["timing"]) == {"startup_seconds", "load_seconds", "layout_seconds", "train_seconds",
                                      "save_seconds"}
    if not full:  # the adapter alone: no copy of the embedding matrix
        assert not any("embed" in k for k in safetensors_keys(saved / "adapter_model.safetensors"))


def safetensors_keys(path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return list(f.keys())


def test_laying_out_from_one_batched_encode_gives_the_same_examples():
    """``Pretokenized`` answers each word's encode from one batched call: the same ids as word by word, special
    token strings in the text spelled out as plain text all the same."""
    from simulmt.finetune.pretokenized import Pretokenized

    tr = fresh_translator("llama")
    pairs = [data.Pair(s, t) for s, t in zip(CORPUS[:12], CORPUS[12:24])]
    pairs.append(data.Pair("say <eos> and </s> twice", "sag <eos> zweimal"))
    words = {w for p in pairs for w in (p.source + " " + p.target).split()}
    fast = Pretokenized.for_pairs(tr.tokenizer, pairs)
    for w in sorted(words):
        for text in (w, " " + w):
            assert fast(text, add_special_tokens=False, split_special_tokens=True)["input_ids"] == tr.tokenizer(
                text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    r = recipe("expost", ks=(1, 3))
    built = data.build_dataset(r, tr.fmt, tr.tokenizer, pairs, 512, seed=0)

    class Plain:  # word by word, the tokenizer itself
        @staticmethod
        def for_pairs(tokenizer, pairs):
            return tokenizer
    original, data.Pretokenized = data.Pretokenized, Plain
    try:
        plain = data.build_dataset(r, tr.fmt, tr.tokenizer, pairs, 512, seed=0)
    finally:
        data.Pretokenized = original
    assert len(built.items) == len(plain.items) == len(pairs)
    for a, b in zip(built.items, plain.items):
        assert set(a) == set(b) and all((a[k] == b[k]).all() for k in a)


def test_weights_dtype_and_activation_checkpointing_choices(monkeypatch, tmp_path, corpus):
    from simulmt.finetune.trainer import choose_checkpointing, model_load_dtype

    lora_bf16, full_bf16 = options(corpus, tmp_path, bf16=True), options(corpus, tmp_path, bf16=True, full=True)
    assert model_load_dtype(lora_bf16, "cuda:0") == torch.bfloat16  # frozen weights in the training dtype
    assert model_load_dtype(full_bf16, "cuda:0") == torch.float32  # master weights of a full fine-tune
    assert model_load_dtype(lora_bf16, "cpu") == torch.float32
    assert model_load_dtype(options(corpus, tmp_path), "cuda:0") == torch.float32
    model = fresh_translator("llama").model
    assert choose_checkpointing(options(corpus, tmp_path, activation_checkpointing="on"), model, 40, "cpu")[0]
    assert not choose_checkpointing(options(corpus, tmp_path, activation_checkpointing="off"), model, 40, "cuda:0")[0]
    assert not choose_checkpointing(options(corpus, tmp_path), model, 40, "cpu")[0]
    free = {"bytes": 10 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 80 * 2**30))
    on, why = choose_checkpointing(options(corpus, tmp_path), model, 40, "cuda:0")
    assert not on and why.startswith("auto: off")
    free["bytes"] = 2**20  # a GPU with 1 MiB free: the activations do not fit
    on, why = choose_checkpointing(options(corpus, tmp_path), model, 40, "cuda:0")
    assert on and why.startswith("auto: on")


def test_the_n_mix_option_draws_chunk_sizes(corpus, tmp_path):
    from simulmt.finetune.trainer import make_recipe

    r = make_recipe(options(corpus, tmp_path, recipe="interleaved", policy="read-n", n_mix="4,1,2"))
    assert r.schedule.ns == (1, 2, 4) and r.inference()["n"] == 2
    with pytest.raises(SimulmtError, match="--n-mix is a read-n schedule"):
        options(corpus, tmp_path, n_mix="1,2")  # the expost default schedule is wait-k
    with pytest.raises(SimulmtError, match="at least 1"):
        options(corpus, tmp_path, recipe="interleaved", policy="read-n", n_mix="0,2")


def test_the_mixed_schedule_draws_wait_k_and_read_n_per_pair(corpus, tmp_path):
    import random

    from simulmt.finetune.schedules import Schedule, read_n, wait_k
    from simulmt.finetune.trainer import finetune, make_recipe

    schedule = Schedule("mixed", ks=(1, 5), ns=(2, 4))
    rng = random.Random(0)
    drawn = [schedule.delays(9, 8, rng) for _ in range(200)]
    names = {name for _, name in drawn}
    assert names == {"wait-1", "wait-5", "read-2", "read-4"}
    for delays, name in drawn:  # each pair is laid out along the schedule it names
        value = int(name.split("-")[1])
        assert delays == (wait_k(value, 9, 8) if name.startswith("wait") else read_n(value, 9, 8))
    assert 60 < sum(name.startswith("wait") for _, name in drawn) < 140
    assert drawn == [schedule.delays(9, 8, r) for r in [random.Random(0)] for _ in range(200)]  # seeded
    assert schedule.describe() == "mixed: wait-k mix 1,5 + read-n mix 2,4"

    opts = options(corpus, tmp_path / "run", recipe="interleaved", policy="mixed", k_mix="1,3", n_mix="2,3",
                   dry_run=True)
    recipe = make_recipe(opts)
    assert recipe.inference()["policy"] == "wait-k" and recipe.inference()["k"] == 3
    tok = copy.deepcopy(make_tokenizer(chat=True))  # the recipe adds its markers: not to the shared tokenizer
    card = finetune(opts, translator=Translator(make_model("llama", len(tok)), tok), progress=False)
    families = {name.split("-")[0] for name in card["data"]["schedules"]}
    assert families == {"wait", "read"}


def test_time_limit_stops_with_a_checkpoint(corpus, tmp_path):
    from simulmt.finetune.trainer import finetune

    card = finetune(options(corpus, tmp_path / "run", max_minutes=1e-6), translator=fresh_translator("llama"),
                    progress=False)
    assert card["steps"] == 1 and card["stopped_by_time_limit"]
    assert (tmp_path / "run" / "checkpoint-1").is_dir() and (tmp_path / "run" / "adapter").is_dir()


class _Interrupt(Exception):
    pass


def test_resume_continues_the_same_run(corpus, tmp_path):
    from transformers import TrainerCallback

    from simulmt.finetune.trainer import finetune

    class StopAfterFirstCheckpoint(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            raise _Interrupt(state.global_step)

    whole = finetune(options(corpus, tmp_path / "whole"), translator=fresh_translator("llama"), progress=False)
    with pytest.raises(_Interrupt):
        finetune(options(corpus, tmp_path / "cut"), translator=fresh_translator("llama"), progress=False,
                 callbacks=(StopAfterFirstCheckpoint(),))
    assert (tmp_path / "cut" / "checkpoint-4").is_dir() and not (tmp_path / "cut" / "adapter").exists()
    with pytest.raises(SimulmtError, match="already holds a run"):
        finetune(options(corpus, tmp_path / "cut"), translator=fresh_translator("llama"), progress=False)
    with pytest.raises(SimulmtError, match="--k: was 3, now 5"):
        finetune(options(corpus, tmp_path / "cut", resume=True, k=5), translator=fresh_translator("llama"))
    with pytest.raises(SimulmtError, match="--context-pairs: was 0, now 2"):  # (context changes the data too)
        finetune(options(corpus, tmp_path / "cut", resume=True, context_pairs=2,
                         train_context_target=corpus["train_target"]), translator=fresh_translator("llama"))
    resumed = finetune(options(corpus, tmp_path / "cut", resume=True), translator=fresh_translator("llama"),
                       progress=False)
    assert resumed["resumed_from"].endswith("checkpoint-4")
    assert resumed["steps"] == whole["steps"] == 8
    assert resumed["tokens_seen_total"] == whole["tokens_seen_total"]  # the trainer state came back
    assert resumed["tokens_this_run"] < whole["tokens_this_run"]
    assert [h["step"] for h in resumed["loss_history"]] == list(range(1, 9))  # the log history came back too
    assert resumed["loss_history"] == whole["loss_history"]  # same batches, same optimizer state
    from safetensors.torch import load_file

    a = load_file(tmp_path / "whole" / "adapter" / "adapter_model.safetensors")
    b = load_file(tmp_path / "cut" / "adapter" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_init_adapter_continues_a_trained_adapter(corpus, tmp_path):
    """--init-adapter starts from the adapter's weights (its first loss is the trained adapter's, far below a fresh
    adapter's) and trains them on (the loss keeps falling); a bfloat16-stored adapter trains in float32."""
    from safetensors.torch import load_file, save_file

    from simulmt.finetune.trainer import finetune

    first = finetune(options(corpus, tmp_path / "first", max_steps=8), translator=fresh_translator("llama"),
                     progress=False)
    stored = tmp_path / "first" / "adapter" / "adapter_model.safetensors"
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(stored).items()}, str(stored))  # as shipped
    fresh = finetune(options(corpus, tmp_path / "fresh", max_steps=1), translator=fresh_translator("llama"),
                     progress=False)
    cont = finetune(options(corpus, tmp_path / "cont", max_steps=4, init_adapter=str(tmp_path / "first" / "adapter"),
                            lora_rank=16), translator=fresh_translator("llama"), progress=False)
    assert cont["hyperparameters"]["adapter"]["lora_rank"] == 4  # the adapter's own rank, not --lora-rank
    start, fresh_start = cont["loss_history"][0]["loss"], fresh["loss_history"][0]["loss"]
    assert abs(start - first["loss_history"][-1]["loss"]) < 0.5 * (fresh_start - first["loss_history"][-1]["loss"])
    assert cont["loss_history"][-1]["loss"] < start
    assert cont["hyperparameters"]["adapter"]["init_adapter"] == str(tmp_path / "first" / "adapter")
    trained = load_file(tmp_path / "cont" / "adapter" / "adapter_model.safetensors")
    assert all(v.dtype == torch.float32 for v in trained.values())
    with pytest.raises(SimulmtError, match="no adapter_config.json"):
        finetune(options(corpus, tmp_path / "bad", init_adapter=str(tmp_path)), translator=fresh_translator("llama"))
    with pytest.raises(SimulmtError, match="does not go with --full"):
        options(corpus, tmp_path / "bad", init_adapter="x", full=True)


# ---- the command line ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    ([], "give exactly one training source"),
    (["--train-source", "a"], "--train-source and --train-target go together"),
    (["--train-tsv", "a", "--recipe", "offline", "--policy", "wait-k"], "takes no --policy"),
    (["--train-tsv", "a", "--policy", "read-n", "--k-mix", "1,3"], "--k-mix is a wait-k schedule"),
    (["--train-tsv", "a", "--k-mix", "1,x"], "comma-separated integers"),
    (["--train-tsv", "a", "--recipe", "nope"], "invalid choice"),
    (["--train-tsv", "a", "--lora-rank", "0"], "--lora-rank must be at least 1"),
])
def test_argument_errors_exit_2(capsys, args, message):
    assert cli.main(["finetune", *args]) == 2
    assert message in capsys.readouterr().err


def test_command_line_end_to_end(corpus, tmp_path, capsys):
    """A tiny model saved to disk: train 2 steps, save, evaluate; the adapter loads back with Translator.load."""
    tok = make_tokenizer(chat=True)
    model_dir = tmp_path / "tiny"
    make_model("llama", len(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "run"
    common = ["--train-source", corpus["train_source"], "--train-target", corpus["train_target"], "--model",
              str(model_dir), "--output", str(out), "--recipe", "conversation", "--n", "2"]
    assert cli.main(["finetune", *common, "--dry-run"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["data"]["examples"] == 16 and card["serve_with"]["layout"] == "conversation"
    assert not out.exists()
    assert cli.main(["finetune", *common, "--dry-run", "--context-pairs", "2"]) == 0  # with context: longer prompts
    with_context = json.loads(capsys.readouterr().out)
    assert with_context["context"]["pairs"] == 2 and card["context"] is None
    assert with_context["data"]["label_tokens"] == card["data"]["label_tokens"]
    assert with_context["data"]["average_length"] > card["data"]["average_length"]
    assert cli.main(["finetune", *common, "--max-steps", "2", "--batch-size", "4", "--grad-accum", "1",
                     "--lora-rank", "4", "--dev-source", corpus["dev_source"], "--dev-reference",
                     corpus["dev_reference"], "--eval-lines", "2"]) == 0
    card = json.loads((out / "training.json").read_text())
    assert card["steps"] == 2 and card["command"].startswith("simulmt finetune --train-source")
    assert card["eval"]["lines"] == 2 and card["eval"]["policy"] == "read-n" and "LAAL" in card["eval"]
    assert json.loads((out / "eval.json").read_text())["BLEU"] == card["eval"]["BLEU"]
    assert len((out / "eval.jsonl").read_text().splitlines()) == 2
    tr = Translator.load(str(model_dir), adapter=str(out / "adapter"), device="cpu")
    assert tr.translate(CORPUS[0], layout="conversation", policy="read-n", n=2).delays
    assert cli.main(["finetune", *common, "--max-steps", "2"]) == 1  # the run exists: --resume or another dir
    assert "already holds a run" in capsys.readouterr().err


def test_pairs_with_an_empty_side_are_skipped_and_said(tmp_path, capsys):
    tok = make_tokenizer(chat=True)
    model_dir = tmp_path / "tiny"
    make_model("llama", len(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    (tmp_path / "src").write_text("\n".join(CORPUS[:4]) + "\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("\n".join([CORPUS[16], "  ", CORPUS[18], CORPUS[19]]) + "\n", encoding="utf-8")
    assert cli.main(["finetune", "--train-source", str(tmp_path / "src"), "--train-target", str(tmp_path / "tgt"),
                     "--model", str(model_dir), "--output", str(tmp_path / "run"), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    card = json.loads(out)
    assert card["data"]["pairs_read"] == 4 and card["data"]["pairs_empty"] == 1 and card["data"]["examples"] == 3
    assert "3 pairs (1 with an empty side skipped) -> 3 examples" in err

def test_data_files(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("a b\tx y\n\nc\t\nd\te\n", encoding="utf-8")
    stats = data.PairStats()
    assert data.tsv_file(str(tsv), stats=stats) == [data.Pair("a b", "x y"), data.Pair("d", "e")]
    assert stats.empty == 1
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text('{"source": "a", "target": "b"}\n{"translation": {"en": "c", "de": "d"}}\n', encoding="utf-8")
    assert data.jsonl_file(str(jsonl), limit=5) == [data.Pair("a", "b"), data.Pair("c", "d")]
    assert data.jsonl_file(str(jsonl), limit=1) == [data.Pair("a", "b")]
    (tmp_path / "bad.tsv").write_text("only one column\n", encoding="utf-8")
    with pytest.raises(SimulmtError, match="bad.tsv:1: expected 'source<TAB>target'"):
        data.tsv_file(str(tmp_path / "bad.tsv"))
    (tmp_path / "one.txt").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "two.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(SimulmtError, match="must be aligned"):
        data.parallel_files(str(tmp_path / "one.txt"), str(tmp_path / "two.txt"))


def test_data_files_that_are_not_utf8_name_the_file_and_the_line(tmp_path):
    """One line reader for every command: a bad line stops before training (skipping it would misalign pairs);
    a form feed or U+2028 inside a line is no line break (str.splitlines() broke on them)."""
    (tmp_path / "src.txt").write_bytes("a b\nc\x0cd\ne\u2028f\n".encode())
    (tmp_path / "tgt.txt").write_bytes(b"x\r\ny\r\nz\r\n")
    assert data.parallel_files(str(tmp_path / "src.txt"), str(tmp_path / "tgt.txt")) == [
        data.Pair("a b", "x"), data.Pair("c d", "y"), data.Pair("e f", "z")]
    (tmp_path / "bad.txt").write_bytes(b"x\ny\nna\xefve\n")
    with pytest.raises(SimulmtError, match=r"training data target: .*bad\.txt: line 3 is not valid UTF-8 "
                                           r"\(byte 0xef at column 3"):
        data.parallel_files(str(tmp_path / "src.txt"), str(tmp_path / "bad.txt"))
    (tmp_path / "bad.tsv").write_bytes(b"a\tb\n\xff\tc\n")
    with pytest.raises(SimulmtError, match=r"bad\.tsv: line 2 is not valid UTF-8"):
        data.tsv_file(str(tmp_path / "bad.tsv"))


def test_each_recipe_trains_the_layout_it_names_with_its_options():
    """Recipes build their layout through the registry (no switch on names): the table names a registered layout
    for every recipe, and a recipe's slot / phi reach the layout that takes them."""
    from simulmt.core.layouts import LAYOUTS, Expost, GroupPositions, Interleaved, NaiveReuse, PrefixRecompute
    from simulmt.finetune.recipes import RECIPE_LAYOUTS, RECIPES, Recipe
    from simulmt.finetune.schedules import Schedule

    assert set(RECIPE_LAYOUTS) == set(RECIPES) and set(RECIPE_LAYOUTS.values()) <= set(LAYOUTS)
    policy = {"offline": "offline"}
    built = {name: Recipe(name, Schedule(policy.get(name, "wait-k")), slot=8, phi=64).layout() for name in RECIPES}
    def same(*layouts) -> bool:
        return all(type(x) is type(layouts[0]) and vars(x) == vars(layouts[0]) for x in layouts)

    assert same(built["expost"], Expost(slot=8), built["expost-nomask"]) and not same(Expost(slot=16), built["expost"])
    assert same(built["gpe"], GroupPositions(phi=64))
    assert same(built["slotless"], NaiveReuse()) and same(built["offline"], PrefixRecompute(), built["prefix"])
    assert same(built["policy-head"], Interleaved(), built["interleaved"])
    assert all(type(layout) is LAYOUTS[RECIPE_LAYOUTS[name]] for name, layout in built.items())
