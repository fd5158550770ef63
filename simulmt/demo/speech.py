"""``simulmt demo --audio [--speech-model DIR]``: speech arrives piece by piece, words appear as they are written.

The audio is a few sentences spoken by espeak-ng when it is installed (simulmt.finetune.speech.synth), else the short
sample the package ships. Each READ shows the piece taken in (its audio time), HEARD the words the recogniser
confirmed (or, for an end-to-end model that reads the words its CTC head spells, the words that block completed); each WRITE the word and the audio time it was written at;
a summary gives the compute per second of audio.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TextIO

import numpy as np

SENTENCES = ("A man is riding a bike in the park.", "Two dogs are playing in the snow.")
SAMPLE = Path(__file__).resolve().parents[1] / "speech" / "samples" / "a_man_rides_a_bike.wav"  # package data


def demo_audio() -> list[tuple[str, np.ndarray]]:
    """(what is said, 16 kHz int16 audio) of each utterance: synthesised, or the shipped sample."""
    if shutil.which("espeak-ng") and shutil.which("sox"):
        from simulmt.finetune.speech.synth import synthesise_sentence

        return [(s, synthesise_sentence(s.split(), seed=i)[0]) for i, s in enumerate(SENTENCES)]
    from simulmt.speech.wav import read_wav

    return [("A man is riding a bike in the park. (shipped sample)", read_wav(SAMPLE)[0])]


def run_speech_demo(speech, *, layout: str = "interleaved", policy: str = "wait-k", k: int = 3, tau: float = 0.5,
                    out: TextIO | None = None) -> int:
    out = out or sys.stdout
    said = f"wait-{k} in {speech.unit}" if policy == "wait-k" else f"{policy}, tau {tau}"
    print(f"speech: {speech.name}; pieces of {speech.piece_ms:.0f} ms; layout {layout}, policy {said}\n", file=out)
    for text, audio in demo_audio():
        print(f"[audio] {text}  ({len(audio) / 16000:.2f} s)", file=out)
        session = speech.session(layout, policy, k=k, tau=tau)
        step = int(16 * speech.piece_ms)
        pieces = [audio[i:i + step] for i in range(0, len(audio), step)]
        heard = 0
        for i, piece in enumerate(pieces):
            words = list(session.push_audio(piece))
            if i == len(pieces) - 1:  # the end of the audio: the last (shorter) piece and the last words
                words += list(session.finish())
            print(f"  READ  audio up to {min((i + 1) * speech.piece_ms, len(audio) / 16):6.0f} ms", file=out)
            if len(session.heard_words()) > heard:  # what the recogniser confirmed (or a CTC head spelled)
                print(f"  HEARD {' '.join(session.heard_words()[heard:])}", file=out)
                heard = len(session.heard_words())
            for word in words:
                print(f"  WRITE {word.text:<24} (at {session.delay_ms(word):6.0f} ms of audio)", file=out)
        result = session.result()
        print(f"  -> {result.prediction}\n  ({result.encoder_ms / (result.duration_ms / 1000):.0f} ms of "
              f"recogniser/encoder per audio second; wall {result.wall_ms:.0f} ms for {result.duration_ms:.0f} ms of "
              f"audio)\n", file=out)
    return 0
