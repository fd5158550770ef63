"""A SimulEval 1.1.4 text-to-text agent that streams with simulmt (one ``StreamingSession`` per sentence).

    simuleval --agent-class simulmt.evaluation.simuleval_agent.SimulmtAgent \\
        --source src.en --target ref.de --output out/ \\
        --model smollm2-135m --layout expost --policy wait-k --k 3

SimulEval sends the source one word per policy call (``--source-segment-size`` is ignored for text) and records,
for every word the agent writes, the number of source words sent so far as its delay. The agent keeps one
streaming session per sentence in its states object (so the KV cache is reused across calls): each call pushes the
words that arrived since the last one, lets the session act (read what the policy wants, write what it can) and
returns everything written in one ``WriteAction``, or a ``ReadAction`` when nothing was. When the session is done
(the source has ended and the translation is complete) the action carries ``finished=True``, with the last words
as its content: SimulEval 1.1.4 records the content of a finished ``WriteAction`` and then ends the sentence.

Because a simulmt session writes a word as soon as its policy allows and SimulEval counts the words sent, the
delays SimulEval records equal the session's own ``delays`` (for wait-k, ``min(k + j - 1, |X|)``).

Input text: SimulEval reads ``--source`` and ``--target`` itself (``open()`` in text mode), after the agent is
built. So :meth:`SimulmtAgent.from_args` first checks both files with :mod:`simulmt.text.text_input`'s rule: a
line that is not UTF-8 ends the command with one line naming the file and the line (exit code 1), before the model
loads, instead of SimulEval's ``UnicodeDecodeError`` traceback after it. SimulEval keeps a UTF-8 byte-order mark in the
first word; the agent drops it (as ``simulmt evaluate`` does), and refuses a word holding a lone surrogate (text
decoded with ``errors="surrogateescape"``) with a :class:`~simulmt.errors.SimulmtError`.

The module needs SimulEval (``pip install simuleval==1.1.4``, best in its own virtual environment: it pins old
tools); importing it without SimulEval raises :class:`SimulEvalMissingError` (an ``ImportError``) saying so.
``import simulmt`` never imports this module.
"""

from __future__ import annotations

import logging
from argparse import ArgumentParser, Namespace

from simulmt.errors import SimulmtError
from simulmt.core.layouts import LAYOUTS, make_layout
from simulmt.core.policies import make_policy
from simulmt.core.prompt_format import language_name
from simulmt.core.session import StreamingSession, Translation
from simulmt.text.text_input import check_text, read_text_lines
from simulmt.translator import Translator


class SimulEvalMissingError(SimulmtError, ImportError):
    """SimulEval is not installed in this environment."""


try:
    from simuleval.agents import TextToTextAgent
    from simuleval.agents.actions import Action, ReadAction, WriteAction
    from simuleval.agents.states import AgentStates
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise SimulEvalMissingError(
        "simulmt.evaluation.simuleval_agent needs SimulEval 1.1.4, which is not importable here "
        f"({exc}); install it, preferably in a separate virtual environment: "
        "python -m venv --system-site-packages sev && sev/bin/pip install simuleval==1.1.4") from exc

logger = logging.getLogger("simulmt.evaluation.simuleval_agent")


class SimulmtStates(AgentStates):
    """SimulEval's per-sentence states plus the streaming session and how many source words it has been given."""

    def reset(self) -> None:
        super().reset()
        self.session: StreamingSession | None = None
        self.pushed = 0  # words of ``self.source`` already pushed into the session


