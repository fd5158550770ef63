"""Shared test helpers: tiny translators and the teacher-forced parity check."""

from __future__ import annotations

import copy
import functools

from simulmt.core.placed import Role
from simulmt.finetune.parity import ParityRun, forced_tokens, teacher_forced_parity  # noqa: F401 (for the tests)
from simulmt.translator import Translator
from tiny_models import make_model, make_tokenizer

# 12 source words, 11 target words; many words are several tokens with the tiny tokenizer.
SOURCE = "The weather is nice today and the children play in the garden"
TARGET = "Das Wetter ist heute schön und die Kinder spielen im Garten"


@functools.lru_cache(maxsize=None)
def tiny_translator(arch: str = "llama", chat: bool = True) -> Translator:
    tok = make_tokenizer(chat=chat)
    return Translator(make_model(arch, len(tok)), tok, name=f"tiny-{arch}")


@functools.lru_cache(maxsize=None)
def tiny_interleaved_translator(arch: str = "llama", two_markers: bool = False) -> Translator:
    """A tiny translator whose tokenizer and model have the interleaved layout's marker tokens (``two_markers``:
    only end-of-read and end-of-write, as adapters trained before end-of-translation)."""
    from simulmt.core.markers import MARKERS, MARKERS_V1, add_interleaved_markers

    tok = copy.deepcopy(make_tokenizer(chat=True))  # the shared tokenizer must not get the markers
    model = make_model(arch, len(tok))
    add_interleaved_markers(model, tok, MARKERS_V1 if two_markers else MARKERS)
    return Translator(model, tok, name=f"tiny-{arch}-interleaved" + ("-v1" if two_markers else ""))


def positions_of_targets(tokens) -> list[int]:
    return [t.position for t in tokens if t.role is Role.TARGET]




def save_tiny_model(folder, arch: str = "llama"):
    """A tiny random model and its chat tokenizer saved as a checkpoint directory (for subprocesses and scripts that
    load a model by path); returns the directory."""
    from pathlib import Path

    folder = Path(folder)
    tok = make_tokenizer(chat=True)
    make_model(arch, len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def write_test_set(folder, sources: list[str], references: list[str]):
    """Line-aligned source and reference files in ``folder``; returns their paths."""
    from pathlib import Path

    folder = Path(folder)
    (folder / "src.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (folder / "ref.de").write_text("\n".join(references) + "\n", encoding="utf-8")
    return folder / "src.en", folder / "ref.de"


def load_benchmark(name: str):
    """A script under benchmarks/ imported as a module (registered in sys.modules: dataclasses look it up)."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def through_simuleval_agent(agent, audio, segment_ms: int = 320) -> tuple[list[str], list[float]]:
    """Feed ``audio`` (16 kHz floats) to a SimulEval speech agent in segments of ``segment_ms``, as SimulEval does:
    the words it wrote, and for each the ms of audio sent when it was written."""
    from simuleval.data.segments import SpeechSegment

    step, written, sent = 16 * segment_ms, [], []
    for start in range(0, len(audio), step):
        finished = start + step >= len(audio)
        out = agent.pushpop(SpeechSegment(content=audio[start:start + step].tolist(), sample_rate=16000,
                                          finished=finished))
        if not out.is_empty:
            words = out.content.split()
            written += words
            sent += [min(len(audio), start + step) / 16] * len(words)
        if finished:
            break
    return written, sent


def run_interleaved_alone(tr, jobs) -> list:
    """(text, policy) jobs each as a session of the interleaved layout on its own; returns the sessions (recorded)."""
    from simulmt.core.layouts import Interleaved

    sessions = []
    for text, policy in jobs:
        session = tr.session(Interleaved(), policy, record=True)
        session.run(text)
        sessions.append(session)
    return sessions


def run_interleaved_batched(tr, jobs, batch_size: int = 4) -> list:
    """(text, policy) jobs as streams of the interleaved layout, run on one engine; returns the streams (recorded)."""
    from simulmt.core.engine import Engine, run_batched
    from simulmt.core.layouts import Interleaved

    streams = []
    for text, policy in jobs:
        stream = tr.new_stream(Interleaved(), policy, record=True)
        stream.push(text.split(), finished=True)
        streams.append(stream)
    return run_batched(streams, Engine(tr.runner), batch_size=batch_size)
