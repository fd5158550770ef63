"""Every change simulmt makes to a model is listed (simulmt.core.model_patches) and can be taken back: after
``undo`` the model has its own modules and forwards again and computes what it computed before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from simulmt.core import layer_split
from simulmt.core.fused_layers import fuse_for_inference
from simulmt.core.model_patches import PATCHES, applied, undo
from simulmt.core.packed_linear import fbgemm_available, pack_linears
from simulmt.core.runner import ModelRunner
from tiny_models import TEST_DEVICE, make_model

IDS = torch.tensor([[5, 9, 14, 3, 27, 8]])


def own_forward(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS.to(TEST_DEVICE), attention_mask=torch.ones_like(IDS).to(TEST_DEVICE)).logits


def shape_of(model) -> list[tuple[str, str, bool]]:
    """Each module's name, class, and whether it carries an instance ``forward``."""
    return [(name, type(m).__name__, "forward" in m.__dict__) for name, m in model.named_modules()]


@pytest.mark.parametrize("arch", ["llama", "gemma3", "bloom", "falcon"])
def test_patches_are_listed_and_undone(arch):
    model = make_model(arch, 64)
    before, shape = own_forward(model), shape_of(model)
    assert applied(model) == []
    runner = ModelRunner(model)  # adopts an ALiBi model's bias
    layer_split.run_to(runner.layers, 0, lambda: own_forward(model))  # a forward stopped at layer 0
    fused = fuse_for_inference(model)
    expected = (["alibi"] if arch in ("bloom", "falcon") else []) + ["layer_split"] + (
        ["fused"] if sum(fused.values()) else [])
    assert applied(model) == expected
    assert arch in ("bloom", "falcon") or fused["norms"] and fused["mlps"]  # (llama and gemma3 have both)
    assert torch.allclose(own_forward(model), before, atol=1e-5, rtol=1e-5)  # none changes the model's own calls
    assert undo(model) == expected and applied(model) == []
    assert shape_of(model) == shape
    assert torch.equal(own_forward(model), before)
    assert not any(hasattr(m, "_simulmt_alibi") for m in model.modules())
    assert ModelRunner(model).alibi is not None or arch not in ("bloom", "falcon")  # a new runner adopts it again


@pytest.mark.skipif(TEST_DEVICE != "cpu" or not fbgemm_available(), reason="float16-packed layers are for x86 CPUs")
def test_packed_layers_are_unpacked_to_the_weights_they_computed_with():
    model = make_model("llama", 64)
    before = own_forward(model)
    count = pack_linears(model)
    fuse_for_inference(model)  # the stacked gate and up layer is packed too
    assert applied(model) == ["fused", "packed"]
    packed = own_forward(model)
    assert undo(model, ("fused",)) == ["fused"] and applied(model) == ["packed"]
    assert sum(type(m).__name__ == "PackedLinear" for m in model.modules()) == count
    assert undo(model) == ["packed"] and applied(model) == []
    assert sum(type(m) is nn.Linear for m in model.modules()) == count
    after = own_forward(model)
    assert torch.allclose(after, packed, atol=1e-5, rtol=1e-5)  # the float16-rounded weights, as float32 layers
    assert torch.allclose(after, before, atol=1e-2, rtol=1e-2)


def test_an_unknown_patch_is_refused():
    with pytest.raises(ValueError, match="unknown model patches"):
        undo(make_model("llama", 64), ("alibi", "lora"))
    assert PATCHES == ("alibi", "layer_split", "fused", "packed")


def test_a_split_forward_installs_again_after_undo():
    model = make_model("llama", 64)
    runner = ModelRunner(model)
    visible = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    first = runner.hidden_states([5, 9, 14], [0, 1, 2], visible, layer=0)
    undo(model)
    assert not layer_split.installed(model)
    assert torch.equal(runner.hidden_states([5, 9, 14], [0, 1, 2], visible, layer=0), first)
    assert layer_split.installed(model)
