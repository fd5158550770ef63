"""Every change simulmt makes to a model it runs, in one list, each with what undoes it.

simulmt runs Hugging Face models as they are, with four exceptions. Each is made in its own module (named below,
where the reason is written out); this module lists them, says which a model carries (``applied``) and takes them
all back (``undo``). None changes what the model computes for its own calls (``generate``, a forward with a 2-D
padding mask or none): they act on simulmt's calls, or replace modules by ones that give the same outputs.

| patch | what it changes | made by | undone by |
|---|---|---|---|
| ``alibi`` (alibi.py) | Bloom: an instance ``build_alibi_tensor`` that gives zeros for a 4-D mask; Falcon-RW: a pre-forward hook and a rotary hook (plain attention for a 4-D mask); the bias then comes with simulmt's masks | ``ModelRunner``, the fine-tuning and SeqPO collators (``adopt_alibi``) | ``alibi.undo_alibi`` |
| ``layer_split`` (layer_split.py) | each decoder layer gets an instance ``forward`` that asks this thread's plan (no plan: the layer's own forward) | the first forward that stops at a policy head's layer | ``layer_split.uninstall`` |
| ``fused`` (fused_layers.py) | RMSNorms and gated MLPs replaced by fused modules, each checked to give the same outputs | ``Translator.load(fuse=True)`` (the default for a merged adapter) | ``fused_layers.unfuse`` |
| ``packed`` (packed_linear.py) | ``nn.Linear`` layers replaced by fbgemm float16-packed ones | ``load_model(dtype="float16-packed")``, the CPU default | ``packed_linear.unpack_linears`` (float32 layers with the float16-rounded weights; load again for the originals) |

Besides these, nothing global: no class of transformers or torch is patched, and the engine's switches are values
(execution.py).
"""

from __future__ import annotations

from torch import nn

from simulmt.core import layer_split
from simulmt.core.alibi import adopted_alibi, undo_alibi
from simulmt.core.fused_layers import is_fused, unfuse
from simulmt.core.packed_linear import PackedLinear, unpack_linears

PATCHES = ("alibi", "layer_split", "fused", "packed")


def applied(model: nn.Module) -> list[str]:
    """The patches ``model`` carries, in the order of ``PATCHES``."""
    found = {"alibi": adopted_alibi(model), "layer_split": layer_split.installed(model), "fused": is_fused(model),
             "packed": any(isinstance(m, PackedLinear) for m in model.modules())}
    return [name for name in PATCHES if found[name]]


def undo(model: nn.Module, patches: tuple[str, ...] = PATCHES) -> list[str]:
    """Take ``patches`` back from ``model`` (all by default); returns those it carried. A ``ModelRunner`` made on an
    ALiBi model before must not be used after (its masks carry the bias the model adds again): make a new one,
    which adopts it again. A split forward installs its layers' forwards again when it runs."""
    unknown = sorted(set(patches) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown model patches {unknown}: simulmt makes {list(PATCHES)}")
    carried = [name for name in applied(model) if name in patches]
    undoers = {"alibi": undo_alibi, "layer_split": layer_split.uninstall, "fused": unfuse, "packed": unpack_linears}
    for name in carried:
        undoers[name](model)
    return carried
