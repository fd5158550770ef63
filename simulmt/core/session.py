"""The streaming session: one stream (or a whole talk: ``TalkSession``) with an engine of its own, driven by its
caller (push words, advance).

``StreamingSession`` is a ``Stream`` (simulmt.core.stream: the decoding, model-free) served by a private ``Engine``
(simulmt.core.engine: the batched KV cache and the forward) with one row. The same engine serves many streams in
``Translator.translate_many``; a session is the live API for one::

    session = translator.session(layout="expost", policy="wait-k", k=3)
    session.push(["A", "man"]);  for word in session.advance(): print(word.text, word.delay)
    session.push(["is", "riding", "a", "bike."], finished=True);  words = list(session.advance())
    session.result()  # -> Translation (prediction, delays, timings, compute counts)
"""

from __future__ import annotations

from collections.abc import Iterator

from simulmt.core.engine import Engine
from simulmt.core.runner import ModelRunner
from simulmt.core.stream import (DecodeConfig, Proposal, Status, Stream, Translation, Vocabulary, WrittenWord,  # noqa: F401
                            repeated_ngram_bans)
from simulmt.core.talk import Talk


class OwnEngine:
    """A stream served by a private ``Engine`` with one row: the live API (push words, ``advance``)."""

    def _own_engine(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.engine = Engine(runner, share_prompts=False)  # one stream: nothing to share its prompt with
        self.engine.add(self)

    def advance(self) -> Iterator[WrittenWord]:
        """Act until the stream is done or more source is needed; yields each word as it is written."""
        while True:
            step = self.step()
            yield from step.words
            if step.status is Status.NEEDS_MODEL:
                self.engine.serve([(self, step.request)])
                continue
            if step.status is Status.DONE and self.engine.streams:
                self.engine.remove(self)  # its cache row is freed once it is done (CUDA graphs: kept for reuse)
            return

    def run(self, text: str) -> Translation:
        """Translate a complete text as a simulated stream."""
        for _ in self.stream(text):
            pass
        return self.result()

    def stream(self, text: str) -> Iterator[WrittenWord]:
        self.push(text.split(), finished=True)
        yield from self.advance()


class StreamingSession(OwnEngine, Stream):
    def __init__(self, runner: ModelRunner, tokenizer, fmt, layout, policy, vocabulary: Vocabulary,
                 config: DecodeConfig = DecodeConfig(), **kwargs):
        Stream.__init__(self, tokenizer, fmt, layout, policy, vocabulary, config, max_positions=runner.max_positions,
                        **kwargs)
        self._own_engine(runner)


class TalkSession(OwnEngine, Talk):
    """A whole talk live (simulmt.core.talk): push its words as they come, ``advance``; ``result()`` at the end."""

    def __init__(self, runner: ModelRunner, tokenizer, fmt, layout, policy, vocabulary: Vocabulary,
                 config: DecodeConfig = DecodeConfig(), **kwargs):
        Talk.__init__(self, tokenizer, fmt, layout, policy, vocabulary, config, max_positions=runner.max_positions,
                      **kwargs)
        self._own_engine(runner)
