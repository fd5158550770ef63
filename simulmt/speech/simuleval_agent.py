"""A SimulEval 1.1.4 speech-to-text agent that streams with a simulmt speech model.

    simuleval --agent-class simulmt.speech.simuleval_agent.SimulmtSpeechAgent \\
        --source wavs.list --target ref.de --output out/ --source-type speech --target-type text \\
        --speech-model DIR --policy learned --tau 0.5

SimulEval sends the audio in segments (``--source-segment-size`` ms, samples as floats) and records, for every
word the agent writes, the ms of audio sent so far as its delay. The agent keeps one ``SpeechSession`` per
utterance in its states: each call pushes the samples that arrived since the last one (the streaming encoder
emits the blocks they complete), lets the session write what its policy allows, and returns it in one
``WriteAction`` (``finished=True`` with the last words once the audio has ended), or a ``ReadAction``.

Like ``simulmt.simuleval_agent``, importing it without SimulEval raises ``SimulEvalMissingError``.
"""

from __future__ import annotations

from argparse import ArgumentParser, Namespace

import numpy as np

from simulmt.simuleval_agent import SimulEvalMissingError  # noqa: F401 (raises the install hint without SimulEval)
from simulmt.speech.model import SpeechSession, SpeechTranslation, SpeechTranslator

from simuleval.agents import SpeechToTextAgent  # noqa: E402  (importable: the import above checked SimulEval)
from simuleval.agents.actions import Action, ReadAction, WriteAction  # noqa: E402
from simuleval.agents.states import AgentStates  # noqa: E402


class SimulmtSpeechStates(AgentStates):
    def reset(self) -> None:
        super().reset()
        self.session: SpeechSession | None = None
        self.pushed = 0  # samples of ``self.source`` already pushed


class SimulmtSpeechAgent(SpeechToTextAgent):
    """``SimulmtSpeechAgent(args)`` loads ``args.speech_model``; ``SimulmtSpeechAgent(args, speech=...)`` uses a
    loaded :class:`~simulmt.speech.model.SpeechTranslator`. Each finished utterance's result (delays in source units,
    blocks or spelled words, and in ms; compute) is appended to ``self.translations``."""

    def __init__(self, args: Namespace | None = None, speech: SpeechTranslator | None = None):
        args = args if args is not None else Namespace()
        self.layout = getattr(args, "layout", "interleaved")
        self.policy_name = getattr(args, "policy", "wait-k")
        self.k, self.tau = getattr(args, "k", 3), getattr(args, "tau", 0.5)
        self.speech = speech if speech is not None else SpeechTranslator.load(args.speech_model)
        self.translations: list[SpeechTranslation] = []
        super().__init__(args)

    @staticmethod
    def add_args(parser: ArgumentParser) -> None:
        group = parser.add_argument_group("simulmt speech")
        group.add_argument("--speech-model", required=True, help="a speech model folder (finetune-speech's DIR/model)")
        group.add_argument("--layout", default="interleaved")
        group.add_argument("--policy", default="wait-k", choices=("wait-k", "learned", "offline"))
        group.add_argument("--k", type=int, default=3, help="wait-k: in blocks of audio, or in words for a model "
                                                                "that reads the words its CTC head spells")
        group.add_argument("--tau", type=float, default=0.5, help="learned: the policy head's threshold")

    def build_states(self) -> SimulmtSpeechStates:
        return SimulmtSpeechStates()

    def to(self, device: str, *args, **kwargs) -> None:
        """The model was loaded on its device already."""

    def policy(self, states: SimulmtSpeechStates | None = None) -> Action:
        states = self.states if states is None else states
        if states.session is None:
            states.session = self.speech.session(self.layout, self.policy_name, k=self.k, tau=self.tau)
        session = states.session
        new = np.asarray(states.source[states.pushed:], dtype=np.float32)
        states.pushed = len(states.source)
        written = [w.text for w in session.push_audio(new)] if len(new) else []
        if states.source_finished:
            written += [w.text for w in session.finish()]
            self.translations.append(session.result())
            return WriteAction(" ".join(written), finished=True)
        return WriteAction(" ".join(written), finished=False) if written else ReadAction()


__all__ = ["SimulmtSpeechAgent", "SimulmtSpeechStates"]
