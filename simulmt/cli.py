"""The command line: ``simulmt translate`` and ``simulmt demo``.

Each subcommand's options are a frozen dataclass; its fields (type, default, ``metadata["help"]``) become the
subparser's arguments through :func:`add_dataclass_arguments`, and its ``__post_init__`` validates them. Invalid
options are argument errors (exit code 2) found before any model is loaded; a model that cannot be loaded is
exit code 1 with its message; a line that cannot be translated (not valid UTF-8, or too long for the model's
context) is reported and skipped, and makes the exit code 1. An output folder that cannot be written is refused
before the model loads (:mod:`simulmt.output_dir`); a file error later on, standard output included (``> /dev/full``),
is one line and exit code 1; a closed pipe (``| head``) ends quietly. No error ends in a traceback.

``translate`` reads its input with :mod:`simulmt.text.text_input` (strict UTF-8, line by line) and translates each line
as one talk (:func:`translate_line`; simulmt.core.talk): cut into sentences of at most ``--max-words`` words, each
given the earlier pairs ``--context-pairs`` asks for, their translations one output line. ``translate --audio``
feeds a recording to a speech translator (:func:`translate_audio`; the speech front end, :mod:`simulmt.speech`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import typing
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TextIO

from simulmt import __version__
from simulmt.errors import SimulmtError
from simulmt.core.layouts import LAYOUTS
from simulmt.models import DEFAULT_MODEL
from simulmt.option_fields import (asr_beam_field, asr_later_step_ms_field, asr_pause_ms_field, asr_policy_field,
                                   check_asr_later_step)
from simulmt.option_fields import (adapter_field, batch_size_field, context_pairs_field, context_tokens_field,
                                    device_field, dtype_field, head_vocabulary_field, k_field, language_field,
                                    model_field)
from simulmt.core.policies import POLICIES
from simulmt.core.prompt_format import language_name
from simulmt.core.talk import ContextWindow
from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS
from simulmt.core.session import Translation, WrittenWord
from simulmt.core.stream_options import StreamOptions
from simulmt.speech.wav import audio_pieces, probe_audio
from simulmt.text.text_input import Line, read_lines, stream_lines

if typing.TYPE_CHECKING:
    from simulmt.translator import Translator


# ---- options ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TranslateOptions:
    input: str = field(default="-", metadata={
        "help": "text file with one source sentence per line; '-' (default) reads standard input",
        "positional": True, "metavar": "FILE"})
    model: str | None = model_field()
    adapter: str = adapter_field()
    layout: str | None = field(default=None, metadata={
        "help": "how source and target tokens are placed in the model's context (default: expost; with "
                "--speech-model, the layout that model was trained for)", "choices": tuple(LAYOUTS)})
    policy: str | None = field(default=None, metadata={
        "help": "when to read the next source word and when to write a target word (default: wait-k; with "
                "--speech-model, the model's own)", "choices": tuple(POLICIES)})
    k: int | None = field(default=None, metadata={
        "help": "wait-k: write target word j once k + j - 1 source words are read (default 3)"})
    n: int | None = field(default=None, metadata={
        "help": "read-n: source words read before each written segment (default 3)"})
    tau: float | None = field(default=None, metadata={
        "help": "learned: write once the policy head's p(WRITE) reaches tau (0..1; default 0.5; with "
                "--speech-model, the model's own)"})
    slot: int | None = field(default=None, metadata={
        "help": "expost: length of a source position slot, in tokens (default 16)"})
    phi: int | None = field(default=None, metadata={"help": "gpe: first position id of the target group (default 256)"})
    source_lang: str = language_field("en", "source")
    target_lang: str = language_field("de", "target")
    max_words: int = field(default=DEFAULT_MAX_WORDS, metadata={
        "help": "each line is translated sentence by sentence (one talk); a sentence longer than this many words "
                "is cut there (bounds the time and the context one sentence takes)", "metavar": "N"})
    context_pairs: int = context_pairs_field("a line is one talk")
    context_tokens: int = context_tokens_field()
    jsonl: bool = field(default=False, metadata={
        "help": "write one JSON object per input line (prediction, delays, timings, compute counts)"})
    audio: str | None = field(default=None, metadata={
        "help": "translate this recording instead of text, as it plays (WAV, FLAC, MP3, Ogg, M4A, ...: any rate and "
                "channels, resampled to 16 kHz mono): a streaming Whisper recogniser (--asr-model) feeds its "
                "confirmed words to the text model (or --speech-model)",
        "metavar": "AUDIO"})
    asr_model: str = field(default="tiny.en", metadata={
        "help": "with --audio: the recogniser, a packaged Whisper (tiny.en; base, multilingual: pip install "
                "'simulmt[speech-base]') or a CTranslate2 Whisper folder", "metavar": "NAME|DIR"})
    asr_step_ms: int = field(default=1000, metadata={
        "help": "with --audio: the recogniser transcribes its buffer again after this much new audio "
                "(LocalAgreement-2 confirms a word once the newest transcript and one of the two before it agree)", "metavar": "MS"})
    asr_later_step_ms: int = asr_later_step_ms_field('with --audio: ')
    asr_pause_ms: int = asr_pause_ms_field('with --audio: ')
    asr_policy: str = asr_policy_field('with --audio: ')
    asr_beam: int = asr_beam_field('with --audio: ')
    speech_model: str | None = field(default=None, metadata={
        "help": "with --audio: an end-to-end speech model folder instead of the recogniser (EASiST, a research "
                "path: simulmt finetune-speech's DIR/model, e.g. the shipped "
                "simulmt/speech/models/gemma-3-270m-easist-en-de); its card's layout, policy and tau are the "
                "defaults", "metavar": "DIR"})
    batch_size: int = batch_size_field()
    device: str | None = device_field()
    dtype: str = dtype_field("auto")
    head_vocabulary: str | None = head_vocabulary_field()

    def __post_init__(self):
        if self.layout is not None and self.layout not in LAYOUTS:
            raise SimulmtError(f"unknown layout {self.layout!r}; choose one of: {', '.join(LAYOUTS)}")
        if self.policy is not None and self.policy not in POLICIES:
            raise SimulmtError(f"unknown policy {self.policy!r}; choose one of: {', '.join(POLICIES)}")
        for name in ("k", "n", "slot", "phi", "max_words", "batch_size", "asr_step_ms", "asr_beam"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise SimulmtError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.context_pairs < 0 or self.context_tokens < 0:
            raise SimulmtError("--context-pairs and --context-tokens must be at least 0")
        check_asr_later_step(self.asr_step_ms, self.asr_later_step_ms)
        if self.asr_pause_ms < 0:
            raise SimulmtError(f"--asr-pause-ms must be at least 0 (0: off), got {self.asr_pause_ms}")
        if self.tau is not None and not 0.0 <= self.tau <= 1.0:
            raise SimulmtError(f"--tau must be within 0..1, got {self.tau}")
        if self.speech_model is None:  # (a speech model's card chooses the layout and policy: checked when read)
            self.stream_options()
        language_name(self.source_lang)  # raises SimulmtError with the list of known languages
        language_name(self.target_lang)

    def stream_options(self, defaults: dict | None = None) -> StreamOptions:
        """The stream's options, checked (an option the layout and policy do not take is an error); the layout,
        policy and tau not given come from ``defaults`` (a speech model's card), else the text defaults."""
        defaults = {"layout": "expost", "policy": "wait-k", **(defaults or {})}
        layout = self.layout or defaults["layout"]
        policy = self.policy or defaults["policy"]
        tau = self.tau
        if tau is None and defaults.get("tau") is not None and "tau" in StreamOptions(layout, policy).taken():
            tau = defaults["tau"]
        return StreamOptions(layout, policy, k=self.k, n=self.n, tau=tau, slot=self.slot, phi=self.phi)

    def session_kwargs(self, defaults: dict | None = None) -> dict:
        """``stream_options(defaults)`` as keyword arguments of ``Translator.session`` (defaults filled in)."""
        return self.stream_options(defaults).session_kwargs()

    def window(self) -> ContextWindow:
        return ContextWindow(self.context_pairs, self.context_tokens)

    def talk_kwargs(self, defaults: dict | None = None) -> dict:
        """Keyword arguments of ``Translator.talk_session`` / ``translate_talks``: a line is a talk."""
        return {**self.session_kwargs(defaults), "window": self.window(), "max_words": self.max_words}


@dataclass(frozen=True)
class DemoOptions:
    model: str | None = model_field()
    adapter: str = adapter_field()
    k: int = k_field()
    audio: bool = field(default=False, metadata={
        "help": "speech instead of text: sentences spoken by espeak-ng (or the shipped sample) stream into the "
                "Whisper recogniser, whose confirmed words the text model translates (or --speech-model)"})
    asr_model: str = field(default="tiny.en", metadata={
        "help": "with --audio: the recogniser (a packaged Whisper: tiny.en, base; or a CTranslate2 folder)",
        "metavar": "NAME|DIR"})
    speech_model: str | None = field(default=None, metadata={
        "help": "with --audio: an end-to-end speech model folder instead (EASiST: simulmt finetune-speech's "
                "DIR/model)", "metavar": "DIR"})
    dtype: str = dtype_field("auto")

    def __post_init__(self):
        if self.k < 1:
            raise SimulmtError(f"--k must be at least 1, got {self.k}")


# ---- dataclass -> argparse ---------------------------------------------------------------------------------------
class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a field's default in its help, unless there is nothing to show (None, off, already said)."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _field_type(hint) -> tuple[type, bool]:
    """(base type, optional?) of a field's annotation: ``int`` -> (int, False), ``str | None`` -> (str, True)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported option type {hint!r}")
        return args[0], True
    return hint, False


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One argument per dataclass field: ``--field-name`` (or positional), typed, with its default and help.

    Not transformers' ``HfArgumentParser``, which reads the same ``metadata={"help": ...}`` convention: it has no
    positional fields (``simulmt translate FILE``) nor metavars, and it adds a ``--no_x`` flag for every boolean
    that defaults to true; the twenty lines here keep the command lines as they are documented."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        base, _ = _field_type(hints[f.name])
        meta = f.metadata
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        kwargs: dict = {"help": meta.get("help", ""), "default": default}
        if "choices" in meta:
            kwargs["choices"] = meta["choices"]
        if "metavar" in meta:
            kwargs["metavar"] = meta["metavar"]
        if meta.get("positional"):
            parser.add_argument(f.name, nargs="?", type=base, **kwargs)
        elif base is bool:
            parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, action="store_true", **kwargs)
        else:
            parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=base, **kwargs)


def dataclass_from_namespace(cls: type, namespace: argparse.Namespace):
    return cls(**{f.name: getattr(namespace, f.name) for f in fields(cls)})


# ---- the model (tests replace this) ------------------------------------------------------------------------------
def _load_translator(*, model: str | None, adapter: str | None, source_lang: str = "en",
                     target_lang: str = "de", device: str | None = None, dtype: str = "float32",
                     head_vocabulary: str | None = None) -> "Translator":
    from simulmt.translator import Translator

    return Translator.load(model or DEFAULT_MODEL, adapter, source_lang=source_lang, target_lang=target_lang,
                           device=device, dtype=dtype, head_vocabulary=head_vocabulary)


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


# ---- translate ---------------------------------------------------------------------------------------------------
def _failed(session, words: list[str], error: str) -> Translation:
    """The record of a line that could not be translated: empty prediction, the work done so far, the error."""
    source = " ".join(words)
    result = session.result() if session is not None else Translation(source, "", [], [], 0, 0.0, "", "", None)
    return replace(result, source=source, source_length=len(words), prediction="", delays=[], elapsed=[],
                   error=error)


def translate_line(translator: "Translator", text: str, options: TranslateOptions, *,
                   on_word: Callable[[WrittenWord], None] | None = None,
                   on_sentence: Callable[[Translation], None] | None = None) -> Translation:
    """One input line, of any length, as one talk (simulmt.core.talk): cut into sentences of at most
    ``options.max_words`` words, each given the context ``options.context_pairs`` asks for. Its ``Translation``
    counts delays over the line's source words. A sentence that cannot be translated (e.g. too long for the
    model's context) has ``error`` in its part and no target words; the next is translated all the same.
    ``on_word`` sees every target word as it is written, ``on_sentence`` every finished sentence."""
    session = None
    try:
        session = translator.talk_session(**options.talk_kwargs())
        session.on_sentence = on_sentence
        for word in session.stream(text):
            if on_word is not None:
                on_word(word)
        return session.result()
    except SimulmtError as exc:  # e.g. a word that is not valid text
        return _failed(session, text.split(), str(exc))


def _line_failed(line: Line) -> Translation:
    """The record of a line that is not valid UTF-8 (reported; the other lines are translated)."""
    shown = line.shown
    return Translation(shown, "", [], [], 0, 0.0, "", "", None, source_length=len(shown.split()), error=line.error)


def translate_lines_batched(translator: "Translator", lines: Iterable[Line], options: TranslateOptions,
                            on_sentence: Callable[[Translation], None] | None = None
                            ) -> Iterator[tuple[Line, Translation]]:
    """Every line as a talk through one engine, ``options.batch_size`` talks at a time; yields each line with its
    ``Translation`` in input order, as soon as it is done. Lines are read lazily: standard input of any length runs
    in bounded memory."""
    queue: deque[Line] = deque()  # lines read so far, not yet yielded

    def texts() -> Iterator[str]:
        for line in lines:
            queue.append(line)
            if line.text is not None:
                yield line.text

    def unreadable() -> Iterator[tuple[Line, Translation]]:
        while queue and queue[0].text is None:
            line = queue.popleft()
            yield line, _line_failed(line)

    for result in translator.translate_talks(texts(), batch_size=options.batch_size, on_sentence=on_sentence,
                                             **options.talk_kwargs()):
        yield from unreadable()
        yield queue.popleft(), result
    yield from unreadable()


def _translate(options: TranslateOptions, translator: "Translator", lines: Iterable[Line], out: TextIO,
               err: TextIO, progress: bool) -> int:
    live = not options.jsonl and _stdout_is_terminal()
    bar = None
    if progress and isinstance(lines, list):  # counts source words: a long line moves it sentence by sentence
        from tqdm import tqdm

        bar = tqdm(total=sum(len(line.text.split()) for line in lines if line.text is not None), file=err,
                   unit="word", dynamic_ncols=True)

    def report(message: str) -> None:
        if bar is not None:
            bar.write(message, file=err)
        else:
            print(message, file=err, flush=True)

    def advance(sentence: Translation) -> None:
        bar.update(sentence.source_length)

    printed = False

    def show(word: WrittenWord) -> None:
        nonlocal printed
        print((" " if printed else "") + word.text, end="", file=out, flush=True)
        printed = True

    def one_by_one() -> Iterator[tuple[Line, Translation]]:
        nonlocal printed
        for line in lines:
            printed = False
            if line.text is None:  # not valid UTF-8: reported, the other lines are translated
                yield line, _line_failed(line)
            else:
                yield line, translate_line(translator, line.text, options, on_word=show if live else None,
                                           on_sentence=advance if bar is not None else None)

    if options.batch_size > 1:  # words are not shown live: whole lines, in input order
        live = False
        results = translate_lines_batched(translator, lines, options, advance if bar is not None else None)
    else:
        results = one_by_one()
    failures = total = 0
    try:
        for line, result in results:
            total += 1
            if result.error:
                failures += 1
                if not options.jsonl:  # a decoding error names its line already
                    report(f"simulmt: {'' if line.text is None else f'line {line.number}: '}{result.error}")
            if options.jsonl:
                print(json.dumps(result.to_json(), ensure_ascii=False), file=out, flush=True)
            elif live:
                print(file=out, flush=True)
            else:
                print(result.prediction, file=out, flush=True)
    finally:
        if bar is not None:
            bar.close()
    if failures:
        report(f"simulmt: {failures} of {total} lines could not be translated")
    return 1 if failures else 0


def _run_translate(options: TranslateOptions, parser: argparse.ArgumentParser) -> int:
    if options.audio is not None or options.speech_model is not None:
        return _run_translate_audio(options, parser)
    if options.input == "-":
        lines: Iterable[Line] = stream_lines(sys.stdin.buffer)
    else:
        try:
            lines = read_lines(options.input)
        except SimulmtError as exc:
            parser.error(str(exc))
    try:
        translator = _load_translator(model=options.model, adapter=options.adapter,
                                      source_lang=options.source_lang, target_lang=options.target_lang,
                                      device=options.device, dtype=options.dtype,
                                      head_vocabulary=options.head_vocabulary)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    progress = isinstance(lines, list) and bool(lines) and _stderr_is_terminal() and not _stdout_is_terminal()
    return _translate(options, translator, lines, sys.stdout, sys.stderr, progress)


def _run_speech_demo(options: DemoOptions) -> int:
    from simulmt.demo.speech import run_speech_demo
    from simulmt.speech.loading import load_speech

    try:
        what = options.speech_model or f"the Whisper {options.asr_model} recogniser + the text model"
        print(f"simulmt demo: loading {what} ...", flush=True)
        speech, defaults = load_speech(options.speech_model, model=options.model, adapter=options.adapter,
                                       asr_model=options.asr_model, dtype=options.dtype)
        layout = defaults.get("layout", "expost")
        policy = defaults.get("policy", "wait-k")
        if policy == "learned" and speech.translator.policy_head is None:
            raise SimulmtError(f"{options.speech_model}: its card names the learned policy but it has no policy "
                               f"head")
        return run_speech_demo(speech, layout=layout, policy=policy, k=options.k, tau=defaults.get("tau", 0.5))
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1


def translate_audio(speech, path: str, session_kwargs: dict, jsonl: bool, out: TextIO | None = None) -> int:
    """``simulmt translate --audio FILE [--speech-model DIR]``: words appear as the audio plays, with their audio
    time.

    The recording (``audio_pieces``: any format FFmpeg decodes, as 16 kHz mono, decoded as it goes) is fed to a speech
    session (the recogniser cascade, ``simulmt.speech.cascade``, or an end-to-end speech model) in pieces of one
    recogniser step (or one encoder block), as a live stream would arrive; each written word is printed with the audio
    time it was written at (the delay: when the last source word read before it was confirmed; for an end-to-end model,
    when its last block read was available) and the wall time spent so far. ``--jsonl`` prints one JSON object for the
    file: the prediction, delays in source units (blocks or spelled words, ``unit``) and in ms, the compute (encoder,
    adapter, LLM), the audio's duration, and what a CTC head spelled (``heard``)."""
    out = out or sys.stdout  # looked up now: a default bound at import would keep a replaced stdout
    session = speech.session(**session_kwargs)
    step = int(16 * speech.piece_ms)  # pieces of one block (EASiST) or one recogniser step, as live audio comes

    def show(words) -> None:
        for word in words:
            if not jsonl:
                print(f"[{session.delay_ms(word) / 1000:6.2f} s audio | {word.elapsed_ms / 1000:6.2f} s wall] "
                      f"{word.text}", file=out, flush=True)

    for piece in audio_pieces(path, step):  # decoded as it is fed: a recording of any length in bounded memory
        show(session.push_audio(piece))
    show(session.finish())
    result = session.result()
    if jsonl:
        print(json.dumps(result.to_json(), ensure_ascii=False), file=out)
    else:
        heard = f"heard: {result.heard}\n" if result.heard else ""
        print(f"\n{heard}{result.prediction}\n({len(result.delays)} words from {result.duration_ms / 1000:.2f} s of "
              f"audio; {'recogniser' if speech.unit == 'words' and not hasattr(speech, 'config') else 'encoder'} "
              f"{result.encoder_ms:.0f} ms, wall {result.wall_ms:.0f} ms)", file=out)
    return 0 if result.error is None else 1


def _run_translate_audio(options: TranslateOptions, parser: argparse.ArgumentParser) -> int:
    if options.audio is None:
        parser.error("--speech-model DIR translates speech: give the recording with --audio")
    if options.input != "-":
        parser.error("--audio translates a recording: give no text input file with it")
    if options.speech_model is not None and (options.model is not None or options.adapter != "auto"):
        parser.error("--speech-model DIR carries its own LLM and adapter: give no --model / --adapter with it")

    from simulmt.speech.loading import load_speech

    try:
        probe_audio(options.audio)  # a bad file fails before the model loads
        speech, defaults = load_speech(options.speech_model, model=options.model, adapter=options.adapter,
                                       asr_model=options.asr_model, asr_step_ms=options.asr_step_ms,
                                       asr_pause_ms=options.asr_pause_ms, asr_policy=options.asr_policy,
                                       asr_beam=options.asr_beam, asr_later_step_ms=options.asr_later_step_ms,
                                       source_lang=options.source_lang,
                                       target_lang=options.target_lang, max_words=options.max_words,
                                       device=options.device, dtype=options.dtype,
                                       head_vocabulary=options.head_vocabulary)
        return translate_audio(speech, options.audio, options.session_kwargs(defaults), options.jsonl)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1


def _run_demo(options: DemoOptions) -> int:
    from simulmt.demo.text import run_demo

    if options.audio or options.speech_model:
        return _run_speech_demo(options)
    model = options.model or DEFAULT_MODEL
    print(f"simulmt demo: loading model {model} (adapter: {options.adapter}) ...", flush=True)
    try:
        translator = _load_translator(model=model, adapter=options.adapter, source_lang="en", target_lang="de",
                                      dtype=options.dtype)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    fine_tuned = getattr(translator, "adapter", None) is not None
    return run_demo(translator, k=options.k, fine_tuned=fine_tuned, out=sys.stdout)


def _run_rl(options, parser: argparse.ArgumentParser) -> int:
    from simulmt.rl.train import run_rl  # peft and the engine load here

    return run_rl(options, parser)


def _run_finetune_speech(options) -> int:
    from simulmt.finetune.speech.train import train_speech

    try:
        card = train_speech(options)
    except SimulmtError as exc:
        print(f"simulmt finetune-speech: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in card.items() if k != "loss_history"}, indent=2))
    return 0


def _run_finetune(options, parser: argparse.ArgumentParser) -> int:
    from simulmt.finetune.trainer import run_finetune  # transformers' Trainer and peft load here

    return run_finetune(options, parser)


# ---- main --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """A subcommand: its options dataclass (which becomes its arguments) and the function that runs it.

    ``run(options, subparser) -> exit code``; a ``SimulmtError`` raised while building the options is an
    argument error of that subcommand (exit code 2)."""

    options: type
    run: typing.Callable[[typing.Any, argparse.ArgumentParser], int]
    help: str
    description: str = ""


def _commands() -> dict[str, Command]:
    """The explicit registry of subcommands (heavy modules are imported only when their command runs)."""
    from simulmt.bench import command as bench
    from simulmt.evaluation import command as evaluation, options as evaluation_options
    from simulmt.finetune import options as finetuning
    from simulmt.finetune.speech.options import SpeechTrainOptions
    from simulmt.rl import options as rl
    from simulmt.service import server

    return {
        "translate": Command(
            TranslateOptions, _run_translate,
            "translate one sentence per line, simultaneously (a simulated stream per line)",
            "Translate one source sentence per line as a stream: the policy decides when each source word is read "
            "and each target word is written."),
        "demo": Command(DemoOptions, lambda options, _: _run_demo(options),
                        "stream a few English sentences into German and show every read and write"),
        # evaluate / score / bench / finetune: options and run functions live in their modules (light to import;
        # the model, sacrebleu, matplotlib, peft load when the command runs)
        "evaluate": Command(
            evaluation_options.EvaluateOptions,
            lambda options, sub: evaluation.run_evaluate_command(options, sub, _load_translator),
            "translate a test set under a grid of layouts and policies (resumable) and score it",
            "Translate a line-aligned test set with every layout x policy x k (or n) of the grid, plus one offline "
            "run; write per run SimulEval's instances.log, config.json and scores.json, and for the grid "
            "results.md, results.json and bleu_laal.png. Rerunning into the same --output continues."),
        "score": Command(
            evaluation_options.ScoreOptions, evaluation.run_score_command,
            "recompute scores.json of a run (or of every run of a grid) from its instances.log, without the model",
            "Recompute scores.json from instances.log and config.json alone; for a grid directory, rescore every "
            "run under it and rebuild results.md, results.json and bleu_laal.png."),
        "bench": Command(bench.BenchOptions, lambda options, sub: bench.run(options, sub, _load_translator),
                         bench.HELP, bench.DESCRIPTION),
        "serve": Command(server.ServeOptions, lambda options, sub: server.run(options, sub, _load_translator),
                         server.HELP, server.DESCRIPTION),
        "finetune": Command(
            finetuning.FinetuneOptions, _run_finetune,
            "fine-tune a model for simultaneous translation (policy-consistent, ExPosST §2.3; LoRA by default)",
            "Fine-tune a causal LM on sentence pairs laid out as the streaming engine will see them (recipe = layout "
            "+ schedule), save DIR/adapter and DIR/training.json, and evaluate on a dev subset with the streaming "
            "engine. Built on the Hugging Face Trainer: accelerate launch / torchrun / --deepspeed work. EASiST's "
            "speech stages are the recipes speech-align, speech-simul and speech-policy (and the optional cheap "
            "speech-ctc before align), with the options of "
            "`simulmt finetune-speech` (a speech corpus instead of text pairs): `simulmt finetune --recipe "
            "speech-align --corpus manifest.jsonl --adapter DIR` is `simulmt finetune-speech --stage align ...`."),
        "finetune-speech": Command(
            SpeechTrainOptions, lambda options, sub: _run_finetune_speech(options),
            "EASiST's speech stages on a frozen LLM: align the speech adapter, fine-tune it on interleaved chunks, fit "
            "the READ/WRITE policy head (resumable)",
            "Train one stage of the speech model on a speech corpus "
            "(python -m simulmt.finetune.speech.synth corpus ...): --stage ctc (optional: the adapter against the "
            "LLM's token embeddings with CTC, no LLM forward), align "
            "(offline speech -> transcript or translation), simul (interleaved speech and target "
            "chunks), policy (the READ/WRITE head after each block). Stage one, the interleaved text format, is "
            "`simulmt finetune --recipe interleaved`; its adapter is --adapter here. Writes DIR/model, a speech "
            "model folder, and DIR/training.json."),
        "rl": Command(
            rl.RLOptions, _run_rl,
            "sequential policy optimisation (SeqPO-SiMT): GRPO over whole simultaneous translations (resumable)",
            "Sample --group multi-step translations per sentence (source in chunks of --chunk words; the model "
            "decides how much to write at each step), reward quality and latency (fused as in SeqPO-SiMT eq. 2), "
            "and train a LoRA on top of the warm-up adapter with GRPO and a KL penalty to it. Writes DIR/adapter "
            "(one adapter: serve it with --layout seqpo --policy read-n --n CHUNK), log.jsonl and curves.png."),
    }


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="simulmt", description="Simultaneous machine translation with decoder-only language models.")
    parser.add_argument("--version", action="version", version=f"simulmt {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    subparsers = {}
    for name, command in _commands().items():
        sub = commands.add_parser(name, help=command.help, description=command.description or command.help,
                                  formatter_class=_HelpFormatter)
        add_dataclass_arguments(sub, command.options)
        subparsers[name] = sub
    return parser, subparsers


#: EASiST's speech stages as finetune recipes: ``finetune --recipe speech-align ...`` is ``finetune-speech --stage
#: align ...`` (they take finetune-speech's options: a speech corpus, not text pairs)
SPEECH_RECIPES = {"speech-ctc": "ctc", "speech-align": "align", "speech-simul": "simul", "speech-policy": "policy"}


def _route_speech_recipe(argv: list[str]) -> list[str]:
    if not argv or argv[0] != "finetune":
        return argv
    for i, arg in enumerate(argv):
        if arg == "--recipe" and i + 1 < len(argv) and argv[i + 1] in SPEECH_RECIPES:
            return ["finetune-speech", "--stage", SPEECH_RECIPES[argv[i + 1]], *argv[1:i], *argv[i + 2:]]
        if arg.startswith("--recipe=") and arg.split("=", 1)[1] in SPEECH_RECIPES:
            return ["finetune-speech", "--stage", SPEECH_RECIPES[arg.split("=", 1)[1]], *argv[1:i], *argv[i + 1:]]
    return argv


class _Stdout:
    """Standard output as the commands see it: the same stream, except that an ``OSError`` of a write or a flush
    is marked as standard output's (``simulmt translate > /dev/full``), so that :func:`main` can say so."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def _guarded(self, call, *args):
        try:
            return call(*args)
        except OSError as exc:
            exc.simulmt_stdout = True  # type: ignore[attr-defined]
            raise

    def write(self, text: str) -> int:
        return self._guarded(self._stream.write, text)

    def writelines(self, lines) -> None:
        return self._guarded(self._stream.writelines, lines)

    def flush(self) -> None:
        return self._guarded(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """Point standard output at the null device: Python's last flush at exit finds nothing more to fail on."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code. Whatever goes wrong ends in one line on standard error, no traceback: an
    argument error (2), a ``SimulmtError`` (1, said by the command), an ``OSError`` (1: a full disk, standard
    output that cannot be written); a closed pipe (``simulmt translate big.txt | head``) ends quietly (1)."""
    from simulmt.core.execution import tune_collector
    from simulmt.output_dir import os_error_message

    tune_collector()  # (process-wide: the command's process runs the engine)
    saved = sys.stdout
    sys.stdout = _Stdout(saved)  # type: ignore[assignment]
    try:
        try:
            code = _main(argv)
            sys.stdout.flush()  # now, not at exit, where a failure is only "Exception ignored"
            return code
        finally:
            sys.stdout = saved
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader is gone: nobody to tell
        _silence_stdout()
        return 1
    except OSError as exc:
        if getattr(exc, "simulmt_stdout", False):
            _silence_stdout()
            print(f"simulmt: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        else:
            print(f"simulmt: error: {os_error_message(exc)}", file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    parser, subparsers = build_parser()
    try:
        args = parser.parse_args(_route_speech_recipe(list(sys.argv[1:] if argv is None else argv)))
        command, sub = _commands()[args.command], subparsers[args.command]
        try:
            options = dataclass_from_namespace(command.options, args)
        except SimulmtError as exc:
            sub.error(str(exc))
        return command.run(options, sub)
    except SystemExit as exc:  # argparse: --help, --version, argument errors
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
