"""The option fields that several commands share (model, adapter, languages, device, dtype, k, n, slot, phi).

Each function returns a dataclass ``field`` with its default and help, so ``translate``, ``demo``, ``evaluate``,
``bench`` and ``finetune`` describe these options in one place; :func:`simulmt.cli.add_dataclass_arguments`
turns them into arguments.
"""

from __future__ import annotations

from dataclasses import field

from simulmt.adapters import AUTO, PAIRS
from simulmt.models import DEFAULT_MODEL, packaged_model_names
from simulmt.core.stream_options import DEFAULTS as STREAM_DEFAULTS

__all__ = ["adapter_field", "asr_beam_field", "asr_later_step_ms_field", "check_asr_later_step", "asr_pause_ms_field", "asr_policy_field",
           "context_pairs_field", "context_tokens_field", "device_field", "dtype_field", "head_vocabulary_field",
           "threads_field",
           "k_field",
           "language_field", "model_field", "n_field", "phi_field", "slot_field"]

DTYPES = ("auto", "float32", "bfloat16", "float16", "float16-packed")


def model_field():
    return field(default=None, metadata={
        "help": f"packaged short name ({', '.join(packaged_model_names())}), local checkpoint directory or "
                f"Hugging Face hub id; default: {DEFAULT_MODEL}", "metavar": "NAME"})


def adapter_field():
    return field(default=AUTO, metadata={
        "help": f"LoRA adapter: 'auto' uses the one shipped for the model and language pair if there is one "
                f"({', '.join(f'{n}: {a}->{b}' for n, (a, b) in PAIRS.items())}), 'none' the bare model, or a PEFT "
                f"adapter directory",
        "metavar": "auto|none|NAME|DIR"})


def language_field(default: str, side: str):
    return field(default=default, metadata={"help": f"{side} language (code or English name)", "metavar": "LANG"})


def head_vocabulary_field():
    return field(default=None, metadata={
        "help": "text files (comma-separated; one sentence a line, e.g. a training set's target and source sides): "
                "the LM head computes only the tokens they hold and each sentence's own source tokens, not the "
                "model's whole vocabulary (Gemma 3: 262k tokens; 1.3-1.5x faster on a CPU). Changes the output "
                "where the full head would choose another token: docs/engine-speed.md", "metavar": "FILES"})


def threads_field():
    return field(default=None, metadata={
        "help": "torch CPU threads (default: torch's choice, every core); pin them when another job shares the CPU",
        "metavar": "N"})


def device_field():
    return field(default=None, metadata={
        "help": "where the model runs (cpu, cuda, cuda:1, ...); default: cuda when a GPU is visible, else cpu"})


def dtype_field(default: str = "float32"):
    """Commands that measure (evaluate, bench) default to float32, the same numbers on every machine; commands that
    serve a user (translate, demo, serve) default to ``auto``, the fastest measured dtype for the device."""
    return field(default=default, metadata={
        "help": "model weights' dtype: auto = bfloat16 on a GPU with bf16, float16-packed on an x86 CPU, else float32; "
                "float16-packed (CPU) keeps the linear layers' weights in float16 packed for fbgemm, float32 "
                "activations: about half the memory traffic per token, and it batches where a CPU has no native "
                f"bfloat16; default: {default}", "choices": DTYPES})


def k_field():
    return field(default=STREAM_DEFAULTS["k"], metadata={"help": "wait-k: write target word j once k + j - 1 source words are read"})


def tau_field():
    return field(default=STREAM_DEFAULTS["tau"], metadata={"help": "learned: write once the policy head's p(WRITE) reaches tau (0..1)"})


def n_field():
    return field(default=STREAM_DEFAULTS["n"], metadata={"help": "read-n: source words read before each written segment"})


def slot_field():
    return field(default=STREAM_DEFAULTS["slot"], metadata={"help": "expost: length of a source position slot, in tokens"})


def phi_field():
    return field(default=STREAM_DEFAULTS["phi"], metadata={"help": "gpe: first position id of the target group"})


def batch_size_field():
    return field(default=1, metadata={
        "help": "streams advanced together by one model (one forward per round for all of them); the output is "
                "the same as with 1, in input order; in a batched run a word's elapsed time is the time its "
                "stream spent in the engine, sharing each forward with the others", "metavar": "N"})


def context_pairs_field(what: str):
    """``--context-pairs``: earlier sentence pairs of a talk that each sentence sees (simulmt.core.talk)."""
    return field(default=0, metadata={
        "help": f"{what}: each sentence sees up to N earlier pairs of the talk as context (0: none; the shipped "
                f"adapters were trained without it; an adapter trained with it: finetune --context-pairs)",
        "metavar": "N"})


def context_tokens_field():
    return field(default=384, metadata={
        "help": "with --context-pairs: at most this many context tokens (the oldest pairs go first)", "metavar": "N"})


def asr_pause_ms_field(flag: str):
    """The recogniser's voice-activity pause (``RecognizerOptions.pause_ms``); ``flag``: the option it goes with."""
    from simulmt.speech.recognizer import DEFAULT_PAUSE_MS

    return field(default=DEFAULT_PAUSE_MS, metadata={
        "help": f"{flag}a silence this long after speech (silero VAD) is a pause: the words before it are final at "
                "once and the sentence ends there, without waiting for the next word; silence alone is not "
                "transcribed (0: off)", "metavar": "MS"})


def check_asr_later_step(step_ms: int, later_step_ms: int) -> None:
    """``--asr-later-step-ms`` against ``--asr-step-ms``: 0 (off), or from the step to the buffer's trim length
    (``speech.loading``'s recogniser: ``trim_ms`` at least 12,000 ms)."""
    from simulmt.errors import SimulmtError
    from simulmt.speech.loading import trim_ms_for

    if later_step_ms and not step_ms <= later_step_ms <= trim_ms_for(step_ms):
        raise SimulmtError(f"--asr-later-step-ms must be 0 (off) or within {step_ms}..{trim_ms_for(step_ms)} ms (from "
                           f"--asr-step-ms to the recogniser's buffer length), got {later_step_ms}")


def asr_later_step_ms_field(flag: str):
    """The recogniser's step once a sentence's first words are confirmed (``RecognizerOptions.later_step_ms``)."""
    return field(default=0, metadata={
        "help": f"{flag}once a sentence's first three words are confirmed, transcribe again only after this much new "
                "audio, until the next sentence begins or a pause (0: always --asr-step-ms): a quarter fewer "
                "transcripts, a sentence's first words as soon (after a pause), later words later "
                "(docs/speech-recogniser.md)", "metavar": "MS"})


def asr_policy_field(flag: str):
    """Which words the recogniser makes final (``RecognizerOptions.policy``)."""
    from simulmt.speech.recognizer import DEFAULT_POLICY, POLICIES

    return field(default=DEFAULT_POLICY, metadata={
        "help": f"{flag}which words the recogniser makes final: local-agreement (two transcripts agree on them) or "
                "alignatt (Whisper's cross-attention aligns them before the audio's last half second: sooner, from "
                "one transcript)", "choices": POLICIES})


def asr_beam_field(flag: str):
    """The recogniser decoder's beam (``RecognizerOptions.beam_size``)."""
    return field(default=1, metadata={
        "help": f"{flag}the recogniser's beam size (1: greedy, the fastest; 5 makes a tenth to a seventh fewer "
                "recognition errors on unfamiliar voices for about a sixth more recogniser compute, with no BLEU "
                "gain measured over 300 lines: docs/speech-recogniser.md)", "metavar": "N"})