class SimulmtAgent(TextToTextAgent):
    """Text-to-text SimulEval agent: a simulmt layout + policy on a causal LM, greedy, word by word.

    ``SimulmtAgent(args)`` loads the model named by ``args`` (see :meth:`add_args`);
    ``SimulmtAgent(args, translator=...)`` uses an already loaded :class:`~simulmt.Translator` (tests, notebooks).
    Every finished sentence's :class:`~simulmt.Translation` (delays, tokens fed, FLOPs, wall time) is appended to
    ``self.translations``.
    """

    def __init__(self, args: Namespace | None = None, translator: Translator | None = None):
        args = args if args is not None else Namespace()
        self.layout_name = getattr(args, "layout", "expost")
        self.policy_name = getattr(args, "policy", "wait-k")
        self.k, self.n = getattr(args, "k", 3), getattr(args, "read_n", 3)
        self.slot, self.phi = getattr(args, "slot", 16), getattr(args, "phi", 256)
        make_layout(self.layout_name, slot=self.slot, phi=self.phi)  # validate before loading anything
        make_policy(self.policy_name, k=self.k, n=self.n)
        if translator is None:
            translator = _load(args)
        self.translator = translator
        self.translations: list[Translation] = []
        super().__init__(args)

    # ---- SimulEval's construction protocol -----------------------------------------------------------------------
    @staticmethod
    def add_args(parser: ArgumentParser) -> None:
        group = parser.add_argument_group("simulmt")
        group.add_argument("--model", default=None, help="packaged short name (gemma-3-270m, smollm2-135m), local "
                           "checkpoint directory or Hugging Face hub id (default: simulmt's default model)")
        group.add_argument("--adapter", default="auto",
                           help="'auto' (the adapter shipped for the model, if any), 'none', or a PEFT adapter "
                           "directory")
        group.add_argument("--layout", default="expost", choices=tuple(LAYOUTS),
                           help="how source and target tokens are placed in the model's context")
        group.add_argument("--policy", default="wait-k", choices=("wait-k", "read-n", "offline"),
                           help="when to read the next source word and when to write a target word")
        group.add_argument("--k", type=int, default=3, help="wait-k: write word j once k + j - 1 words are read")
        # not --n: SimulEval's own parsers would take it as an abbreviation of --no-scoring / --no-progress-bar
        group.add_argument("--read-n", type=int, default=3, help="read-n: source words read before each segment")
        group.add_argument("--slot", type=int, default=16, help="expost: length of a source position slot")
        group.add_argument("--phi", type=int, default=256, help="gpe: first position id of the target group")
        group.add_argument("--source-lang", default="en", help="source language (code or English name)")
        group.add_argument("--target-lang", default="de", help="target language (code or English name)")
        group.add_argument("--head-vocabulary", default=None, metavar="FILES",
                           help="text files (comma-separated): the LM head computes only their tokens and each "
                           "sentence's source tokens read (as simulmt translate --head-vocabulary)")
        # --device and --dtype/--fp16 are SimulEval's own options; the model is loaded with them

    @classmethod
    def from_args(cls, args: Namespace) -> "SimulmtAgent":
        """SimulEval's command line builds the agent here, before it reads the data: the input files are checked
        first, so that a line that is not UTF-8 ends the command with one message (exit code 1)."""
        for what in ("source", "target"):
            path = getattr(args, what, None)
            if isinstance(path, str) and path:
                try:
                    read_text_lines(path, what)
                except SimulmtError as exc:
                    raise SystemExit(f"simulmt: error: {exc}") from None
        return cls(args)

    def build_states(self) -> SimulmtStates:
        return SimulmtStates()

    def to(self, device: str, *args, **kwargs) -> None:
        """SimulEval calls this with its ``--device`` after construction; the model was loaded there already."""

    # ---- the policy ----------------------------------------------------------------------------------------------
    def new_session(self) -> StreamingSession:
        return self.translator.session(self.layout_name, self.policy_name, k=self.k, n=self.n, slot=self.slot,
                                       phi=self.phi)

    def policy(self, states: SimulmtStates | None = None) -> Action:
        states = self.states if states is None else states
        if states.session is None:
            states.session = self.new_session()
        session = states.session
        new_words = [check_text(word, f"source word {states.pushed + i + 1} ({word!r})")
                     for i, word in enumerate(states.source[states.pushed:])]
        if states.pushed == 0 and new_words and new_words[0].startswith("\ufeff"):  # SimulEval keeps a file's BOM
            new_words[0] = new_words[0][1:] or new_words[0]
        if new_words or (states.source_finished and not session.stream_finished):
            session.push(new_words, finished=states.source_finished)
            states.pushed = len(states.source)
        if session.stream_finished and not session.source_words:  # an empty source line: an empty translation
            return self._finish(states, [])
        try:
            written = [word.text for word in session.advance()]
        except SimulmtError as exc:
            raise SimulmtError(f"while translating {' '.join(session.source_words)!r}: {exc}") from exc
        if session.done:
            return self._finish(states, written)
        if written:
            return WriteAction(" ".join(written), finished=False)
        return ReadAction()

    def _finish(self, states: SimulmtStates, written: list[str]) -> WriteAction:
        translation = states.session.result()
        self.translations.append(translation)
        logger.debug("finished: %s | tokens fed %d, %.2f GFLOPs, %.0f ms", translation.prediction,
                     translation.tokens_fed, translation.flops / 1e9, translation.wall_ms)
        return WriteAction(" ".join(written), finished=True)


def _load(args: Namespace) -> Translator:
    import torch

    source_lang, target_lang = getattr(args, "source_lang", "en"), getattr(args, "target_lang", "de")
    language_name(source_lang)
    language_name(target_lang)
    half = getattr(args, "dtype", None) == "fp16" or getattr(args, "fp16", False)
    return Translator.load(getattr(args, "model", None), getattr(args, "adapter", "auto"), source_lang=source_lang,
                           target_lang=target_lang, device=getattr(args, "device", None),
                           dtype=torch.float16 if half else torch.float32,
                           head_vocabulary=getattr(args, "head_vocabulary", None))


__all__ = ["SimulEvalMissingError", "SimulmtAgent", "SimulmtStates"]
