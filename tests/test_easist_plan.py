"""benchmarks/easist.py's plan: the --schedule switch reaches the text and speech-simul stages' commands; --speech-first
and --ctc-steps shape the speech stages."""

from __future__ import annotations

import json

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


def test_the_spoken_corpus_takes_its_own_lines_with_speech_first(tmp_path):
    """--speech-first N: the speech corpus speaks Multi30k train lines N.. (more than the text stage has); without
    it, the text stage's lines, as before. A work folder made before the option gets the new files."""
    easist = load_benchmark("easist")
    m30k = tmp_path / "data" / "multi30k"
    m30k.mkdir(parents=True)
    for lang in ("en", "de"):
        (m30k / f"train.{lang}").write_text("".join(f"{lang} {i}\n" for i in range(1, 41)))
        (m30k / f"test2016.{lang}").write_text("".join(f"{lang} t{i}\n" for i in range(1, 6)))
    sizes = dict(data=str(tmp_path / "data"), work=str(tmp_path / "work"), text_first=1, text_pairs=8,
                 head_pairs=4, test_lines=3, speech_test_lines=2, speech_pairs=20)
    assert _commands(easist, **sizes)["speech-data"][-5].endswith("text.en")
    data = easist.write_data(easist.Plan(**sizes))
    assert not (data / "speech.en").exists()
    plan = easist.Plan(**sizes, speech_first=15)
    command = _commands(easist, **sizes, speech_first=15)["speech-data"]
    assert command[-5] == str(data / "speech.en") and command[-1] == "20"
    easist.write_data(plan)
    assert (data / "speech.en").read_text().splitlines() == [f"en {i}" for i in range(15, 35)]
    assert (data / "speech.de").read_text().splitlines()[0] == "de 15"


def test_an_unknown_schedule_is_refused():
    with pytest.raises(SystemExit, match="mixed or read-n"):
        _commands(load_benchmark("easist"), schedule="wait-k")


def test_the_page_is_named_after_the_results_folder(tmp_path):
    easist = load_benchmark("easist")
    page = easist.write_page(easist.Plan(results=str(tmp_path / "easist-readn"), schedule="read-n"))
    assert page == tmp_path / "easist-readn.md" and '"schedule": "read-n"' in page.read_text()


