"""Registries of named classes (layouts, policies) whose constructor parameters are their options.

A layout or policy owns its parameters: ``Expost(slot=16)``, ``GroupPositions(phi=256)``, ``WaitK(k)``,
``ReadN(n, max_segment_words=None)``. Callers hand over every option they have (``slot=, phi=, k=, n=``) and
``build`` passes each class only the ones its constructor takes, so adding a layout or a policy is one file and
one registry line, and no caller switches on names.
"""

from __future__ import annotations

import inspect

from simulmt.errors import SimulmtError


def parameters(cls: type) -> tuple[str, ...]:
    """The constructor's parameters, in order (``WaitK`` -> ("k",), ``Offline`` -> ())."""
    return tuple(name for name, p in inspect.signature(cls).parameters.items()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def main_parameter(cls: type) -> str | None:
    """The first parameter (the one a grid varies: k, n, slot, phi), or None."""
    names = parameters(cls)
    return names[0] if names else None


def build(registry: dict[str, type], kind: str, name: str, options: dict):
    if name not in registry:
        raise SimulmtError(f"unknown {kind} {name!r}; choose one of: {', '.join(registry)}")
    cls = registry[name]
    return cls(**{key: value for key, value in options.items() if key in parameters(cls) and value is not None})
