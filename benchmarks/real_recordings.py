"""People's voices for the speech benchmarks, from the test data of two packages on PyPI.

The speech tables elsewhere use synthesised voices (espeak-ng, flite). Recordings of people with transcripts are
few where only package registries can be reached; two source packages carry some in their tests:

* pocketsphinx 5.1.1 (BSD): five sentences of a LibriVox reading of *Sense and Sensibility* (public domain; one
  reader, 24.7 s) with their transcripts, five short card names said by another speaker ("eight of spades four of
  clubs seven of hearts") and "go forward ten meters" (the test suite's expected words);
* pyannote.audio 4.0.7 (MIT): fifteen 30 s pieces of conversations with several speakers (meetings and telephone
  calls, no transcripts), joined here into one 7.5-minute recording for the long-audio run.

This script downloads the two source archives from PyPI into the cache (once), takes those files out and writes:

* ``sentences.list``: ``audio<TAB>transcript`` lines (the transcripts cased and punctuated as written, the same
  words as the packages') for ``benchmarks/speech_voices.py --recordings`` (no German
  references: BLEU there is against the text translation of the transcripts);
* ``conversations.wav``: the joined conversations, for ``simulmt translate --audio`` (RTF, memory, what it says).

    python benchmarks/real_recordings.py          # prints the folder
    python benchmarks/speech_voices.py --recordings ~/.cache/simulmt/real/sentences.list --pause-ms 700 --threads 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("SIMULMT_CACHE", Path.home() / ".cache" / "simulmt")) / "real"
# (package, version): their source archives on PyPI (checked against PyPI's sha256)
POCKETSPHINX = ("pocketsphinx", "5.1.1")
PYANNOTE = ("pyannote.audio", "4.0.7")
GO_FORWARD = "go forward ten meters"  # pocketsphinx's tests expect these words for goforward.raw
# The transcripts as a writer would put them (the packages' are lower case without punctuation, and the text
# translator should get what a person types): the same words, checked below.
WRITTEN = {
    "sense_and_sensibility_01_austen_64kb-0870": "And Mr. John Dashwood had then leisure to consider how much there "
                                                 "might be prudently in his power to do for them.",
    "sense_and_sensibility_01_austen_64kb-0880": "He was not an ill-disposed young man,",
    "sense_and_sensibility_01_austen_64kb-0890": "unless to be rather cold-hearted and rather selfish is to be "
                                                 "ill-disposed.",
    "sense_and_sensibility_01_austen_64kb-0920": "Had he married a more, a amiable woman, he might have been made "
                                                 "still more respectable than he was.",
    "sense_and_sensibility_01_austen_64kb-0930": "He might even have been made amiable himself.",
    "001": "Ten of clubs.", "002": "Four, queen of clubs.", "003": "Seven of clubs.", "004": "Five, five.",
    "005": "Eight of spades, four of clubs, seven of hearts.",
    "goforward": "Go forward ten meters.",
}


def source_archive(package: str, version: str) -> Path:
    """The package's source archive from PyPI, downloaded into the cache once."""
    with urllib.request.urlopen(f"https://pypi.org/pypi/{package}/json", timeout=60) as reply:
        files = json.load(reply)["releases"].get(version, [])
    sdist = next((f for f in files if f["packagetype"] == "sdist"), None)
    if sdist is None:
        raise SystemExit(f"{package} {version} has no source archive on PyPI")
    path = CACHE / "archives" / sdist["filename"]
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"downloading {sdist['url']}", file=sys.stderr, flush=True)
        with urllib.request.urlopen(sdist["url"], timeout=600) as reply:
            data = reply.read()
        digest = sdist.get("digests", {}).get("sha256")
        if digest and hashlib.sha256(data).hexdigest() != digest:
            raise SystemExit(f"{sdist['filename']}: checksum does not match PyPI's")
        path.write_bytes(data)
    return path


def write_wav(path: Path, samples: np.ndarray) -> None:
    import wave

    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(samples.astype("<i2").tobytes())


def transcripts(text: str) -> dict[str, str]:
    """Sphinx's ``<s> words </s> (id)`` lines -> {id: words}."""
    out = {}
    for line in text.splitlines():
        if "(" in line:
            words, name = line.rsplit("(", 1)
            out[name.strip(" )")] = " ".join(w for w in words.split() if w not in ("<s>", "</s>"))
    return out


def written(name: str, words: str) -> str:
    """The written form of a recording's transcript, which must say the same words."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from speech_voices import spoken_words

    text = WRITTEN.get(name)
    if text is None or spoken_words(text) != spoken_words(words):
        raise SystemExit(f"{name}: the package's transcript {words!r} is not the written one here ({text!r})")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default=str(CACHE), help="where the recordings and lists go")
    args = parser.parse_args()
    from simulmt.speech.wav import read_audio

    out = Path(args.output)
    lines = []
    with tarfile.open(source_archive(*POCKETSPHINX)) as archive:
        root = f"pocketsphinx-{POCKETSPHINX[1]}/test/data"

        def member(name: str) -> bytes:
            return archive.extractfile(f"{root}/{name}").read()

        for folder, listing in (("librivox", "librivox/transcription"), ("cards", "cards/cards.transcription")):
            for name, words in transcripts(member(listing).decode()).items():
                path = out / folder / f"{name}.wav"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(member(f"{folder}/{name}.wav"))
                lines.append(f"{folder}/{name}.wav\t{written(name, words)}")
        write_wav(out / "goforward" / "goforward.wav", np.frombuffer(member("goforward.raw"), dtype="<i2"))
        lines.append(f"goforward/goforward.wav\t{written('goforward', GO_FORWARD)}")
    (out / "sentences.list").write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    pieces = []
    with tarfile.open(source_archive(*PYANNOTE)) as archive:
        names = sorted(m.name for m in archive.getmembers()  # (empty.wav is one second of silence)
                       if m.name.endswith(".wav") and ("/tests/data/" in m.name or "/sample/" in m.name)
                       and not m.name.endswith("empty.wav"))
        for name in names:
            piece = out / "pyannote" / Path(name).name
            piece.parent.mkdir(parents=True, exist_ok=True)
            piece.write_bytes(archive.extractfile(name).read())
            pieces.append(read_audio(str(piece)))
    write_wav(out / "conversations.wav", np.concatenate(pieces))
    seconds = sum(len(p) for p in pieces) / 16000
    print(f"{len(lines)} sentences in {out / 'sentences.list'}; {len(pieces)} conversation pieces, {seconds:.0f} s, in "
          f"{out / 'conversations.wav'}", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