def test_finished_stages_are_kept_and_a_fresh_work_folder_continues_from_them(tmp_path):
    """A checkout starts with an empty work folder: what a finished stage produced is kept under RESULTS/kept
    (models and scores, not checkpoints) and put back, so the stage counts as finished again."""
    import json
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    easist = load_benchmark("easist")
    plan = easist.Plan(work=str(tmp_path / "work"), results=str(tmp_path / "results"), schedule="read-n")
    for work, line in (("work", "A dog runs."), ("fresh", "A dog runs."), ("other", "A cat sleeps.")):
        (tmp_path / work / "data").mkdir(parents=True)  # what write_data() makes from the plan
        for name in ("text.en", "text.de"):
            (tmp_path / work / "data" / name).write_text(line + "\n")
    text = next(s for s in easist.stages(plan) if s.name == "text")
    adapter = tmp_path / "work" / "text" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    save_file({"lora_A.weight": torch.ones(2, 3), "trainable_tokens_delta": torch.ones(2)},
              str(adapter / "adapter_model.safetensors"))
    (adapter / "tokenizer.json").write_text("{}")  # rebuilt from the base model on load: not kept
    (tmp_path / "work" / "text" / "checkpoint-10").mkdir()
    (tmp_path / "work" / "text" / "training.json").write_text(json.dumps({"stopped_by_time_limit": False}))
    assert text.finished
    easist.keep(plan, text)
    kept = tmp_path / "results" / "kept" / "text"
    weights = load_file(str(kept / "adapter" / "adapter_model.safetensors"))
    assert weights["lora_A.weight"].dtype == torch.bfloat16  # as shipped adapters are
    assert weights["trainable_tokens_delta"].dtype == torch.float32  # added tokens' rows stay float32
    assert not (kept / "checkpoint-10").exists() and not (kept / "adapter" / "tokenizer.json").exists()

    assert not (tmp_path / "results" / "kept" / "text" / "adapter.partial").exists()

    fresh = easist.Plan(work=str(tmp_path / "fresh"), results=str(tmp_path / "results"), schedule="read-n")
    text = next(s for s in easist.stages(fresh) if s.name == "text")
    assert not text.finished
    assert easist.restore(fresh) == ["text/adapter", "text/training.json"]
    assert text.finished and easist.restore(fresh) == []  # nothing is copied twice
    head = next(s for s in easist.stages(fresh) if s.name == "head")
    assert not head.finished  # a stage that never finished is not restored

    # the head's adapter holds the text stage's LoRA: once the head is kept, the text adapter's copy is dropped and
    # the text stage still counts as finished where the head's result is
    head_adapter = tmp_path / "work" / "head" / "adapter"
    head_adapter.mkdir(parents=True)
    (head_adapter / "policy_head.safetensors").write_bytes(b"head")
    (tmp_path / "work" / "head" / "training.json").write_text("{}")
    for name in ("head.en", "head.de"):
        (tmp_path / "work" / "data" / name).write_text("A dog.\n")
        (tmp_path / "fresh2" / "data").mkdir(parents=True, exist_ok=True)
        (tmp_path / "fresh2" / "data" / name).write_text("A dog.\n")
    for name in ("text.en", "text.de"):
        (tmp_path / "fresh2" / "data" / name).write_text("A dog runs.\n")
    easist.keep(plan, next(s for s in easist.stages(plan) if s.name == "head"))
    assert not (kept / "adapter").exists() and (kept / "training.json").is_file()
    fresh2 = easist.Plan(work=str(tmp_path / "fresh2"), results=str(tmp_path / "results"), schedule="read-n")
    assert easist.restore(fresh2) == ["text/training.json", "head/adapter", "head/training.json"]
    assert all(s.finished for s in easist.stages(fresh2) if s.name in ("text", "head"))

    # a work folder in use is left alone: a stage's output deleted there runs again
    (tmp_path / "fresh" / "stages.jsonl").write_text("")
    shutil.rmtree(tmp_path / "fresh" / "text")
    assert easist.restore(fresh) == [] and not text.finished
    # other training data (here: another plan wrote other lines) does not take the kept result
    other = easist.Plan(work=str(tmp_path / "other"), results=str(tmp_path / "results"), schedule="read-n")
    assert easist.restore(other) == []


def test_a_kept_result_names_its_input_data_with_relative_work_folders_too(tmp_path, monkeypatch):
    """``--work runs/easist-readn`` (relative, as the README runs it): the identity of a stage still holds the
    content of the data files its command names, so a plan that writes other lines does not take a kept result."""
    easist = load_benchmark("easist")
    monkeypatch.chdir(tmp_path)
    identities = []
    for work, line in (("a", "A dog runs."), ("b", "A dog runs."), ("c", "A cat sleeps.")):
        (tmp_path / work / "data").mkdir(parents=True)
        for name in ("text.en", "text.de"):
            (tmp_path / work / "data" / name).write_text(line + "\n")
        plan = easist.Plan(work=work, results="results", schedule="read-n")
        identities.append(easist._identity(plan, next(s for s in easist.stages(plan) if s.name == "text")))
    assert identities[0] == identities[1] != identities[2]
    assert identities[0].count(" #") == 2  # text.en and text.de


