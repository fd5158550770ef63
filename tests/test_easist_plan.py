"""benchmarks/easist.py's plan: the --schedule switch reaches the text and speech-simul stages' commands."""

from __future__ import annotations

import pytest

from helpers import load_benchmark


def _commands(easist, **plan):
    return {stage.name: stage.command for stage in easist.stages(easist.Plan(**plan))}


def test_schedule_mixed_and_read_n_reach_the_text_and_speech_stages():
    easist = load_benchmark("easist")
    mixed, read_n = _commands(easist), _commands(easist, schedule="read-n")
    text = mixed["text"]
    assert text[text.index("--policy") + 1] == "mixed" and "--k-mix" in text and "--k-mix" in mixed["speech-simul"]
    text = read_n["text"]
    assert text[text.index("--policy") + 1] == "read-n" and "--n-mix" in text
    assert "--k-mix" not in text and "--k-mix" not in read_n["speech-simul"]  # speech: read-n without a k-mix


def test_an_unknown_schedule_is_refused():
    with pytest.raises(SystemExit, match="mixed or read-n"):
        _commands(load_benchmark("easist"), schedule="wait-k")


def test_the_page_is_named_after_the_results_folder(tmp_path):
    easist = load_benchmark("easist")
    page = easist.write_page(easist.Plan(results=str(tmp_path / "easist-readn"), schedule="read-n"))
    assert page == tmp_path / "easist-readn.md" and '"schedule": "read-n"' in page.read_text()
