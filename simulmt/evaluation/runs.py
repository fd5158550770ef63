"""One run of the grid: a layout, a policy and its k, n or tau (``RunSpec``: the run's directory, its curve and
point on the plot, its session settings), and the scores it got (``RunResult``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simulmt.core.layouts import LAYOUTS
from simulmt.core.policies import POLICIES, make_policy
from simulmt.core.registry import main_parameter, parameters


@dataclass(frozen=True)
class RunSpec:
    layout: str
    policy: str  # wait-k | read-n | offline
    value: int | None  # k or n
    slot: int = 16
    phi: int = 256

    @property
    def layout_label(self) -> str:
        """``expost-slot16``, ``gpe-phi64``, ``prefix``: the layout and its own parameter, if it has one."""
        parameter = main_parameter(LAYOUTS[self.layout])
        return f"{self.layout}-{parameter}{getattr(self, parameter)}" if parameter else self.layout

    @property
    def policy_label(self) -> str:
        """``wait-3``, ``read-5``, ``offline``: as the policy describes itself."""
        return make_policy(self.policy, **self._policy_options()).describe()

    @property
    def name(self) -> str:
        """The run's directory: ``expost-slot16.wait-3``, ``prefix.read-5``, ``offline``."""
        return "offline" if self.policy == "offline" else f"{self.layout_label}.{self.policy_label}"

    @property
    def family(self) -> str:
        """One curve of the plot: ``expost-slot16 wait-k``."""
        return f"{self.layout_label} {self.policy}"

    @property
    def point_label(self) -> str:
        parameter = main_parameter(POLICIES[self.policy])
        return f"{parameter}={self.value}" if parameter else self.policy

    def _policy_options(self) -> dict:
        parameter = main_parameter(POLICIES[self.policy])
        return {parameter: self.value} if parameter else {}

    def session_kwargs(self) -> dict:
        return dict(layout=self.layout, policy=self.policy, slot=self.slot, phi=self.phi, **self._policy_options())

    def settings(self) -> dict:
        """What config.json and the signature say about the run (only the parameters that apply)."""
        applied = {**self._policy_options(), **{p: getattr(self, p) for p in parameters(LAYOUTS[self.layout])}}
        return {"layout": self.layout, "policy": self.policy,
                **{key: applied.get(key) for key in ("k", "n", "tau", "slot", "phi")}}

    @classmethod
    def from_config(cls, config: dict) -> RunSpec:
        parameter = main_parameter(POLICIES[config["policy"]])
        return cls(config["layout"], config["policy"], config[parameter] if parameter else None,
                   config["slot"] or 16, config["phi"] or 256)


@dataclass
class RunResult:
    spec: RunSpec
    directory: Path
    config: dict
    scores: dict

    @property
    def name(self) -> str:
        return self.spec.name
