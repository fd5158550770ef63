"""``simulmt translate --audio FILE [--speech-model DIR]``: words appear as the audio plays, with their audio time.

The WAV file is fed to a speech session (the recogniser cascade, ``cascade.py``, or an end-to-end speech model) in
pieces of one recogniser step (or one encoder block), as a live stream would arrive; each written word is printed
with the audio time it was written at (the delay: when the last source word read before it was confirmed; for an
end-to-end model, when its last block read was available) and the wall time spent so far.
``--jsonl`` prints one JSON object for the file: the prediction, delays in source units (blocks or spelled words,
``unit``) and in ms, the compute (encoder, adapter, LLM), the audio's duration, and what a CTC head spelled
(``heard``).
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from simulmt.speech.wav import read_audio


def translate_audio(speech, path: str, session_kwargs: dict, jsonl: bool, out: TextIO | None = None) -> int:
    out = out or sys.stdout  # looked up now: a default bound at import would keep a replaced stdout
    audio = read_audio(path)
    session = speech.session(**session_kwargs)
    step = int(16 * speech.piece_ms)  # pieces of one block (EASiST) or one recogniser step, as live audio comes

    def show(words) -> None:
        for word in words:
            if not jsonl:
                print(f"[{session.delay_ms(word) / 1000:6.2f} s audio | {word.elapsed_ms / 1000:6.2f} s wall] "
                      f"{word.text}", file=out, flush=True)

    for start in range(0, len(audio), step):
        show(session.push_audio(audio[start:start + step]))
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
