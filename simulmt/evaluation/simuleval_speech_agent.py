"""A SimulEval 1.1.4 speech-to-text agent that streams with simulmt: by default the Whisper recogniser feeding
the text model (``simulmt.speech.cascade``), or an end-to-end speech model (``--speech-model DIR``, whose card's
layout, policy and tau are the defaults).

    simuleval --agent-class simulmt.evaluation.simuleval_speech_agent.SimulmtSpeechAgent \\
        --source wavs.list --target ref.de --output out/ --source-type speech --target-type text \\
        [--model NAME --asr-model tiny.en --layout expost --policy wait-k --k 3 --head-vocabulary FILES]
        |  [--speech-model DIR]

SimulEval sends the audio in segments (``--source-segment-size`` ms, samples as floats) and records, for every
word the agent writes, the ms of audio sent so far as its delay. The agent keeps one ``SpeechSession`` per
utterance in its states: each call pushes the samples that arrived since the last one (the streaming encoder
emits the blocks they complete), lets the session write what its policy allows, and returns it in one
``WriteAction`` (``finished=True`` with the last words once the audio has ended), or a ``ReadAction``.

Like ``simulmt.evaluation.simuleval_agent``, importing it without SimulEval raises ``SimulEvalMissingError``.
"""

from __future__ import annotations

from argparse import ArgumentParser, Namespace

import numpy as np

from simulmt.evaluation.simuleval_agent import SimulEvalMissingError  # noqa: F401 (the install hint without SimulEval)
from simulmt.speech.loading import load_speech
from simulmt.speech.model import SpeechTranslation
from simulmt.speech.wav import RATE
from simulmt.errors import SimulmtError

from simuleval.agents import SpeechToTextAgent  # noqa: E402  (importable: the import above checked SimulEval)
from simuleval.agents.actions import Action, ReadAction, WriteAction  # noqa: E402
from simuleval.agents.states import AgentStates  # noqa: E402


class SimulmtSpeechStates(AgentStates):
    def reset(self) -> None:
        super().reset()
        self.session = None  # a SpeechSession or a CascadeSession
        self.pushed = 0  # samples of ``self.source`` already pushed


class SimulmtSpeechAgent(SpeechToTextAgent):
    """``SimulmtSpeechAgent(args)`` loads what ``args`` name (the recogniser cascade, or ``args.speech_model``);
    ``SimulmtSpeechAgent(args, speech=...)`` uses a loaded one (a ``CascadeTranslator`` or a ``SpeechTranslator``).
    Each finished utterance's result (delays in source units and in ms; compute) is appended to
    ``self.translations``."""

    def __init__(self, args: Namespace | None = None, speech=None):
        args = args if args is not None else Namespace()
        defaults = {"layout": "expost", "policy": "wait-k", "tau": 0.5}
        if speech is None:
            speech, card = load_speech(getattr(args, "speech_model", None), model=getattr(args, "model", None),
                                       asr_model=getattr(args, "asr_model", "tiny.en"),
                                       head_vocabulary=getattr(args, "head_vocabulary", None))
            defaults |= card
        elif hasattr(speech, "card_defaults"):
            defaults |= speech.card_defaults
        given = lambda name: getattr(args, name, None)  # noqa: E731
        self.layout = given("layout") or defaults["layout"]
        self.policy_name = given("policy") or defaults["policy"]
        self.k = given("k") or 3
        self.tau = given("tau") if given("tau") is not None else defaults["tau"]
        self.speech = speech
        self.translations: list[SpeechTranslation] = []
        super().__init__(args)

    @staticmethod
    def add_args(parser: ArgumentParser) -> None:
        group = parser.add_argument_group("simulmt speech")
        group.add_argument("--speech-model", default=None, help="an end-to-end speech model folder (finetune-speech's "
                           "DIR/model) instead of the Whisper recogniser feeding the text model")
        group.add_argument("--model", default=None, help="the text model (default: simulmt's)")
        group.add_argument("--asr-model", default="tiny.en", help="the recogniser: a packaged Whisper or a folder")
        group.add_argument("--layout", default=None, help="default: expost; with --speech-model, the model's own")
        group.add_argument("--policy", default=None, choices=("wait-k", "learned", "offline", "read-n"),
                           help="default: wait-k; with --speech-model, the model's own")
        group.add_argument("--k", type=int, default=3, help="wait-k: in words (or, for an end-to-end model that "
                                                                "reads blocks, in blocks of audio)")
        group.add_argument("--tau", type=float, default=None, help="learned: the policy head's threshold")
        group.add_argument("--head-vocabulary", default=None, metavar="FILES",
                           help="the text model's LM head over these text files' tokens (comma-separated) and each "
                           "sentence's source tokens heard (as simulmt translate --head-vocabulary)")

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
        if len(new) and (states.source_sample_rate != RATE or new.ndim != 1):  # (SimulEval reads the files itself)
            raise SimulmtError(f"SimulEval sends this file's audio at {states.source_sample_rate} Hz with "
                               f"{1 if new.ndim == 1 else new.shape[-1]} channel(s); the speech agent takes 16 kHz "
                               f"mono: convert the files first (sox IN.wav -r 16000 -c 1 OUT.wav), or run simulmt "
                               f"evaluate --source-audio, which reads any recording")
        written = [w.text for w in session.push_audio(new)] if len(new) else []
        if states.source_finished:
            written += [w.text for w in session.finish()]
            self.translations.append(session.result())
            return WriteAction(" ".join(written), finished=True)
        return WriteAction(" ".join(written), finished=False) if written else ReadAction()


__all__ = ["SimulmtSpeechAgent", "SimulmtSpeechStates"]
