"""ALiBi models (Bloom, Falcon-RW): their position bias, carried by simulmt's attention masks.

An ALiBi model adds ``-slope_h x distance(query, key)`` to head h's attention scores and has no position ids.
The model computes that distance itself from the cache order, which is right for some layouts and wrong for
SimulMask's (see ``simulmt.core.visibility.Distance``). So simulmt computes the distance with the layout's rule
and hands the model a per-head 4-D float mask (R, H, Q, K): the bias where a key is visible, the dtype's minimum
where it is not. ``adopt_alibi`` switches the model's own bias off, but only for calls that pass such a 4-D mask
(a 2-D padding mask, or none, still gets the model's stock ALiBi, so ``generate`` and friends are unchanged):

* Bloom: ``BloomModel.build_alibi_tensor`` returns zeros for a 4-D mask (the mask carries the bias; Bloom adds
  its bias unscaled to the scaled scores, ``alibi + q.k / sqrt(head dim)``: the per-head coefficient is the slope).
* Falcon: its forward cannot build ALiBi from a 4-D mask, and its eager attention adds ALiBi twice (once in the
  scores, once in the mask). For a 4-D mask the model runs its non-ALiBi attention path (eager or SDPA: plain
  scores + mask), with rotary embedding turned into the identity. Falcon scales the bias with the scores: the
  per-head coefficient is the slope / sqrt(head dim), the slope rounded to bfloat16 as Falcon's own code does.

The distances are exact counts; the bias is computed in float32 and cast to the model's dtype with the mask (in
bfloat16 a bias of 256 or more is rounded to steps of 2, the same in training and streaming, so parity holds;
Falcon's own code also multiplies in bfloat16). Softmax ignores a per-row constant, so only differences matter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from simulmt.errors import SimulmtError


@dataclass(frozen=True)
class Alibi:
    coefficients: torch.Tensor  # (H,) score bias per unit of distance, per head

    def mask(self, visible: torch.Tensor, distances: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(R, Q, K) boolean visibility + (R, Q, K) distances -> (R, H, Q, K) additive mask with the bias."""
        bias = -self.coefficients.to(distances.device)[None, :, None, None] * distances[:, None]
        return bias.masked_fill(~visible[:, None], torch.finfo(dtype).min).to(dtype)


def alibi_slopes(heads: int) -> torch.Tensor:
    """The ALiBi paper's per-head slopes (geometric; interleaved extra slopes when ``heads`` is not a power of 2)."""
    closest = 2 ** math.floor(math.log2(heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** i for i in range(1, closest + 1)]
    if closest != heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** i for i in range(1, 2 * (heads - closest), 2)]
    return torch.tensor(slopes, dtype=torch.float32)


def _is(module, class_name: str) -> bool:
    return any(c.__name__ == class_name for c in type(module).__mro__)


def _adopt_bloom(bloom) -> Alibi:
    stock = type(bloom).build_alibi_tensor

    def build_alibi_tensor(attention_mask, num_heads, dtype):
        if attention_mask.ndim == 4:  # simulmt's mask carries the bias
            batch, keys = attention_mask.shape[0], attention_mask.shape[-1]
            return torch.zeros(batch * num_heads, 1, keys, dtype=dtype, device=attention_mask.device)
        return stock(bloom, attention_mask, num_heads, dtype)

    bloom.build_alibi_tensor = build_alibi_tensor
    return Alibi(alibi_slopes(bloom.num_heads))


def _adopt_falcon(falcon) -> Alibi:
    def before_forward(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        custom = mask is not None and not isinstance(mask, dict) and mask.ndim == 4
        module.use_alibi = not custom  # a 4-D mask: the plain attention path, the bias is in the mask
        module._simulmt_identity_rotary = custom

    def identity_rotary(module, args, output):
        if falcon._simulmt_identity_rotary:
            cos, sin = output
            return torch.ones_like(cos), torch.zeros_like(sin)
        return output

    falcon._simulmt_identity_rotary = False
    falcon._simulmt_hooks = (falcon.register_forward_pre_hook(before_forward, with_kwargs=True),
                             falcon.rotary_emb.register_forward_hook(identity_rotary))
    head_dim = falcon.config.hidden_size // falcon.config.num_attention_heads
    slopes = alibi_slopes(falcon.config.num_attention_heads).bfloat16().float()
    return Alibi(slopes / math.sqrt(head_dim))


def adopt_alibi(model) -> Alibi | None:
    """The ALiBi of ``model`` (None for a model with position ids), its own bias switched off for 4-D masks.
    Idempotent; works on a PEFT-wrapped model too. Refuses ALiBi architectures simulmt does not handle."""
    for module in model.modules():
        adopted = getattr(module, "_simulmt_alibi", None)
        if adopted is not None:
            return adopted
        if _is(module, "BloomModel"):
            module._simulmt_alibi = _adopt_bloom(module)
            return module._simulmt_alibi
        if _is(module, "FalconModel"):
            if not module.config.alibi:
                return None
            module._simulmt_alibi = _adopt_falcon(module)
            return module._simulmt_alibi
        if _is(module, "MptModel"):
            raise SimulmtError(f"{type(model).__name__}: MPT's ALiBi is not supported by simulmt's masks yet "
                               f"(Bloom and Falcon-RW are)")
    return None


def adopted_alibi(model) -> bool:
    return any(getattr(m, "_simulmt_alibi", None) is not None for m in model.modules())


def undo_alibi(model) -> None:
    """The model's own ALiBi for every call again (``adopt_alibi`` undone)."""
    for module in model.modules():
        if getattr(module, "_simulmt_alibi", None) is None:
            continue
        if "build_alibi_tensor" in module.__dict__:  # Bloom: the instance's override goes, the class's stays
            del module.build_alibi_tensor
        for hook in getattr(module, "_simulmt_hooks", ()):  # Falcon
            hook.remove()
        if hasattr(module, "_simulmt_hooks"):
            module.use_alibi = bool(module.config.alibi)
            del module._simulmt_hooks, module._simulmt_identity_rotary
        del module._simulmt_alibi
