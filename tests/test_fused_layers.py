"""Fused RMSNorms and gated MLPs (simulmt.core.fused_layers): the same outputs, bit for bit, with fewer operations."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import SOURCE, save_tiny_model
from simulmt.core.fused_layers import FusedGatedMLP, FusedRMSNorm, fuse_for_inference
from simulmt.core.packed_linear import PackedLinear, pack_linears
from simulmt.core.runner import compute_model
from simulmt.translator import Translator
from tiny_models import ARCHS, make_model


def _count(model, kind) -> int:
    return sum(isinstance(m, kind) for m in model.modules())


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ["float32", "float16-packed", "bfloat16"])
def test_a_fused_model_gives_the_same_logits_bit_for_bit(arch, dtype):
    model = make_model(arch, 300, seed=1).eval()
    if dtype == "float16-packed":
        pack_linears(model)
    elif dtype == "bfloat16":
        model.to(torch.bfloat16)
    ids = torch.randint(5, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    flops_before = compute_model(model)
    with torch.no_grad():
        before = model(input_ids=ids).logits
        counts = fuse_for_inference(model)
        after = model(input_ids=ids).logits
    norms = sum(type(m).__name__.endswith("RMSNorm") and not isinstance(m, FusedRMSNorm) for m in model.modules())
    assert counts["norms"] > 0 and norms == 0  # every norm of these architectures is fused
    assert _count(model, FusedRMSNorm) == counts["norms"]
    assert counts["mlps"] == (0 if arch == "phi3" else model.config.num_hidden_layers)  # phi3's is fused already
    assert torch.equal(after, before)
    assert compute_model(model) == flops_before  # FLOP counts (reports) do not change
    if dtype == "float16-packed" and counts["mlps"]:
        assert all(isinstance(m.gate_up, PackedLinear) for m in model.modules() if isinstance(m, FusedGatedMLP))


@pytest.mark.parametrize("arch", ["gemma3", "llama"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_norms_with_real_scale_weights_keep_their_own_form(arch, dtype):
    """Gemma-3-270M's norm weights run from about -1 to 1,600, so in bfloat16 its largest norm outputs are thousands
    of times its smallest. A check whose bound scaled with the largest output passed Gemma's norms in Llama's ``w``
    form instead of ``1 + w`` (a difference of one per channel) and the real model wrote garbage in bfloat16; each
    element is now checked against its own magnitude, and the nearer form is taken."""
    model = make_model(arch, 300, seed=1).eval()
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("RMSNorm"):
                n = module.weight.shape[0]  # channels near -1 (1 + w near 0), most small, a few very large
                scale = torch.where(torch.rand(n, generator=generator) < 0.2, 500.0, 3.0)
                module.weight.copy_(torch.rand(n, generator=generator) * scale - 1.0)
    model.to(dtype)
    ids = torch.randint(5, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        counts = fuse_for_inference(model)
        after = model(input_ids=ids).logits
    norms = [m for m in model.modules() if isinstance(m, FusedRMSNorm)]
    assert counts["norms"] == len(norms) > 0
    assert all(m.offset == (arch == "gemma3") for m in norms)  # Gemma's 1 + w, Llama's w
    if dtype == torch.float16:  # (weights this large overflow float16's activations: only the forms are checked)
        return
    assert torch.allclose(after.float(), before.float(), rtol=0.02, atol=0.02 * float(before.float().abs().mean()))


def test_a_norm_whose_outputs_are_not_numbers_is_left_as_it_is():
    class NanRMSNorm(nn.Module):  # no fused form can be shown to reproduce it: a NaN difference is no match
        def __init__(self):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(8)), 1e-6

        def forward(self, x):
            return x * float("nan")

    model = nn.Sequential(NanRMSNorm())
    assert fuse_for_inference(model) == {"norms": 0, "mlps": 0}
    assert type(model[0]).__name__ == "NanRMSNorm"


def test_a_module_the_fused_form_does_not_reproduce_is_left_as_it_is():
    class OddRMSNorm(nn.Module):  # named like one, computes something else
        def __init__(self):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(8)), 1e-6

        def forward(self, x):
            return x * self.weight

    class OddMLP(nn.Module):  # gate and up, but added, not multiplied
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(8, 16, bias=False), nn.Linear(8, 16, bias=False)
            self.down_proj, self.act_fn = nn.Linear(16, 8, bias=False), nn.GELU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) + self.up_proj(x))

    model = nn.Sequential(OddRMSNorm(), OddMLP())
    assert fuse_for_inference(model) == {"norms": 0, "mlps": 0}
    assert type(model[0]).__name__ == "OddRMSNorm" and type(model[1]).__name__ == "OddMLP"


def test_an_unmerged_adapter_is_refused():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make_model("llama", 300), LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="merge the adapter"):
        fuse_for_inference(model)


def test_translator_load_fuses_a_merged_model_and_translates_as_before(tmp_path):
    folder = save_tiny_model(tmp_path / "tiny", arch="gemma3")
    fused = Translator.load(str(folder), adapter="none", device="cpu")
    plain = Translator.load(str(folder), adapter="none", device="cpu", fuse=False)
    assert _count(fused.model, FusedRMSNorm) > 0 and _count(fused.model, FusedGatedMLP) > 0
    assert _count(plain.model, FusedRMSNorm) == 0
    for layout, policy in (("expost", "wait-k"), ("prefix", "wait-k"), ("expost", "offline")):
        a = fused.translate(SOURCE, layout=layout, policy=policy, k=2)
        b = plain.translate(SOURCE, layout=layout, policy=policy, k=2)
        assert a.prediction and (a.prediction, a.delays, a.forward_calls) == (b.prediction, b.delays, b.forward_calls)


def test_finetune_refuses_a_fused_model_and_says_how_to_load_one_to_train(tmp_path):
    from simulmt.errors import SimulmtError
    from simulmt.finetune.options import FinetuneOptions
    from simulmt.finetune.trainer import _wrap_model

    folder = save_tiny_model(tmp_path / "tiny")
    fused = Translator.load(str(folder), adapter="none", device="cpu")
    with pytest.raises(SimulmtError, match="fuse=False"):
        _wrap_model(fused.model, FinetuneOptions(train_source="s", train_target="t", model=str(folder)), "tiny")
