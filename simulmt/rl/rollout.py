"""The multi-step sampling process of SeqPO-SiMT: B trajectories per source sentence, all through one engine.

The source is cut into chunks of m words (``ReadN(m)``); at each step the model sees the chunks read so far and its
own earlier steps and writes this step's translation, possibly nothing (the ``seqpo`` layout keeps the end it
proposed at once). Each trajectory samples with its own seeded ``Sampling``, so a group is reproducible alone or
batched with others. What a trajectory keeps is what training needs: the final placed list in time order (the
end of the sentence appended), labelled with exactly the tokens the model sampled, each after the context it was
sampled from (the parity invariant makes one training forward give the same distribution), and the prediction and
delays that the reward scores. The log-probabilities GRPO uses are those of the model itself (temperature 1, no
nucleus, no rule); sample with ``temperature=1, top_p=1`` (the defaults) to stay on-policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from simulmt.core.engine import Engine, run_batched
from simulmt.core.examples import IGNORE, TrainingExample
from simulmt.core.layouts import SeqPO
from simulmt.core.placed import PlacedToken, Role
from simulmt.core.policies import ReadN
from simulmt.core.samplers import Sampling
from simulmt.core.stream import Stream


@dataclass
class Trajectory:
    source: str
    reference: str
    prediction: str
    delays: list[int]
    tokens: list[PlacedToken]  # time order, the final end appended
    choices: dict[int, int]  # context length -> the token the model sampled there (the stream's ``choices``)
    error: str | None = None
    stream: Stream | None = field(default=None, repr=False)  # kept with ``record=True`` (its proposals)

    @property
    def example(self) -> TrainingExample:
        """The placed list labelled with the model's own choices, and nothing else: the token sampled after each
        context (also where a rule then overrode it: a segment bound closed the turn, a repeat became an end, a
        sampled <eos> was placed as the turn's end marker), never a token a rule placed without a sample (an end
        forced by a length bound)."""
        labels = [IGNORE] * len(self.tokens)
        for length, token in self.choices.items():
            if 0 < length <= len(self.tokens):
                labels[length - 1] = token
        return TrainingExample(self.tokens, labels)

    @property
    def steps(self) -> int:
        """Assistant turns opened (one per chunk written after; empty ones included)."""
        return sum(1 for a, b in zip(self.tokens, self.tokens[1:]) if b.role is Role.TARGET_MARKER
                   and a.role is not Role.TARGET_MARKER)


def sampler_seed(seed: int, sentence: int, sample: int) -> int:
    return (seed * 1_000_003 + sentence) * 101 + sample


def sample_groups(translator, pairs: Sequence[tuple[str, str]], group: int = 5, chunk: int = 3,
                  temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, batch_size: int = 16,
                  max_segment_words: int | None = None, record: bool = False) -> list[list[Trajectory]]:
    """``group`` trajectories for each (source, reference) pair, sampled ``batch_size`` streams at a time."""
    streams: list[Stream] = []
    for i, (source, _) in enumerate(pairs):
        for b in range(group):
            stream = translator.new_stream(SeqPO(), ReadN(chunk, max_segment_words), record=record,
                                           sampler=Sampling(temperature, top_p, seed=sampler_seed(seed, i, b)))
            stream.push(source.split(), finished=True)
            streams.append(stream)
    run_batched(streams, Engine(translator.runner), batch_size)
    groups = []
    for i, (source, reference) in enumerate(pairs):
        members = []
        for stream in streams[i * group:(i + 1) * group]:
            result = stream.result()
            tokens = list(stream.state.tokens)
            if tokens and tokens[-1].role.target_side:  # the end of the sentence (labelled if the model chose it)
                tokens.append(PlacedToken(translator.fmt.end_id, tokens[-1].position + 1, Role.END))
            members.append(Trajectory(source, reference, result.prediction, list(result.delays), tokens,
                                      dict(stream.choices), result.error, stream if record else None))
        groups.append(members)
    return groups
