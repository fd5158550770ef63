"""Recipes: the training side of every layout, built by the layout code itself (``simulmt.core.examples.build_examples``).

A recipe = a layout + a schedule (+ for one ablation, a transform of the laid-out sequence). It turns a sentence
pair into one or more ``TrainingExample`` (placed tokens + labels) and says how the trained model is served (the
streaming layout and policy it was trained for). Nothing here places a token: the layouts do.

| recipe          | training sequence                                               | served with          |
|-----------------|-----------------------------------------------------------------|----------------------|
| expost          | expost slots, policy mask (wait-k, k-mix or read-n)             | expost + the policy  |
| expost-positions| expost, later slots marked by positions only (no header, no   | expost-positions +   |
|                 | opener; the token before a new slot is labelled: issue 42 E3)   | the policy           |
| expost-sees-    | expost, but a new slot's header and source see the target of    | expost-sees-earlier  |
| earlier         | earlier slots (the paper's visibility; issue 42 E2)             | + the policy         |
| expost-nomask   | expost slots and positions, but every target-side token sees     | expost + the policy  |
|                 | the whole source (ablation "w/o masking", see ``source_first``)  |                      |
| slotless        | policy mask, contiguous positions: the ``naive`` layout's        | naive + the policy   |
|                 | training view (ablation "w/o slot")                              |                      |
| prefix          | prefix pairs (Simul-LLM): one example per read point, each       | prefix + the policy  |
|                 | labelling only its own new target segment                        |                      |
| conversation    | chat turns: user = a source chunk, assistant = its target words  | conversation + read-n|
|                 | (read-n chunks by default; a turn end is predicted per segment)  |                      |
| gpe             | group positions (source 0.., target phi..), policy mask          | gpe + the policy     |
| gpe-overlap     | group positions, both from 0 (GPE's own code: phi = 0)           | gpe-overlap + policy |
| offline         | plain SFT: prompt, whole source, whole target, contiguous        | prefix + offline     |
| simulmask       | SimulMask: ``slotless``'s sequence; on ALiBi models (Bloom,      | simulmask + the      |
|                 | Falcon-RW) distances over visible keys only (modified ALiBi)     | policy               |
| simulmask-stock | SimulMask with stock ALiBi (the paper's ablation)                | simulmask-stock + pol|
| interleaved     | EASiST: source chunk, <|end-of-read|>, target chunk,            | interleaved + read-n |
|                 | <|end-of-write|>, ... (adds and trains the marker tokens)       | (or learned + a head)|
| policy-head     | EASiST's policy: a READ/WRITE head on the hidden states of an   | interleaved + learned|
|                 | interleaved model (--init-adapter), the model itself unchanged  |                      |
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from simulmt.errors import SimulmtError
from simulmt.core.examples import TrainingExample, build_examples
from simulmt.finetune.schedules import Schedule
from simulmt.core.layouts import Layout, make_layout
from simulmt.core.placed import PlacedToken, labels_for
from simulmt.core.prompt_format import PromptFormat, source_units
from simulmt.core.visibility import Visibility

RECIPES = {
    "expost": "ExPosST: position slots + policy-consistent attention mask (the paper's method)",
    "expost-positions": "ExPosST whose later slots have no header or opener, only their positions (issue 42, E3)",
    "expost-sees-earlier": "ExPosST whose new slots see the target of earlier slots (the paper's visibility, issue 42, "
                           "E2)",
    "expost-nomask": "ablation w/o masking: expost slots and positions, target tokens see the whole source",
    "slotless": "ablation w/o slot: policy mask with contiguous positions (the naive layout's training view)",
    "prefix": "prefix fine-tuning (Simul-LLM): one example per read point, contiguous, recomputed at inference",
    "conversation": "conversational SimulMT: user/assistant turns per read-n chunk",
    "gpe": "group position encoding: source and target count positions in separate groups",
    "gpe-overlap": "group position encoding as its authors' code sets it up: both groups count from 0 (overlap)",
    "offline": "plain SFT on full sentence pairs (the offline schedule)",
    "simulmask": "SimulMask: policy mask on the contiguous layout, modified ALiBi on ALiBi models (Bloom, Falcon-RW)",
    "simulmask-stock": "ablation of SimulMask: stock ALiBi distances (unread source counts in training)",
    "interleaved": "EASiST's interleaved chunks between <|end-of-read|> / <|end-of-write|> markers, "
                   "<|end-of-translation|> last (added tokens)",
    "policy-head": "EASiST's learned READ/WRITE head on an interleaved model's hidden states (--init-adapter)",
}
RECIPE_LAYOUTS = {  # the layout (core/layouts) each recipe trains, by its registry name
    "expost": "expost", "expost-positions": "expost-positions", "expost-sees-earlier": "expost-sees-earlier",
    "expost-nomask": "expost", "slotless": "naive", "prefix": "prefix", "offline": "prefix",
    "conversation": "conversation", "gpe": "gpe", "gpe-overlap": "gpe-overlap", "simulmask": "simulmask",
    "simulmask-stock": "simulmask-stock",
    "interleaved": "interleaved", "policy-head": "interleaved",
}
DEFAULT_POLICY = {"conversation": "read-n", "offline": "offline", "interleaved": "read-n",
                  "policy-head": "read-n"}  # every other recipe: wait-k


def source_first(tokens: list[PlacedToken]) -> list[PlacedToken]:
    """The ``expost-nomask`` transform: move every source-side token (prompt, source, slot headers) before the
    first target-side token, keeping every position id and the order within each side.

    Under the visibility rule (a target-side query sees every key before it in time order) every target token
    then sees the whole source, while positions, slots and labels stay those of the policy's expost sequence::

        expost  (wait-1):  p s1 m t1 s2 t1' t2 ...     nomask:  p s1 s2 ... m t1 t1' t2 ...
                            (positions unchanged; t1 now sees s2)

    (The paper's "w/o masking" trains with a plain causal mask over its slot-ordered sequence; here the target
    sees all slots, the strictest reading of "no policy mask".)
    """
    return [t for t in tokens if not t.role.target_side] + [t for t in tokens if t.role.target_side]


@dataclass(frozen=True)
class Recipe:
    name: str
    schedule: Schedule
    slot: int = 16
    phi: int = 256

    def __post_init__(self):
        if self.name not in RECIPES:
            raise SimulmtError(f"unknown recipe {self.name!r}; choose one of: {', '.join(RECIPES)}")
        if self.name == "offline" and self.schedule.policy != "offline":
            raise SimulmtError("the offline recipe trains on full sentences: it takes no --policy other than offline")
        if self.name != "offline" and self.schedule.policy == "offline":
            raise SimulmtError(f"recipe {self.name} needs a simultaneous policy (wait-k or read-n); "
                               f"for full-sentence training use --recipe offline")

    # ---- the layout ------------------------------------------------------------------------------------------
    def layout(self) -> Layout:
        return make_layout(RECIPE_LAYOUTS[self.name], slot=self.slot, phi=self.phi)  # (each takes what it has)

    @property
    def visibility(self) -> Visibility:
        return self.layout().visibility

    # ---- training examples -----------------------------------------------------------------------------------
    def examples(self, fmt: PromptFormat, tokenizer, source: str, target: str,
                 rng: random.Random) -> tuple[list[TrainingExample], str]:
        """The training examples of one pair (and the schedule drawn, e.g. ``wait-5``), laid out by the layout
        (``fmt``: the prompt format the model is served with, ``Translator.fmt``)."""
        words, target_words = source.split(), target.split()
        delays, drawn = self.schedule.delays(len(words), len(target_words), rng)
        units = source_units(tokenizer, fmt, words)
        examples = build_examples(self.layout(), fmt, tokenizer, units, target_words, delays)
        if self.name == "expost-nomask":
            examples = [TrainingExample(tokens, labels_for(tokens))
                        for tokens in (source_first(ex.tokens) for ex in examples)]
        return examples, drawn

    # ---- inference -------------------------------------------------------------------------------------------
    def inference(self, k: int | None = None) -> dict:
        """Session keyword arguments for serving (and evaluating) the model trained with this recipe."""
        layout = {"expost-nomask": "expost", "slotless": "naive", "offline": "prefix",
                  "policy-head": "interleaved"}.get(self.name, self.name)
        policy = "learned" if self.name == "policy-head" else self.schedule.policy
        policy = "wait-k" if policy == "mixed" else policy  # served (and evaluated at the end) with wait-k
        out = {"layout": layout, "policy": policy, "slot": self.slot, "phi": self.phi}
        if policy == "wait-k":
            out["k"] = k if k is not None else (self.schedule.ks[0] if len(self.schedule.ks) == 1
                                                else sorted(self.schedule.ks)[len(self.schedule.ks) // 2])
        if policy == "read-n":
            ns = sorted(self.schedule.ns)
            out["n"] = ns[len(ns) // 2] if ns else self.schedule.n
        return out

    def describe(self) -> str:
        extra = {"expost": f" slot={self.slot}", "expost-positions": f" slot={self.slot}",
                 "expost-sees-earlier": f" slot={self.slot}",
                 "expost-nomask": f" slot={self.slot}", "gpe": f" phi={self.phi}"}
        return f"{self.name} ({self.schedule.describe()}{extra.get(self.name, '')})"
