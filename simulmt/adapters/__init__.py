"""Adapters shipped inside the package, and how an ``adapter`` argument is resolved.

Each shipped adapter is a PEFT LoRA directory next to this file, with a data card (``README.md``: the exact training
command, data, steps, time and scores). A model that has a shipped adapter uses it by default.

An ``adapter`` argument is one of:

- ``"auto"``: the shipped adapter of the model for the language pair asked for, if it has one, else none (the
  default of ``simulmt translate``, ``simulmt demo`` and :meth:`simulmt.Translator.load`): an English-to-German
  adapter is not put on a French-to-English request;
- ``None`` or ``"none"``: the bare model;
- a shipped adapter's name (see :func:`shipped_adapter_names`);
- a directory holding a PEFT adapter (``adapter_config.json``).
"""

from __future__ import annotations

from pathlib import Path

from simulmt.errors import SimulmtError

__all__ = ["AUTO", "NONE", "PAIRS", "SHIPPED", "default_adapter", "named_adapter", "other_pairs", "resolve_adapter",
           "shipped_adapter_names", "save_bfloat16_weights"]

AUTO, NONE = "auto", "none"

_HERE = Path(__file__).resolve().parent

# shipped adapter name -> the packaged model it was trained on
SHIPPED: dict[str, str] = {  # the first one of a model and language pair is its default
    "gemma-3-270m-expost-kmix-en-de": "gemma-3-270m",
    "gemma-3-270m-interleaved-en-de": "gemma-3-270m",  # EASiST's text stage + policy head; the speech model's LLM
}
PAIRS: dict[str, tuple[str, str]] = {  # shipped adapter name -> the (source, target) languages it translates
    "gemma-3-270m-expost-kmix-en-de": ("en", "de"),
    "gemma-3-270m-interleaved-en-de": ("en", "de"),
}


def shipped_adapter_names() -> list[str]:
    return list(SHIPPED)


def _shipped_path(name: str) -> Path | None:
    path = _HERE / name
    return path if (path / "adapter_config.json").is_file() else None


def default_adapter(model: str, pair: tuple[str, str] | None = None) -> str | None:
    """Name of the shipped adapter that ``model`` uses by default for the language ``pair`` (source, target; None:
    any), or None."""
    for name, base in SHIPPED.items():
        if base == model and (pair is None or _same_pair(PAIRS[name], pair)) and _shipped_path(name) is not None:
            return name
    return None


def _same_pair(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Languages as codes or names ('de', 'German'); an unknown one is a clear error."""
    from simulmt.core.prompt_format import language_name

    return all(language_name(x) == language_name(y) for x, y in zip(a, b))


def other_pairs(model: str) -> list[str]:
    """The shipped adapters of ``model`` as "name (source->target)": what a request for another pair is told."""
    return [f"{name} ({PAIRS[name][0]}->{PAIRS[name][1]})" for name, base in SHIPPED.items()
            if base == model and _shipped_path(name) is not None]


def named_adapter(adapter: str | None, model: str, pair: tuple[str, str]) -> str | None:
    """``adapter`` with ``"auto"`` made a name (the shipped adapter of ``model`` for the language ``pair``, or None):
    what a run that starts from an adapter (``--init-adapter``) resolves once, before it passes the name on."""
    if adapter is not None and adapter.lower() == AUTO:
        return default_adapter(model, pair)
    return adapter


def resolve_adapter(adapter: str | None, model: str, pair: tuple[str, str] | None = None) -> tuple[str, Path] | None:
    """``(label, directory)`` of the adapter to load on ``model``, or None for the bare model. ``pair``: the
    (source, target) languages asked for, which ``"auto"`` matches (None: any).

    The label is what reports and signatures show: the shipped name, or the directory as given.
    """
    if adapter is None or adapter.lower() == NONE:
        return None
    if adapter.lower() == AUTO:
        name = default_adapter(model, pair)
        return None if name is None else (name, _HERE / name)
    if adapter in SHIPPED:
        if SHIPPED[adapter] != model:
            raise SimulmtError(f"the shipped adapter {adapter!r} was trained on {SHIPPED[adapter]!r}, not on {model!r}")
        path = _shipped_path(adapter)
        if path is None:
            raise SimulmtError(f"the shipped adapter {adapter!r} is missing from this installation ({_HERE / adapter})")
        return adapter, path
    return adapter, Path(adapter).expanduser()


def save_bfloat16_weights(source: str | Path, target: str | Path) -> None:
    """Write a safetensors file of adapter weights (a PEFT ``adapter_model.safetensors``, a speech adapter) with its
    float weights in bfloat16 (half the size; cast back to the model's dtype on load), as shipped and committed
    adapters are stored. Added tokens' rows (PEFT's ``trainable_tokens``) and non-float tensors stay as they are."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(source))
    save_file({k: (v if "trainable_tokens" in k or not v.is_floating_point() else v.to(torch.bfloat16)).contiguous()
               for k, v in weights.items()}, str(target), metadata={"format": "pt"})
