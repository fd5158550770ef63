"""float16-packed weights (simulmt/core/packed_linear.py): the layer computes with the float16-rounded weights in
float32, a packed model keeps the engine's invariant (batched == one stream), counts the same FLOPs, loads by name,
and refuses what it cannot run."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from helpers import save_tiny_model
from simulmt.core.packed_linear import PackedLinear, fbgemm_available, pack_linears
from simulmt.core.runner import compute_model
from simulmt.errors import SimulmtError
from simulmt.models import load_model, model_dtype, resolve_dtype
from simulmt.translator import Translator
from test_engine import assert_batched_equals_alone
from tiny_models import make_model, make_tokenizer

pytestmark = pytest.mark.skipif(not fbgemm_available(), reason="torch has no fbgemm backend on this CPU")


def test_a_packed_layer_computes_with_its_weights_rounded_to_float16():
    torch.manual_seed(0)
    linear = nn.Linear(48, 80)
    packed = PackedLinear(linear)
    x = torch.randn(2, 5, 48)
    expected = nn.functional.linear(x, linear.weight.half().float(), linear.bias)
    assert torch.allclose(packed(x), expected, atol=1e-5, rtol=1e-5)
    assert packed(x).shape == (2, 5, 80) and packed(x).dtype == torch.float32
    weight, bias = packed.unpacked()
    assert torch.equal(weight, linear.weight.half().float())
    assert torch.equal(bias, linear.bias)
    # a row's output does not depend on the rows beside it (no activation is quantized)
    rows = torch.randn(16, 48) * 3
    alone_rows = torch.cat([packed(rows[i:i + 1]) for i in range(16)])
    assert torch.allclose(packed(rows), alone_rows, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])  # qwen2: linear layers with biases
def test_a_packed_model_gives_nearly_its_float32_logits_and_the_same_flops(arch):
    tok = make_tokenizer(chat=True)
    model = make_model(arch, len(tok))
    packed = copy.deepcopy(model)
    linears = sum(type(m) is nn.Linear for m in model.modules())
    assert pack_linears(packed) == linears and not any(type(m) is nn.Linear for m in packed.modules())
    ids = torch.tensor([[5, 9, 13, 2, 7]])
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, packed(input_ids=ids).logits
    assert float((a - b).abs().max()) < 2e-2 * max(1.0, float(a.abs().max()))
    assert compute_model(packed) == compute_model(model)


def test_a_packed_model_keeps_batched_equal_to_one_stream():
    tok = make_tokenizer(chat=True)
    model = make_model("gemma3", len(tok))
    pack_linears(model)
    assert_batched_equals_alone(Translator(model, tok, name="tiny-gemma3-packed"))


def test_load_model_packs_by_name_and_refuses_unknown_dtypes(tmp_path):
    folder = save_tiny_model(tmp_path / "tiny")
    loaded = load_model(str(folder), dtype="float16-packed", device="cpu")
    assert any(isinstance(m, PackedLinear) for m in loaded.model.modules())
    assert isinstance(loaded.model.get_output_embeddings(), PackedLinear)
    assert model_dtype("bfloat16") == (torch.bfloat16, False)
    assert model_dtype("float16-packed") == (torch.float32, True)
    for name in ("int3", "fp32"):
        with pytest.raises(SimulmtError, match=f"unknown dtype '{name}'"):
            model_dtype(name)


def test_packing_refuses_what_it_cannot_run():
    with pytest.raises(SimulmtError, match="float32 model"):
        pack_linears(nn.Sequential(nn.Linear(4, 4)).to(torch.bfloat16))
    big = nn.Linear(4, 4)
    with torch.no_grad():
        big.weight[0, 0] = 1e6
    with pytest.raises(SimulmtError, match="beyond float16's range"):
        pack_linears(nn.Sequential(big))
    peft = pytest.importorskip("peft")
    tok = make_tokenizer(chat=True)
    lora = peft.get_peft_model(make_model("llama", len(tok)), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(SimulmtError, match="adapter merged"):
        pack_linears(lora)


def test_packing_is_all_or_nothing():
    """A layer beyond float16's range is found before any layer is replaced: the model is left as it was."""
    small, big = nn.Linear(4, 4), nn.Linear(4, 4)
    with torch.no_grad():
        big.weight[0, 0] = 1e6
    model = nn.Sequential(small, big)
    with pytest.raises(SimulmtError, match="layer 1 has a weight"):
        pack_linears(model)
    assert [type(m) for m in model] == [nn.Linear, nn.Linear]


def test_auto_dtype_is_the_fastest_measured_one_for_the_device(monkeypatch):
    assert resolve_dtype("auto", "cpu") == "float16-packed"
    assert resolve_dtype("auto", "cpu:0") == "float16-packed"
    asked = []
    capabilities = {0: (8, 0), 1: (7, 5)}  # an A100 and a T4 (where bfloat16 is only emulated)

    def capability(device):
        asked.append(device)
        return capabilities[device.index or 0]

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("auto", torch.device("cuda:1")) == "float32"  # not float16: Gemma overflows in it
    assert [d.index for d in asked] == [None, 1]  # the device asked about, not the current one
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_dtype("auto") == "float16-packed"  # no device given, no GPU: the CPU
    for given in ("float32", "bfloat16", "float16-packed", torch.float16):
        assert resolve_dtype(given, "cpu") == given


def test_load_model_auto_packs_on_a_cpu_and_says_what_it_became(tmp_path):
    folder = save_tiny_model(tmp_path / "tiny")
    loaded = load_model(str(folder), dtype="auto", device="cpu")
    assert loaded.dtype == "float16-packed"
    assert isinstance(loaded.model.get_output_embeddings(), PackedLinear)
    assert load_model(str(folder), dtype="float32", device="cpu").dtype == "float32"
    translator = Translator.load(str(folder), adapter="none", dtype="auto", device="cpu")
    assert translator.dtype == "float16-packed"


def test_auto_stays_float32_for_weights_beyond_float16(tmp_path, capsys):
    tok = make_tokenizer(chat=True)
    model = make_model("llama", len(tok))
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = 1e6
    model.save_pretrained(tmp_path / "big")
    tok.save_pretrained(tmp_path / "big")
    loaded = load_model(str(tmp_path / "big"), dtype="auto", device="cpu")
    assert loaded.dtype == "float32" and not any(isinstance(m, PackedLinear) for m in loaded.model.modules())
    assert "--dtype auto: staying float32" in capsys.readouterr().err
    with pytest.raises(SimulmtError, match="beyond float16's range"):
        load_model(str(tmp_path / "big"), dtype="float16-packed", device="cpu")
