"""Fewer, larger operations for a model that only runs inference: each RMSNorm as one ``rms_norm`` call, a gated
MLP's gate and up projections as one matrix product.

Decoding a token with a small model is a few thousand small operations, and their dispatch, not their arithmetic,
is most of a forward's time: on a CPU (Gemma-3-270M, float16-packed, 2 threads) the decoder's matrix products are
about 6.5 of its 18 ms per token; on a GPU each operation is a kernel launch. Transformers writes an RMSNorm as
eight of them (cast, square, mean, add, rsqrt, multiply, weight, cast) and Gemma 3 has six norms a layer; a gated
MLP is three matrix products where two read the same input. So, for a model that is only run:

* an RMSNorm becomes ``FusedRMSNorm``: ``torch.nn.functional.rms_norm`` in float32, with the weight in the form
  the module uses (Gemma's ``1 + weight`` multiplied before the cast back, Llama's ``weight`` after it);
* a gated MLP, ``down(act(gate(x)) * up(x))``, becomes ``FusedGatedMLP``: one product with the gate and up weights
  stacked (a ``PackedLinear`` again when they were packed: the same float16 weights), split, then as before.

Each replacement is checked against the module it replaces on random input before it is made, and a module that
the fused form does not reproduce (another formula, an unknown activation path) is left as it is: the outputs are
the model's own to float rounding (bit for bit on the CPU in float32 and float16-packed, measured). Not for
training: the fused MLP has no ``gate_proj``/``up_proj`` to put a LoRA adapter on, so ``Translator.load`` fuses only
a model whose adapter is merged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from simulmt.core.packed_linear import PackedLinear, has_adapter_layers


class FusedRMSNorm(nn.Module):
    """``rms_norm(x) * weight``: ``offset`` adds 1 to the weight (Gemma) and multiplies before casting back."""

    def __init__(self, weight: torch.Tensor, eps: float, offset: bool):
        super().__init__()
        self.offset, self.eps = offset, eps
        self.shape = (weight.shape[-1],)
        scale = weight.detach().float() + 1.0 if offset else weight.detach().clone()
        self.scale = nn.Parameter(scale, requires_grad=False)  # a parameter, so the model's counts stay as they were

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.offset:  # Gemma: (x_hat * (1 + w)).to(dtype), all in float32
            return F.rms_norm(x.float(), self.shape, self.scale, self.eps).type_as(x)
        return self.scale * F.rms_norm(x.float(), self.shape, None, self.eps).to(x.dtype)  # Llama: w * x_hat.to(dtype)

    def extra_repr(self) -> str:
        return f"{self.shape[0]}, eps={self.eps}, {'1 + weight' if self.offset else 'weight'}"


class FusedGatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` with ``gate`` and ``up`` as one product."""

    def __init__(self, gate_up: nn.Module, down: nn.Module, act, intermediate: int):
        super().__init__()
        self.gate_up, self.down_proj, self.act_fn, self.intermediate = gate_up, down, act, intermediate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        both = self.gate_up(x)
        return self.down_proj(self.act_fn(both[..., : self.intermediate]) * both[..., self.intermediate:])


