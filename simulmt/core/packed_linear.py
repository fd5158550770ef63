"""Half-precision linear layers for CPUs: weights stored in float16, prepacked for fbgemm; activations float32.

Decoding one token reads every weight once, so on a CPU its time is mostly memory traffic: Gemma-3-270M reads about
1 GB per forward in float32 (its 262k-row LM head alone is 670 MB). bfloat16 would halve that, but on a CPU
without native bfloat16 arithmetic (AVX2, no AVX-512 BF16 / AMX) torch's bfloat16 matrix product runs row by row
and gets slower with every row a batched forward adds. fbgemm's float16 GEMM (``quantized::linear_dynamic_fp16``)
converts the packed float16 weights to float32 inside its kernel (F16C on AVX2), so it reads half the bytes and
still batches like a float32 GEMM:

    weight (out, in) float32 --prepack once--> float16, fbgemm's blocked layout (an opaque packed object)
    x (..., in) float32 -----------------------> y (..., out) float32   (sums in float32)

What changes numerically: each weight is rounded to float16 once (11-bit mantissa; a bfloat16 weight within float16's
range, 6e-5 .. 65504 in magnitude, is kept exactly). No activation is quantized, so each output row depends on its
own input row only: batched == one stream still holds to float32 rounding. The packed weights are not parameters:
the model is for inference only (merge a LoRA adapter first), and ``compute_model`` counts them through
``weight_count``.
"""

from __future__ import annotations

import torch
from torch import nn

from simulmt.errors import SimulmtError

FLOAT16_MAX = 65504.0


def _require_float16_range(weight: torch.Tensor, where: str) -> None:
    """Refuse a weight beyond float16's range; its largest magnitude is found without a temporary copy of it
    (Gemma's LM head is 670 MB)."""
    if not weight.numel():
        return
    low, high = torch.aminmax(weight)
    largest = max(-float(low), float(high))
    if largest > FLOAT16_MAX:
        raise SimulmtError(f"{where} has a weight of magnitude {largest:.3g}, beyond float16's range "
                           f"({FLOAT16_MAX:g}); this model cannot run with float16-packed weights")


class PackedLinear(nn.Module):
    """``nn.Linear`` with its weight held as fbgemm's packed float16 (inference only)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        _require_float16_range(weight, "a linear layer")
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.has_bias = bias is not None
        self.packed = torch.ops.quantized.linear_prepack_fp16(weight.contiguous(), bias)

    @property
    def weight_count(self) -> int:
        """Weights and biases held packed (they are not parameters)."""
        return self.in_features * self.out_features + (self.out_features if self.has_bias else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x.float().contiguous(), self.packed)

    def unpacked(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight as float32 after its float16 rounding, bias): the weights this layer computes with."""
        return torch.ops.quantized.linear_unpack_fp16(self.packed)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, float16 packed"


def fbgemm_available() -> bool:
    return "fbgemm" in torch.backends.quantized.supported_engines


def pack_linears(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` (LM head included; a head tied to the input embeddings gets its own
    packed copy, the embedding table stays float32) by a ``PackedLinear``, in place. Returns how many. The model
    must be a plain float32 model on the CPU (an adapter merged)."""
    if not fbgemm_available():
        raise SimulmtError("float16-packed weights need torch's fbgemm backend (x86 CPUs); this torch build has "
                           f"only {torch.backends.quantized.supported_engines}: use --dtype float32")
    params = list(model.parameters())
    if any(p.device.type != "cpu" for p in params):
        raise SimulmtError("float16-packed weights are for CPUs; on a GPU use --dtype bfloat16 or float16")
    if any(p.dtype != torch.float32 for p in params):
        raise SimulmtError("float16-packed weights start from a float32 model")
    if has_adapter_layers(model):
        raise SimulmtError("float16-packed weights need the adapter merged into the model (merge_adapter=True)")
    targets = [(name, m) for name, m in model.named_modules() if type(m) is nn.Linear]
    for name, linear in targets:  # every layer is checked before any is replaced: a refusal leaves the model as it was
        _require_float16_range(linear.weight.detach(), f"layer {name or 'model'}")
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, PackedLinear(linear))
    return len(targets)


def unpack_linears(model: nn.Module) -> int:
    """Every ``PackedLinear`` of ``model`` back to an ``nn.Linear`` (float32, with the float16-rounded weights it
    computed with: load the model again for its original weights). Returns how many."""
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, PackedLinear)]
    for name, packed in targets:
        weight, bias = packed.unpacked()
        linear = nn.Linear(packed.in_features, packed.out_features, bias=bias is not None)
        with torch.no_grad():
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, linear)
    return len(targets)


def has_adapter_layers(model: nn.Module) -> bool:
    """Does ``model`` hold PEFT adapter layers (an adapter not merged into its weights)?"""
    return any(type(m).__module__.startswith("peft.") for m in model.modules())


def weights_dtype(model: nn.Module) -> str:
    """What a model computes with: ``"float16-packed"`` when its linear layers are packed, else its parameters'
    dtype by name (``"float32"``, ``"bfloat16"``, ...)."""
    if any(isinstance(m, PackedLinear) for m in model.modules()):
        return "float16-packed"
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def packed_weight_count(model: nn.Module) -> int:
    """Weights (and biases) held in ``PackedLinear`` layers: they are not parameters."""
    return sum(m.weight_count for m in model.modules() if isinstance(m, PackedLinear))
