"""A stream's options, typed and checked once: the layout and the policy by name, and the parameters they take.

The layouts and policies own their parameters (their constructors, registry.py): ``expost`` takes ``slot``, ``gpe``
``phi``, ``wait-k`` ``k``, ``read-n`` ``n``, ``learned`` ``tau``. A caller that gives a parameter the chosen layout
and policy do not take made a mistake (``--layout prefix --slot 8``: prefix has no slots), and is told so, with
what they take, instead of the option being dropped. A parameter not given (None) takes its default from
``DEFAULTS``: the one table of defaults, which the command line's fields, the service's query options and the
Python API's keyword arguments (``Translator.session`` / ``new_stream``) read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from simulmt.core.layouts import LAYOUTS
from simulmt.core.policies import POLICIES
from simulmt.core.registry import parameters
from simulmt.errors import SimulmtError

DEFAULTS = {"k": 3, "n": 3, "tau": 0.5, "slot": 16, "phi": 256}
OWNERS = {"k": "wait-k", "n": "read-n", "tau": "learned", "slot": "expost", "phi": "gpe"}  # (for the message)


@dataclass(frozen=True)
class StreamOptions:
    layout: str = "expost"
    policy: str = "wait-k"
    k: int | None = None  # wait-k: write target word j once k + j - 1 source words are read (default 3)
    n: int | None = None  # read-n: source words read before each written segment (default 3)
    tau: float | None = None  # learned: write once the policy head's p(WRITE) reaches tau (default 0.5)
    slot: int | None = None  # expost: length of a source position slot, in tokens (default 16)
    phi: int | None = None  # gpe: first position id of the target group (default 256)

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise SimulmtError(f"unknown layout {self.layout!r}; choose one of: {', '.join(LAYOUTS)}")
        if self.policy not in POLICIES:
            raise SimulmtError(f"unknown policy {self.policy!r}; choose one of: {', '.join(POLICIES)}")
        taken = self.taken()
        for name in DEFAULTS:
            value = getattr(self, name)
            if value is None:
                continue
            if name == "tau":
                if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                    raise SimulmtError(f"tau (the learned policy's threshold) must be within 0..1, got {value}")
            elif value < 1:
                raise SimulmtError(f"{name} must be at least 1, got {value}")
            if name not in taken:
                takes = ", ".join(taken) if taken else "none"
                raise SimulmtError(f"{name}={value} is an option of {OWNERS[name]}, which is not used here: layout "
                                   f"{self.layout} with policy {self.policy} takes {takes}")

    def taken(self) -> tuple[str, ...]:
        """The parameters (of ``DEFAULTS``) that the chosen layout and policy take."""
        own = set(parameters(LAYOUTS[self.layout])) | set(parameters(POLICIES[self.policy]))
        return tuple(name for name in DEFAULTS if name in own)

    def value(self, name: str):
        given = getattr(self, name)
        return DEFAULTS[name] if given is None else given

    def session_kwargs(self) -> dict:
        """Keyword arguments of ``Translator.session`` / ``new_stream``: every parameter, defaults filled in."""
        return {"layout": self.layout, "policy": self.policy, **{name: self.value(name) for name in DEFAULTS}}

    def given(self) -> dict:
        """The parameters given (not None), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in DEFAULTS
                and getattr(self, f.name) is not None}