def test_a_ctc_stage_runs_before_align_and_hands_it_the_adapter(tmp_path):
    """--ctc-steps N: a speech-ctc stage before speech-align, whose adapter align starts from; --speech-held-out N
    keeps utterances out of both, and the page shows what the LLM transcribes of them after each. Without them (the
    defaults), align starts fresh on every utterance, as before."""
    easist = load_benchmark("easist")
    plain = _commands(easist, work=str(tmp_path))
    assert "speech-ctc" not in plain
    assert "--speech-adapter" not in plain["speech-align"] and "--held-out" not in plain["speech-align"]
    names = [s.name for s in easist.stages(easist.Plan(work=str(tmp_path), ctc_steps=40, speech_held_out=7))]
    assert names.index("speech-ctc") == names.index("speech-align") - 1
    commands = _commands(easist, work=str(tmp_path), ctc_steps=40, speech_held_out=7)
    ctc, align = commands["speech-ctc"], commands["speech-align"]
    assert ctc[ctc.index("--recipe") + 1] == "speech-ctc" and ctc[ctc.index("--steps") + 1] == "40"
    assert ctc[ctc.index("--held-out") + 1] == "7" and align[align.index("--held-out") + 1] == "7"
    assert ctc[ctc.index("--ctc-head") + 1] == "tied"
    free = _commands(easist, work=str(tmp_path), ctc_steps=40, ctc_head="free")
    assert free["speech-ctc"][free["speech-ctc"].index("--ctc-head") + 1] == "free"
    assert align[align.index("--speech-adapter") + 1] == str(tmp_path / "sp-ctc" / "model")
    assert "--held-out" not in commands["speech-simul"]
    assert all("--encoder-layers" not in c for c in plain.values())  # the encoder frozen unless asked
    tuned = _commands(easist, work=str(tmp_path), ctc_steps=40, speech_encoder_layers=2)
    for name in ("speech-ctc", "speech-align", "speech-simul"):
        c = tuned[name]
        assert c[c.index("--encoder-layers") + 1] == "2" and c[c.index("--encoder-lr") + 1] == "0.0002"
    assert "--encoder-layers" not in tuned["speech-policy"]
    stop = [s.name for s in easist.planned(easist.Plan(work=str(tmp_path), ctc_steps=40, stop_before="speech-simul"))]
    assert stop[-2:] == ["speech-ctc", "speech-align"]  # --stop-before: the stages before it, no more
    with pytest.raises(SystemExit, match="not a stage"):
        easist.planned(easist.Plan(work=str(tmp_path), stop_before="speech-ctc"))  # no ctc stage without --ctc-steps

    results = tmp_path / "results"
    (results / "training").mkdir(parents=True)
    (results / "training" / "sp-ctc.json").write_text(json.dumps({
        "steps": 40, "vocabulary": 99, "seconds": 60, "cpu_seconds": 120, "options": {"held_out": 7},
        "loss_history": [{"step": 20, "loss": 3.0, "held_out_token_error_rate": 0.8}, {"step": 21, "loss": 2.9},
                         {"step": 40, "loss": 2.0, "held_out_token_error_rate": 0.5}],
        "held_out_transcript_token_error_rate": 0.9,
        "held_out_transcripts": [{"reference": "A dog runs.", "llm_writes": "A cat."}],
        "held_out_examples": [{"reference": "A dog runs.", "adapter_spells": "A dog run"}]}))
    (results / "training" / "sp-align.json").write_text(json.dumps({
        "steps": 10, "seconds": 60, "cpu_seconds": 60, "options": {"held_out": 7},
        "loss_history": [{"step": 10, "loss": 1.5}], "held_out_transcript_token_error_rate": 0.25,
        "held_out_transcripts": [{"reference": "A dog runs.", "llm_writes": "A dog runs."}]}))
    page = easist.write_page(easist.Plan(results=str(results), ctc_steps=40)).read_text()
    assert "| sp-ctc | 40 | 2.0 | 1.0 | 2.0 |" in page
    assert "7 held-out" in page and "| sp-ctc | 0.900 |" in page and "| sp-align | 0.250 |" in page
    assert "| 20 | 3.0 | 0.800 |" in page and "| 40 | 2.0 | 0.500 |" in page and "| 21 |" not in page
    assert "LLM: A cat." in page and "CTC path: A dog run" in page and "LLM: A dog runs." in page
