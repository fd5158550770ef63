"""The Python API: a model + tokenizer + language pair, ready to open streaming sessions.

    from simulmt import Translator
    tr = Translator.load("gemma-3-270m")                      # or a local dir / hub id; adapter="dir"
    result = tr.translate("A man is riding a bike.", layout="expost", policy="wait-k", k=3)
    print(result.prediction, result.delays)

    session = tr.session(layout="expost", policy="wait-k", k=3)   # live: push words as they arrive
    session.push(["A", "man"]);  for word in session.advance(): print(word.text)
    session.push(["is", "riding"], finished=True); ...

    talks = tr.translate_talks([talk_text, ...], window=ContextWindow(pairs=3))  # whole talks, with context
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

from simulmt.core.examples import TrainingExample, build_examples
from simulmt.core.layouts import Layout, make_layout
from simulmt.core.learned_policy import HEAD_FILE, NO_HEAD, PolicyHead
from simulmt.core.policies import Policy, make_policy
from simulmt.core.prompt_format import PromptFormat, build_format, newline_ids, source_units
from simulmt.core.runner import ModelRunner
from simulmt.core.session import DecodeConfig, StreamingSession, TalkSession, Translation, WrittenWord
from simulmt.core.execution import Execution
from simulmt.core.head_vocabulary import HeadVocabulary
from simulmt.core.engine import Engine, run_ordered
from simulmt.core.fused_layers import fuse_for_inference
from simulmt.core.packed_linear import has_adapter_layers, weights_dtype
from simulmt.errors import SimulmtError
from simulmt.core.samplers import Sampler
from simulmt.core.stream import Stream, Vocabulary
from simulmt.core.stream_options import DEFAULTS
from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS
from simulmt.core.talk import ContextWindow, Talk
from simulmt.core.vocabulary import sentence_end_table, special_token_ids, token_table, word_start_table


class Translator:
    def __init__(self, model, tokenizer, *, source_lang: str = "en", target_lang: str = "de",
                 use_chat_template: bool = True, name: str = "", adapter: str | None = None,
                 policy_head: PolicyHead | None = None, execution: Execution = Execution(),
                 head_vocabulary: HeadVocabulary | None = None):
        """``execution``: how its engines compute (simulmt.core.execution: switches that keep the output).
        ``head_vocabulary``: the LM head computes those tokens (with the format's end tokens added) and each
        stream's source tokens read, nothing else (simulmt.core.head_vocabulary: faster, and opt-in because it
        changes the output where the full head would choose another token)."""
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.policy_head = policy_head  # the learned policy's head (policy="learned"), shipped beside the adapter
        self.adapter = adapter  # the adapter's label (shipped name or directory), None for the bare model
        self.source_lang, self.target_lang = source_lang, target_lang
        fmt = build_format(tokenizer, source_lang, target_lang, use_chat_template)
        if not fmt.chat:  # plain markers: a line break ends the translation too
            fmt = replace(fmt, stop_ids=fmt.stop_ids | newline_ids(tokenizer))
        self.fmt: PromptFormat = fmt
        if head_vocabulary is not None:  # (other special tokens are never proposed: vocabulary.py)
            head_vocabulary = head_vocabulary.with_ids(fmt.stop_ids)
        self.runner = ModelRunner(model, execution, head_vocabulary)
        self.word_starts = word_start_table(tokenizer, self.runner.compute.vocab)
        self.special = token_table(special_token_ids(tokenizer), self.runner.compute.vocab)
        stops = token_table(self.fmt.stop_ids, self.runner.compute.vocab)
        self.vocabulary = Vocabulary(self.word_starts, stops, self.special & ~stops,
                                     sentence_end_table(tokenizer, self.runner.compute.vocab))

    @property
    def head_vocabulary(self) -> str | None:
        """What the engine's LM head computes when not the whole vocabulary (``HeadVocabulary.label``), else None."""
        return None if self.runner.shortlist is None else self.runner.shortlist.label

    @property
    def dtype(self) -> str:
        """What the model computes with (``"float32"``, ``"bfloat16"``, ``"float16-packed"``, ...)."""
        return weights_dtype(self.model)

    @classmethod
    def load(cls, model: str | None = None, adapter: str | None = "auto", *, source_lang: str = "en",
             target_lang: str = "de", use_chat_template: bool = True, fuse: bool = True,
             execution: Execution = Execution(), head_vocabulary: HeadVocabulary | Sequence[str] | str | None = None,
             **load_kwargs) -> "Translator":
        """``adapter="auto"``: the shipped adapter of the model for this language pair, if it has one
        (:mod:`simulmt.adapters`). ``fuse``: run each RMSNorm as one operation and a gated MLP's gate and up projections
        as one product (``simulmt.core.fused_layers``: the same outputs, fewer operations per forward), unless the
        adapter is left unmerged (``merge_adapter=False``, to train it). ``head_vocabulary``: a ``HeadVocabulary``, or
        text files in the target language (paths, or one string of comma-separated paths) to build it from."""
        from simulmt.models import DEFAULT_MODEL, load_model

        loaded = load_model(model or DEFAULT_MODEL, adapter, pair=(source_lang, target_lang), **load_kwargs)
        if fuse and not has_adapter_layers(loaded.model):
            fuse_for_inference(loaded.model)
        name = loaded.name + (f"+{loaded.adapter}" if loaded.adapter else "")
        head = PolicyHead.load(loaded.adapter_dir) if loaded.adapter_dir and (
            loaded.adapter_dir / HEAD_FILE).is_file() else None
        if head_vocabulary is not None and not isinstance(head_vocabulary, HeadVocabulary):
            paths = head_vocabulary.split(",") if isinstance(head_vocabulary, str) else list(head_vocabulary)
            head_vocabulary = HeadVocabulary.from_texts(loaded.tokenizer, paths)
        return cls(loaded.model, loaded.tokenizer, source_lang=source_lang, target_lang=target_lang,
                   use_chat_template=use_chat_template, name=name, adapter=loaded.adapter, policy_head=head,
                   execution=execution, head_vocabulary=head_vocabulary)

    def make_policy(self, policy: str | Policy, k: int = DEFAULTS["k"], n: int = DEFAULTS["n"],
                    tau: float = DEFAULTS["tau"]) -> Policy:
        """A policy by name with its options (``learned`` gets this translator's policy head), or as given."""
        if not isinstance(policy, str):
            return policy
        if policy == "learned" and self.policy_head is None:
            raise SimulmtError(NO_HEAD)
        return make_policy(policy, k=k, n=n, tau=tau, head=self.policy_head)

    def _layout_and_policy(self, layout: str | Layout, policy: str | Policy, k: int, n: int, tau: float, slot: int,
                           phi: int) -> tuple[Layout, Policy]:
        """A layout and a policy, by name with their parameters (or as given)."""
        return (make_layout(layout, slot=slot, phi=phi) if isinstance(layout, str) else layout,
                self.make_policy(policy, k, n, tau))

    def session(self, layout: str | Layout = "expost", policy: str | Policy = "wait-k", *, k: int = DEFAULTS["k"],
                n: int = DEFAULTS["n"], tau: float = DEFAULTS["tau"], slot: int = DEFAULTS["slot"],
                phi: int = DEFAULTS["phi"], config: DecodeConfig | None = None,
                forced: list[tuple[int, int]] | None = None, record: bool = False,
                sampler: Sampler | None = None) -> StreamingSession:
        layout, policy = self._layout_and_policy(layout, policy, k, n, tau, slot, phi)
        return StreamingSession(self.runner, self.tokenizer, self.fmt, layout, policy, self.vocabulary,
                                config or DecodeConfig(), forced=forced, record=record, model_name=self.name,
                                sampler=sampler)

    def new_stream(self, layout: str | Layout = "expost", policy: str | Policy = "wait-k", *, k: int = DEFAULTS["k"],
                   n: int = DEFAULTS["n"], tau: float = DEFAULTS["tau"], slot: int = DEFAULTS["slot"],
                   phi: int = DEFAULTS["phi"], config: DecodeConfig | None = None,
                   sampler: Sampler | None = None, record: bool = False, fmt: PromptFormat | None = None,
                   forced: list[tuple[int, int]] | None = None) -> Stream:
        """A model-free stream for an ``Engine`` (many streams, one model): push words, let the engine run it.
        ``fmt``: another prompt format than the translator's (the speech align stage's transcript prompt).
        ``forced``: teacher forcing, as ``session``'s."""
        layout, policy = self._layout_and_policy(layout, policy, k, n, tau, slot, phi)
        return Stream(self.tokenizer, fmt or self.fmt, layout, policy, self.vocabulary, config or DecodeConfig(),
                      sampler=sampler, forced=forced, record=record, model_name=self.name,
                      max_positions=self.runner.max_positions)

    def new_talk(self, layout: str | Layout = "expost", policy: str | Policy = "wait-k", *,
                 window: ContextWindow = ContextWindow(), max_words: int = DEFAULT_MAX_WORDS,
                 k: int = DEFAULTS["k"], n: int = DEFAULTS["n"], tau: float = DEFAULTS["tau"],
                 slot: int = DEFAULTS["slot"], phi: int = DEFAULTS["phi"], config: DecodeConfig | None = None,
                 sampler: Sampler | None = None, record: bool = False) -> Talk:
        """A model-free stream for a whole talk (simulmt.core.talk): it cuts the words pushed into sentences (at
        most ``max_words`` each) and gives each the last finished pairs as context (``window``)."""
        layout, policy = self._layout_and_policy(layout, policy, k, n, tau, slot, phi)
        return Talk(self.tokenizer, self.fmt, layout, policy, self.vocabulary, config or DecodeConfig(),
                    window=window, max_words=max_words, sampler=sampler, record=record, model_name=self.name,
                    max_positions=self.runner.max_positions)

    def talk_session(self, layout: str | Layout = "expost", policy: str | Policy = "wait-k", *,
                     window: ContextWindow = ContextWindow(), max_words: int = DEFAULT_MAX_WORDS,
                     k: int = DEFAULTS["k"], n: int = DEFAULTS["n"], tau: float = DEFAULTS["tau"],
                     slot: int = DEFAULTS["slot"], phi: int = DEFAULTS["phi"], config: DecodeConfig | None = None,
                     sampler: Sampler | None = None, record: bool = False) -> TalkSession:
        """A whole talk, live: push its words as they arrive, ``advance`` (``new_talk`` with an engine of its own)."""
        layout, policy = self._layout_and_policy(layout, policy, k, n, tau, slot, phi)
        return TalkSession(self.runner, self.tokenizer, self.fmt, layout, policy, self.vocabulary,
                           config or DecodeConfig(), window=window, max_words=max_words, sampler=sampler,
                           record=record, model_name=self.name)

    def translate_talks(self, talks: Iterable[str | list[str]], layout: str | Layout = "expost",
                        policy: str | Policy = "wait-k", *, batch_size: int = 8,
                        on_sentence: Callable[[Translation], None] | None = None,
                        **kwargs) -> Iterator[Translation]:
        """Translate whole talks (a text, or its lines), each as one ``Talk`` stream, up to ``batch_size`` talks
        advanced together; yields each talk's ``Translation`` (delays in the talk's source words) in input order.
        ``on_sentence`` sees each sentence's translation as it is done; ``kwargs``: those of ``new_talk``."""

        def streams():
            for talk in talks:
                words = (talk if isinstance(talk, str) else " ".join(talk)).split()
                stream = self.new_talk(layout, policy, **kwargs)
                stream.on_sentence = on_sentence
                try:
                    stream.push(words, finished=True)
                except SimulmtError as exc:
                    stream.error = exc
                yield stream

        for stream in run_ordered(streams(), Engine(self.runner), batch_size):
            yield stream.result()

    def check_stream(self, layout: str = "expost", policy: str = "wait-k", **options) -> None:
        """Fail now, saying why, if streams with these options cannot run on this model (the learned policy without
        a head, the interleaved layout without its markers, a slot or phi past the model's positions), instead of
        failing at every word later. ``options``: those of ``new_stream``."""
        stream = self.new_stream(layout, policy, **options)
        if self.runner.max_positions is None:
            return
        probe = stream.layout.start(stream.fmt)  # a one-word sentence, placed: its target opener and first word
        stream.layout.read(probe, source_units(self.tokenizer, stream.fmt, ["a"])[0])
        stream.layout.open_target(probe)
        needed = probe.next_position + 1
        if needed > self.runner.max_positions:
            raise SimulmtError(f"{stream.layout.describe()} places a one-word sentence's first target word at "
                               f"position {needed - 1}, beyond this model's {self.runner.max_positions} positions; "
                               f"use a smaller slot / phi")

    def translate_many(self, sources: Iterable[str], layout: str | Layout = "expost",
                       policy: str | Policy = "wait-k", *, batch_size: int = 8,
                       samplers: Callable[[int], Sampler] | None = None, **kwargs) -> list[Translation]:
        """Translate many sentences with up to ``batch_size`` streams advanced together (one forward per round
        for all of them); the results are those of ``translate`` one by one, in input order. ``samplers(i)``
        gives sentence i its own sampler (default: greedy). A sentence that fails has ``error`` set."""
        return list(self.translate_iter(sources, layout, policy, batch_size=batch_size, samplers=samplers,
                                        **kwargs))

    def translate_iter(self, sources: Iterable[str], layout: str | Layout = "expost",
                       policy: str | Policy = "wait-k", *, batch_size: int = 8,
                       samplers: Callable[[int], Sampler] | None = None, **kwargs) -> Iterator[Translation]:
        """``translate_many`` for inputs of any length: sources are read lazily and each ``Translation`` is yielded
        in input order as soon as it and those before it are finished."""

        def streams():
            for i, text in enumerate(sources):
                stream = self.new_stream(layout, policy, sampler=samplers(i) if samplers else None, **kwargs)
                try:
                    stream.push(text.split(), finished=True)
                except SimulmtError as exc:  # e.g. text that is not valid Unicode
                    stream.error = exc
                yield stream

        for stream in run_ordered(streams(), Engine(self.runner), batch_size):
            yield stream.result()

    def translate(self, text: str, layout: str | Layout = "expost", policy: str | Policy = "wait-k",
                  **kwargs) -> Translation:
        return self.session(layout, policy, **kwargs).run(text)

    def stream(self, text: str, layout: str | Layout = "expost", policy: str | Policy = "wait-k",
               **kwargs) -> Iterator[WrittenWord | Translation]:
        """Yield each word as it is written, then the final ``Translation``."""
        session = self.session(layout, policy, **kwargs)
        yield from session.stream(text)
        yield session.result()

    def training_examples(self, layout: Layout, source: str, target: str, delays: list[int]) -> list[TrainingExample]:
        units = source_units(self.tokenizer, self.fmt, source.split())
        return build_examples(layout, self.fmt, self.tokenizer, units, target.split(), delays)
