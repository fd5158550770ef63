"""A decoder forward in two parts: layers 0..l, then the rest, for a policy head that reads layer l.

A learned policy decides READ/WRITE on a hidden state. When its head reads the output of decoder layer ``l`` rather
than the last layer's, a decision forward can stop there: if the policy reads on, nothing of the layers above is
needed now (no logits, no proposal), and the tokens it fed are fed again, whole, in the stream's next forward (rows
cost little; layers cost a lot). If it writes, the same forward goes on from layer ``l + 1`` with the hidden states it
stopped at, so a WRITE costs no more than one ordinary forward.

Both parts are the decoder's own forward (its embedding, rotary tables, masks and cache as usual) with some layers
passing their input through: layers above ``l`` in the first part, layers up to ``l`` in the second, where layer
``l`` hands on the stopped hidden states instead. The layers a part computes write their keys and values into the
cache as in one whole forward, so part one and part two together equal one forward (tests/test_layer_split.py).

How: ``install`` gives each decoder layer an instance ``forward`` that asks this thread's plan (``_PLAN``) what to do
with that layer, and runs the layer's own class forward when there is none. Plans are per thread, so other threads'
forwards through the same model are untouched. Installed once per model, on the first split forward.
"""

from __future__ import annotations

import threading
import types
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from simulmt.errors import SimulmtError

_PLAN = threading.local()  # .actions: {id(layer): action}; .out: the stopped layer's output; .tuple_out


def decoder_layers(decoder) -> torch.nn.ModuleList:
    """The decoder's list of layers (``layers`` in most models, ``h`` in Bloom/Falcon/GPT-2)."""
    for name in ("layers", "h"):
        layers = getattr(decoder, name, None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers):
            return layers
    raise SimulmtError(f"{type(decoder).__name__}: no list of decoder layers found (layers / h); a policy head on an "
                       f"inner layer needs one")


def forward(self, *args, **kwargs):
    """A decoder layer's forward under a plan (see the module docstring); its own forward without one."""
    actions = getattr(_PLAN, "actions", None)
    action = None if actions is None else actions.get(id(self))
    if action is None:
        return type(self).forward(self, *args, **kwargs)
    hidden = args[0] if args else kwargs["hidden_states"]
    if action == "pass":
        return (hidden, None) if _PLAN.tuple_out else hidden
    if action == "hand-on":  # the last layer of part one: its output, computed there, goes on
        out = _PLAN.start
        return (out, None) if _PLAN.tuple_out else out
    out = type(self).forward(self, *args, **kwargs)  # "run" or "stop": computed
    if action == "stop":
        _PLAN.tuple_out = isinstance(out, tuple)
        _PLAN.out = out[0] if isinstance(out, tuple) else out
    return out


def install(layers: torch.nn.ModuleList) -> None:
    for layer in layers:
        if not isinstance(layer.__dict__.get("forward"), types.MethodType):
            layer.forward = types.MethodType(forward, layer)  # (a deep copy of the model binds it to the copy)


def installed(model) -> bool:
    return any(_is_ours(m) for m in model.modules())


def uninstall(model) -> None:
    """Every layer's own class forward again (``install`` undone)."""
    for module in model.modules():
        if _is_ours(module):
            del module.forward


def _is_ours(module) -> bool:
    bound = module.__dict__.get("forward")
    return isinstance(bound, types.MethodType) and bound.__func__ is forward


@dataclass
class Stopped:
    """Part one's result: the output of layer ``layer`` (raw residual stream, before any final norm), (B, T, hidden)."""

    layer: int
    hidden: torch.Tensor
    tuple_out: bool = field(default=False, repr=False)


@contextmanager
def _plan(actions: dict[int, str], start: torch.Tensor | None = None, tuple_out: bool = False):
    if getattr(_PLAN, "actions", None) is not None:
        raise SimulmtError("a split forward inside another one")
    _PLAN.actions, _PLAN.start, _PLAN.tuple_out, _PLAN.out = actions, start, tuple_out, None
    try:
        yield _PLAN
    finally:
        _PLAN.actions = _PLAN.start = _PLAN.out = None


def run_to(layers: torch.nn.ModuleList, layer: int, call) -> Stopped:
    """Part one: ``call()`` runs the decoder with layers 0..``layer`` computed and the others passing their input
    through; returns layer ``layer``'s output."""
    if not 0 <= layer < len(layers):
        raise SimulmtError(f"a policy head on layer {layer}, but the model has layers 0..{len(layers) - 1}")
    install(layers)
    actions = {id(m): ("run" if i < layer else "stop" if i == layer else "pass") for i, m in enumerate(layers)}
    with _plan(actions) as plan:
        call()
        if plan.out is None:
            raise SimulmtError(f"layer {layer} was not called by the decoder's forward")
        return Stopped(layer, plan.out, plan.tuple_out)


def run_from(layers: torch.nn.ModuleList, stopped: Stopped, call):
    """Part two: ``call()`` runs the decoder with layers 0..``stopped.layer`` handing on ``stopped.hidden`` and the
    layers above computed; returns what ``call`` returns (the decoder's output)."""
    actions = {id(m): ("pass" if i < stopped.layer else "hand-on" if i == stopped.layer else "run")
               for i, m in enumerate(layers)}
    with _plan(actions, stopped.hidden, stopped.tuple_out):
        return call()
