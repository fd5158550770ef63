"""``simulmt bench --audio``: what streaming speech translation costs, measured in one run with a real model.

For every utterance (a recording: ``wav.read_audio``), one warm-up run first, then:

* **offline**: read every block, then write (the interleaved layout with the offline policy);
* every **configuration** (wait-k over blocks, or over spelled words, the learned policy at a threshold), freely,
  as it would stream, fed one block of audio at a time;
* every configuration's own output **replayed through offline decoding** (teacher forced: the same target
  tokens after every block), so the cost of streaming is separated from differences in output.

Per configuration, as totals over the same utterances:

* ``encoder_ms_per_audio_s``: log-mel features + Whisper encoder + speech adapter (+ the CTC head of a model that
  reads spelled words), ms per second of audio;
* ``llm_ms_per_token``: the rest of the wall time (feeding the speech embeddings, writing, deciding) per target
  token, and ``same_output``: that figure over the offline replay's; ``same_output_all_compute``: the same ratio of
  all compute (encoder and LLM) per target token, as EASiST counts its 28.95 vs 23.25 ms per token;
* ``forwards_per_token``: LLM forward calls per target token (and the replay's): the READs between target words
  cost forwards that offline decoding does not have (stream.py's guesses save some of them);
* ``rtf``: the real-time factor, wall seconds of compute per second of audio (below 1: keeps up with live audio).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from simulmt.core.placed import Role
from simulmt.core.policies import Offline
from simulmt.errors import SimulmtError


@dataclass(frozen=True)
class SpeechRun:
    """One utterance decoded once: audio length, compute spent, tokens written, output."""

    audio_ms: float
    wall_ms: float
    encoder_ms: float  # features + encoder + adapter
    target_tokens: int
    prediction: str
    forward_calls: int = 0

    @property
    def llm_ms(self) -> float:
        return self.wall_ms - self.encoder_ms


@dataclass
class SpeechConfigurationResult:
    name: str
    runs: list[SpeechRun] = field(default_factory=list)
    same_output: list[SpeechRun] = field(default_factory=list)

    def summary(self) -> dict:
        audio_s = sum(r.audio_ms for r in self.runs) / 1000
        tokens = sum(r.target_tokens for r in self.runs)
        out = {"utterances": len(self.runs), "audio_s": round(audio_s, 3), "target_tokens": tokens,
               "rtf": round(sum(r.wall_ms for r in self.runs) / 1000 / audio_s, 4),
               "encoder_ms_per_audio_s": round(sum(r.encoder_ms for r in self.runs) / audio_s, 2),
               "llm_ms_per_token": round(sum(r.llm_ms for r in self.runs) / max(1, tokens), 2),
               "forwards_per_token": round(sum(r.forward_calls for r in self.runs) / max(1, tokens), 3)}
        replay_tokens = sum(r.target_tokens for r in self.same_output)
        if self.same_output and replay_tokens:
            replay = sum(r.llm_ms for r in self.same_output) / replay_tokens
            out["offline_replay_llm_ms_per_token"] = round(replay, 2)
            out["offline_replay_forwards_per_token"] = round(
                sum(r.forward_calls for r in self.same_output) / replay_tokens, 3)
            out["same_output"] = round(out["llm_ms_per_token"] / replay, 3) if replay > 0 else None
            everything = sum(r.wall_ms for r in self.same_output)
            out["same_output_all_compute"] = (round(sum(r.wall_ms for r in self.runs) / tokens * replay_tokens
                                                    / everything, 3) if everything > 0 and tokens else None)
        return out


def measure(speech, audio: np.ndarray, layout: str, policy, **session_kwargs) -> tuple[SpeechRun, object]:
    """Translate one utterance fed piece by piece (a block, or a recogniser step), timed; returns the run and its
    session (for a replay)."""
    session = speech.session(layout, policy, **session_kwargs)
    step = int(16 * speech.piece_ms)
    start = time.perf_counter()
    for offset in range(0, len(audio), step):
        for _ in session.push_audio(audio[offset:offset + step]):
            pass
    for _ in session.finish():
        pass
    wall = (time.perf_counter() - start) * 1000
    result = session.result()
    if result.error:
        raise SimulmtError(result.error)
    tokens = session.target_tokens()
    return SpeechRun(result.duration_ms, round(wall, 3), result.encoder_ms + result.adapter_ms, tokens,
                     result.prediction, result.forward_calls), session


def replay_offline(speech, audio: np.ndarray, streamed) -> SpeechRun:
    """The streamed output teacher forced through offline decoding of the same audio (every block, then write)."""
    forced = [(t.token_id, t.unit) for t in streamed.text.state.tokens if t.role is Role.TARGET]
    forced.append((speech.translator.fmt.end_id, -1))
    run, _ = measure(speech, audio, "interleaved", Offline(), forced=forced)
    if run.prediction.split() != streamed.result().prediction.split():
        raise SimulmtError(f"the offline replay wrote {run.prediction!r}, not the streamed output "
                           f"{streamed.result().prediction!r}: teacher forcing is broken")
    return run


def speech_benchmark(speech, clips: list[tuple[str, np.ndarray]], configurations: list[tuple[str, object, dict]],
                     progress: Callable[[int], None] | None = None, layout: str = "interleaved",
                     replay: bool = True) -> dict:
    """``configurations``: (name, policy, session kwargs) to stream in ``layout``; offline is always measured first.
    ``replay``: also replay each output through offline decoding (an end-to-end speech model; the recogniser
    cascade's sentences are not replayed). Returns {"settings", "utterances", "results": {name: summary}} (totals
    over the same utterances)."""
    if not clips:
        raise SimulmtError("no audio to benchmark")
    measure(speech, min((c for _, c in clips), key=len), layout, Offline())  # warm-up
    results = [SpeechConfigurationResult("offline")] + [SpeechConfigurationResult(name) for name, _, _ in configurations]
    for _, audio in clips:
        offline, _ = measure(speech, audio, layout, Offline())
        results[0].runs.append(offline)
        results[0].same_output.append(offline)
        streamed = [measure(speech, audio, layout, policy, **kwargs) for _, policy, kwargs in configurations]
        for result, (run, session) in zip(results[1:], streamed):
            result.runs.append(run)
            if replay:
                result.same_output.append(replay_offline(speech, audio, session))
        if progress is not None:
            progress(1)
    return {"utterances": [{"name": name, "audio_ms": round(len(a) / 16, 1)} for name, a in clips],
            "results": {r.name: r.summary() for r in results},
            "runs": {r.name: [asdict(x) for x in r.runs] for r in results}}


def print_report(bench: dict, out: TextIO) -> None:
    settings = bench["settings"]
    print(f"{len(bench['utterances'])} utterances, {next(iter(bench['results'].values()))['audio_s']:.1f} s of audio; "
          f"{settings['model']}, {settings['dtype']}, {settings['threads']} threads, pieces of "
          f"{settings['block_ms']} ms", file=out)
    print("| configuration | RTF | encoder+adapter ms / audio s | LLM ms / target token | LLM forwards / target "
          "token | vs offline, same output: LLM | all compute |", file=out)
    print("|---|---:|---:|---:|---:|---:|---:|", file=out)
    for name, s in bench["results"].items():
        ratios = [("1.00x" if name == "offline" else (f"{s[key]:.2f}x" if s.get(key) else "-"))
                  for key in ("same_output", "same_output_all_compute")]
        print(f"| {name} | {s['rtf']:.3f} | {s['encoder_ms_per_audio_s']:.1f} | {s['llm_ms_per_token']:.1f} | "
              f"{s['forwards_per_token']:.2f} | {ratios[0]} | {ratios[1]} |", file=out)
    learned = [s for name, s in bench["results"].items() if name.startswith("learned")]
    if len(learned) > 1 and all(s.get("same_output_all_compute") for s in learned):
        mean = {key: sum(s[key] for s in learned) / len(learned)
                for key in ("rtf", "encoder_ms_per_audio_s", "llm_ms_per_token", "forwards_per_token", "same_output",
                            "same_output_all_compute")}
        print(f"| learned, mean of {len(learned)} thresholds (EASiST's figure) | {mean['rtf']:.3f} | "
              f"{mean['encoder_ms_per_audio_s']:.1f} | {mean['llm_ms_per_token']:.1f} | "
              f"{mean['forwards_per_token']:.2f} | {mean['same_output']:.2f}x | "
              f"{mean['same_output_all_compute']:.2f}x |", file=out)


def audio_files(path: str) -> list[Path]:
    """A recording (by its extension: ``wav.AUDIO_SUFFIXES``), or a list of recordings: one path per line, relative
    to the list's folder, read as ``evaluate --source-audio`` reads its list (``text_input``'s rule)."""
    from simulmt.speech.wav import AUDIO_SUFFIXES
    from simulmt.text.text_input import require_text, split_lines

    p = Path(path)
    if not p.is_file():
        raise SimulmtError(f"--audio: not found: {path}")
    if p.suffix.lower() in AUDIO_SUFFIXES:
        return [p]
    p = p.resolve()
    lines = require_text(split_lines(p.read_bytes()), f"the --audio list {path} (or a recording: its extension "
                                                      f"should be one of {', '.join(sorted(AUDIO_SUFFIXES))})")
    files = [(p.parent / line.strip()) for line in lines if line.strip()]
    if not files:
        raise SimulmtError(f"--audio {path}: the list names no audio file")
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise SimulmtError(f"--audio {path}: {len(missing)} file(s) not found, e.g. {missing[0]}")
    return files


def write_outputs(bench: dict, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bench-speech.json"
    path.write_text(json.dumps(bench, indent=2) + "\n")
    return path
