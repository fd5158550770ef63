"""benchmarks/easist.py end to end on tiny models (a tiny LLM, a tiny Whisper encoder in CTranslate2's format) and
a tiny stand-in for ../shared/data: every stage runs as the command it lists, the page is written, a rerun redoes
nothing."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from helpers import load_benchmark, save_tiny_model
from test_whisper_ct2 import write_model

EN = ["A man rides a bike.", "Two dogs play in the park.", "The girl is reading a book outside.",
      "A woman sings on a stage.", "Children run on the beach.", "An old man sits on a bench.",
      "A cat sleeps in the sun.", "Three boys play football.", "A dog jumps into the water.",
      "People walk down a busy street.", "A chef cooks in a kitchen.", "Two girls ride horses."]
DE = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Park.", "Das Mädchen liest draußen ein Buch.",
      "Eine Frau singt auf einer Bühne.", "Kinder laufen am Strand.", "Ein alter Mann sitzt auf einer Bank.",
      "Eine Katze schläft in der Sonne.", "Drei Jungen spielen Fußball.", "Ein Hund springt ins Wasser.",
      "Leute gehen eine belebte Straße entlang.", "Ein Koch kocht in einer Küche.", "Zwei Mädchen reiten Pferde."]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif((shutil.which("espeak-ng") is None or shutil.which("sox") is None)
                                 and not os.environ.get("CI"),
                                 reason="needs espeak-ng and sox (apt-get install espeak-ng sox)")]


def load_script():
    return load_benchmark("easist")


def test_easist_runs_every_stage_writes_the_page_and_resumes(tmp_path):
    easist = load_script()
    data = tmp_path / "data" / "multi30k"
    data.mkdir(parents=True)
    for stem, (en, de) in {"train": (EN, DE), "test2016": (EN[::-1], DE[::-1])}.items():
        (data / f"{stem}.en").write_text("\n".join(en) + "\n")
        (data / f"{stem}.de").write_text("\n".join(de) + "\n")
    torch.manual_seed(0)
    encoder = WhisperEncoder(WhisperConfig(d_model=16, encoder_layers=1, encoder_attention_heads=2,
                                           encoder_ffn_dim=32, num_mel_bins=80, max_source_positions=1500)).eval()
    write_model(tmp_path / "encoder", encoder)
    args = ["--data", str(tmp_path / "data"), "--work", str(tmp_path / "work"), "--results",
            str(tmp_path / "docs" / "easist"), "--model", str(save_tiny_model(tmp_path / "model")),
            "--start-adapter", "", "--compare-adapter", "", "--text-first", "1", "--text-pairs", "8",
            "--head-pairs", "4", "--test-lines", "3", "--ks", "1,3", "--taus", "0.5", "--speech-pairs", "3",
            "--speech-test-lines", "2", "--encoder", str(tmp_path / "encoder"), "--adapter-hidden", "16",
            "--align-steps", "2", "--simul-steps", "2", "--policy-utterances", "3", "--speech-ks", "2",
            "--eval-batch", "2", "--batch-size", "2", "--grad-accum", "1", "--threads", "1"]
    assert easist.main(args) == 0
    results = tmp_path / "docs" / "easist"
    log = [json.loads(line) for line in (results / "stages.jsonl").read_text().splitlines()]
    assert [s["stage"] for s in log] == ["text", "head", "text-eval", "speech-data", "speech-test-data",
                                         "speech-align", "speech-simul", "speech-policy", "speech-eval",
                                         "speech-bench", "speech-vs-text"]
    assert all(s["returncode"] == 0 and s["cpu_seconds"] > 0 for s in log)
    assert log[0]["command"].startswith(".venv/bin/simulmt finetune ") and "--policy mixed" in log[0]["command"]
    text = json.loads((results / "eval-text" / "results.json").read_text())
    speech = json.loads((results / "eval-speech" / "results.json").read_text())
    assert [r["run"] for r in text["runs"]] == ["interleaved.wait-1", "interleaved.wait-3", "interleaved.learned-0.5"]
    assert [r["run"] for r in speech["runs"]] == ["interleaved.wait-2", "interleaved.learned-0.5"]  # wait-2 blocks
    card = json.loads((results / "training" / "text.json").read_text())
    assert card["recipe"].startswith("interleaved (mixed: wait-k mix 1,2,3,5,7 + read-n mix 1,2,3,4")
    page = (tmp_path / "docs" / "easist.md").read_text()
    for heading in ("## Text: the new interleaved adapter", "## Speech: the speech model", "## Speech against text",
                    "## Speech compute", "## Training", "## Commands, as run"):
        assert heading in page
    assert "Not run yet" not in page and "on the same lines" not in page  # no adapter to compare with
    assert easist.main(args) == 0  # everything is done: nothing runs again
    assert len((results / "stages.jsonl").read_text().splitlines()) == len(log)
