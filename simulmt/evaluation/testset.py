"""The test set: line-aligned sources (text, or a list of recordings) and references, stripped as SimulEval reads
them, with the SHA-256 of each file (a run directory records them)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from simulmt.errors import SimulmtError
from simulmt.text.text_input import require_text, split_lines


@dataclass(frozen=True)
class TestSet:
    source_path: Path
    reference_path: Path
    sources: list[str]
    references: list[str]
    source_sha256: str
    reference_sha256: str


def _read_lines(path: Path, what: str) -> tuple[list[str], str]:
    """The stripped lines of a file (simulmt.text.text_input's rule; a line that is not UTF-8 is an error naming the
    file and the line) and the SHA-256 of its bytes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SimulmtError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    lines = require_text(split_lines(data), f"the {what} file {path}")
    return [line.strip() for line in lines], hashlib.sha256(data).hexdigest()


def _paired_lines(source: str | Path, reference: str | Path, lines: int | None, what: str) -> TestSet:
    """Line-aligned ``what`` lines (the source text, or a list of audio files) and references; the first
    ``lines``."""
    source_path, reference_path = Path(source).resolve(), Path(reference).resolve()
    sources, source_hash = _read_lines(source_path, what)
    references, reference_hash = _read_lines(reference_path, "reference")
    if len(sources) != len(references):
        raise SimulmtError(f"{what} and reference are not line-aligned: {source_path} has {len(sources)} lines, "
                           f"{reference_path} has {len(references)}")
    if not sources:
        raise SimulmtError(f"the {what} file {source_path} is empty")
    if lines is not None:
        if lines > len(sources):
            raise SimulmtError(f"--lines {lines} asks for more lines than the test set has ({len(sources)})")
        sources, references = sources[:lines], references[:lines]
    return TestSet(source_path, reference_path, sources, references, source_hash, reference_hash)


def read_audio_test_set(audio_list: str | Path, reference: str | Path, lines: int | None = None) -> TestSet:
    """A list of recordings (one path per line, relative to the list's folder) and the line-aligned references;
    every file is checked to exist before anything runs."""
    from simulmt.speech.wav import AUDIO_SUFFIXES

    if Path(audio_list).suffix.lower() in AUDIO_SUFFIXES:
        raise SimulmtError(f"--source-audio takes a list of recordings, one path per line (line-aligned with the "
                           f"references), not a recording: {audio_list} (for one file: simulmt translate --audio)")
    test_set = _paired_lines(audio_list, reference, lines, "audio list")
    paths = [str((test_set.source_path.parent / e).resolve()) for e in test_set.sources]
    missing = [(i, p) for i, p in enumerate(paths, 1) if not Path(p).is_file()]
    if missing:
        raise SimulmtError(f"{len(missing)} audio file(s) of {test_set.source_path} not found, e.g. line "
                           f"{missing[0][0]}: {missing[0][1]}")
    return replace(test_set, sources=paths)


def read_test_set(source: str | Path, reference: str | Path, lines: int | None = None,
                  max_words: int | None = None) -> TestSet:
    """Line-aligned source and reference (stripped, as SimulEval reads them); the first ``lines`` of each. A source
    line of more than ``max_words`` words is refused at once: evaluation scores one sentence per line, and a talk
    on one line would run for hours before it ran out of context."""
    test_set = _paired_lines(source, reference, lines, "source")
    source_path, sources = test_set.source_path, test_set.sources
    if max_words is not None:
        for number, text in enumerate(sources, 1):
            if len(text.split()) > max_words:
                raise SimulmtError(f"line {number} of {source_path} has {len(text.split())} words, more than "
                                   f"--max-words {max_words}: evaluation scores one sentence per line (as SimulEval "
                                   f"does); split the line into sentences, or raise --max-words")
    return test_set