def _weight_and_bias(layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    if isinstance(layer, PackedLinear):
        return layer.unpacked()
    if type(layer) is nn.Linear:
        return layer.weight.detach(), None if layer.bias is None else layer.bias.detach()
    return None


def _stacked(gate: nn.Module, up: nn.Module) -> nn.Module | None:
    """One layer computing ``cat([gate(x), up(x)], -1)``, of the same kind (packed or not), or None."""
    parts = [_weight_and_bias(gate), _weight_and_bias(up)]
    if None in parts or type(gate) is not type(up) or (parts[0][1] is None) != (parts[1][1] is None):
        return None
    weight = torch.cat([parts[0][0], parts[1][0]])
    bias = None if parts[0][1] is None else torch.cat([parts[0][1], parts[1][1]])
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device,
                       dtype=weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return PackedLinear(linear) if isinstance(gate, PackedLinear) else linear.requires_grad_(False)


def _norm_candidates(module: nn.Module) -> list[FusedRMSNorm]:
    """Both forms of an RMSNorm module (the check below keeps the one that reproduces it), or none."""
    weight = getattr(module, "weight", None)
    eps = getattr(module, "eps", getattr(module, "variance_epsilon", None))
    if not type(module).__name__.endswith("RMSNorm") or not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return []
    if not isinstance(eps, float):
        return []
    return [FusedRMSNorm(weight, eps, offset=offset) for offset in (False, True)]


def _mlp_candidates(module: nn.Module) -> list[FusedGatedMLP]:
    if not all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return []
    gate_up = _stacked(module.gate_proj, module.up_proj)
    if gate_up is None:
        return []
    return [FusedGatedMLP(gate_up, module.down_proj, module.act_fn, module.gate_proj.out_features)]


@torch.no_grad()
def _error(original: nn.Module, fused: nn.Module, width: int, dtype: torch.dtype, device, sums: bool = False) -> float:
    """How far ``fused``'s output is from ``original``'s on random input: the largest difference, each element
    against its own magnitude, in units of the dtype's rounding tolerance (at most 1: the same to float rounding;
    inf: another shape or dtype). Each element on its own: a bound scaled by the largest output would let a wrong
    form pass in bfloat16, where Gemma's norm weights (up to ~1,600) make the largest outputs thousands of times
    the smallest (its ``w`` form instead of ``1 + w`` then passed, and the model wrote garbage). ``sums``: the
    outputs are long sums (an MLP), whose near-zero elements come from cancellation and carry rounding on the
    scale of the typical output: their floor is the mean magnitude, not 1. NaN counts as inf."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, width, generator=generator).to(device=device, dtype=dtype)
    want, got = original(x), fused(x)
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    tolerance = 1e-5 if want.dtype == torch.float32 else 2e-2
    want, got = want.float(), got.float()
    floor = float(want.abs().mean()) + 1.0 if sums else 1.0
    error = float(((got - want).abs() / (tolerance * (want.abs() + floor))).max())
    return error if math.isfinite(error) else float("inf")


def fuse_for_inference(model: nn.Module) -> dict[str, int]:
    """Replace, in place, every RMSNorm and gated MLP of ``model`` that a fused module reproduces (see the module
    docstring). Returns how many of each were replaced: ``{"norms": n, "mlps": m}``. The model must be in eval mode
    with no adapter layers on it (merge an adapter first)."""
    if has_adapter_layers(model):
        raise ValueError("fuse_for_inference: merge the adapter first (its layers would lose their targets)")
    counts = {"norms": 0, "mlps": 0}
    for name, module in list(model.named_modules()):
        candidates, kind = _norm_candidates(module), "norms"
        width = getattr(getattr(module, "weight", None), "shape", (0,))[-1]
        if not candidates:
            candidates, kind = _mlp_candidates(module), "mlps"
            width = getattr(getattr(module, "gate_proj", None), "in_features", 0)
        if not candidates or not name:
            continue
        reference = next(module.parameters(), None)
        if reference is None:  # packed layers hold no parameters: their activations are float32 on the CPU
            dtype, device = torch.float32, torch.device("cpu")
        else:
            dtype, device = reference.dtype, reference.device
        errors = [_error(module, c.to(device), width, dtype, device, sums=kind == "mlps") for c in candidates]
        best = min(range(len(candidates)), key=errors.__getitem__)  # (both forms of a norm may be near: the nearer)
        if not errors[best] <= 1.0:
            continue
        fused = candidates[best]
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, fused)
        fused.__dict__["_replaced"] = module  # (not a submodule: for ``unfuse``)
        if kind == "mlps":  # their weights live on in the stacked product (``unfuse`` splits them again)
            module.gate_proj = module.up_proj = None
        counts[kind] += 1
    return counts


def unfuse(model: nn.Module) -> int:
    """Put back every module ``fuse_for_inference`` replaced; returns how many. A norm comes back as it was; a
    gated MLP gets its gate and up projections back from the stacked product (the same weights, packed again where
    they were packed)."""
    count = 0
    for name, module in list(model.named_modules()):
        original = module.__dict__.get("_replaced")
        if original is None:
            continue
        if isinstance(module, FusedGatedMLP):
            original.gate_proj, original.up_proj = _split(module.gate_up, module.intermediate)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, original)
        count += 1
    return count


def _split(gate_up: nn.Module, rows: int) -> tuple[nn.Module, nn.Module]:
    """``_stacked`` undone: the gate and up layers, each of the stacked layer's kind."""
    weight, bias = _weight_and_bias(gate_up)
    parts = []
    for part in (slice(0, rows), slice(rows, None)):
        w = weight[part]
        linear = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            linear.weight.copy_(w)
            if bias is not None:
                linear.bias.copy_(bias[part])
        parts.append(PackedLinear(linear) if isinstance(gate_up, PackedLinear) else linear.requires_grad_(False))
    return parts[0], parts[1]


def is_fused(model: nn.Module) -> bool:
    """Has ``fuse_for_inference`` replaced any module of ``model``? (Such a model is for inference only.)"""
    return any(isinstance(m, (FusedRMSNorm, FusedGatedMLP)) for m in model.modules())
