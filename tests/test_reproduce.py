"""benchmarks/reproduce.py end to end on a tiny model and a tiny stand-in for ../shared/data: every stage runs,
the committed results are enough to rebuild the page, and a rerun redoes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import load_benchmark, save_tiny_model
from tiny_models import CORPUS



def load_script():
    return load_benchmark("reproduce")


def fake_data(folder: Path) -> Path:
    en, de = CORPUS[:16], CORPUS[16:32]
    files = {"multi30k/train": (en, de), "multi30k/test2016": (en[:4], de[:4]),
             "wmt-news/train.en-de": (en[::-1], de[::-1]), "iwslt17/tst2017.en-de": (en[4:8], de[4:8])}
    for stem, (a, b) in files.items():
        (folder / stem).parent.mkdir(parents=True, exist_ok=True)
        Path(f"{folder / stem}.en").write_text("\n".join(a) + "\n", encoding="utf-8")
        Path(f"{folder / stem}.de").write_text("\n".join(b) + "\n", encoding="utf-8")
    return folder


@pytest.mark.slow
def test_reproduce_runs_every_stage_and_resumes_from_committed_results(tmp_path):
    reproduce = load_script()
    model = save_tiny_model(tmp_path / "model")
    data = fake_data(tmp_path / "data")
    args = ["--data", str(data), "--work", str(tmp_path / "work"), "--results", str(tmp_path / "docs" / "results"),
            "--model", str(model), "--methods", "expost,offline", "--train-pairs", "8", "--budget-tokens", "3000",
            "--batch-size", "2", "--grad-accum", "1", "--iwslt-lines", "2", "--m30k-lines", "2",
            "--mismatch-lines", "1", "--ks", "1,3", "--eval-batch", "2"]
    assert reproduce.main(args) == 0
    results = tmp_path / "docs" / "results"
    runs = sorted(p.parent.relative_to(results / "runs").as_posix() for p in results.glob("runs/*/*/*/scores.json"))
    assert runs == sorted(
        [f"{t}/expost/expost-slot16.wait-{k}" for t in ("iwslt17", "multi30k") for k in (1, 3)]
        + [f"iwslt17-slots/expost/expost-slot{s}.wait-{k}" for s in (4, 8, 16, 32, 64) for k in (1, 3)]
        + ["iwslt17/offline/offline", "multi30k/offline/offline"])
    card = json.loads((results / "training" / "expost.json").read_text())
    assert card["recipe"].startswith("expost") and card["steps"] >= 1 and card["cpu_seconds_total"] > 0
    assert set(json.loads((results / "training" / "slot_lengths.json").read_text())) == {"4", "8", "16", "32", "64"}
    page = (tmp_path / "docs" / "results.md").read_text()
    for heading in ("## iwslt17: BLEU against LAAL", "## Slot mismatch", "## Compute per sentence at wait-3",
                    "## Training", "## The paper's orderings, checked", "## Commands"):
        assert heading in page
    commands = page.split("## Commands")[1]
    assert "- expost: `simulmt finetune " in commands and "--recipe offline" in commands
    assert (results / "iwslt17_bleu_laal.png").stat().st_size > 1000
    assert (results / "compute_wait3.png").stat().st_size > 1000
    assert card["loss_history"] and "training_loss.png" in page  # the loss curves (issue 42, E5)
    assert (results / "training_loss.png").stat().st_size > 1000

    # a new machine: nothing but the committed results; nothing is trained or translated again
    import shutil

    shutil.rmtree(tmp_path / "work")
    stamp = {p: p.stat().st_mtime_ns for p in results.glob("runs/*/*/*/*")}
    assert reproduce.main(args) == 0
    assert not (tmp_path / "work" / "train").exists()
    assert {p: p.stat().st_mtime_ns for p in results.glob("runs/*/*/*/*")} == stamp
    assert reproduce.main([*args, "--report-only"]) == 0
    assert (tmp_path / "docs" / "results.md").read_text() == page

    # a method cut short: its adapter is committed, so the missing run is made with the same weights, not retrained
    assert (results / "adapters" / "expost" / "adapter_model.safetensors").is_file()
    missing = results / "runs" / "multi30k" / "expost" / "expost-slot16.wait-3"
    digest = json.loads((missing / "cost.json").read_text())["adapter_sha256"]
    shutil.rmtree(missing)
    shutil.rmtree(tmp_path / "work", ignore_errors=True)
    assert reproduce.main(args) == 0
    assert not (tmp_path / "work" / "train").exists()
    assert json.loads((missing / "cost.json").read_text())["adapter_sha256"] == digest


@pytest.mark.slow
def test_reproduce_seqpo_trains_on_the_warmup_adapter_and_reports_both(tmp_path):
    """Issue 12's experiment: seqpo-warmup reuses the conversation adapter (nothing trained twice), seqpo runs GRPO
    on top of it and commits the combined adapter, and the page compares them on BLEU against AL."""
    reproduce = load_script()
    model = save_tiny_model(tmp_path / "model")
    data = fake_data(tmp_path / "data")
    args = ["--data", str(data), "--work", str(tmp_path / "work"), "--results", str(tmp_path / "docs" / "results"),
            "--model", str(model), "--methods", "seqpo-warmup,seqpo", "--train-pairs", "8", "--budget-tokens", "400",
            "--batch-size", "2", "--grad-accum", "1", "--iwslt-lines", "2", "--m30k-lines", "2", "--ns", "2,3",
            "--eval-batch", "4", "--rl-steps", "2"]
    assert reproduce.main(args) == 0
    results = tmp_path / "docs" / "results"
    runs = sorted(p.parent.relative_to(results / "runs").as_posix() for p in results.glob("runs/*/*/*/scores.json"))
    assert runs == sorted(f"{t}/{m}/seqpo.read-{n}" for t in ("iwslt17", "multi30k") for m in ("seqpo", "seqpo-warmup")
                          for n in (2, 3))
    # the warm-up is the conversation method's adapter, trained once; seqpo's adapter is it + the GRPO LoRA
    assert not (results / "adapters" / "seqpo-warmup").exists()
    warm = json.loads((results / "adapters" / "conversation" / "adapter_config.json").read_text())
    combined = json.loads((results / "adapters" / "seqpo" / "adapter_config.json").read_text())
    assert combined["r"] == warm["r"] + 8
    card = json.loads((results / "training" / "seqpo.json").read_text())
    assert card["steps"] == 2 and len(card["log"]) == 2 and card["options"]["truncation"] == "raw"
    warm_digest = json.loads((results / "runs/iwslt17/seqpo-warmup/seqpo.read-3/cost.json").read_text())
    assert warm_digest["adapter_sha256"] != json.loads(
        (results / "runs/iwslt17/seqpo/seqpo.read-3/cost.json").read_text())["adapter_sha256"]
    page = (tmp_path / "docs" / "results.md").read_text()
    assert "## SeqPO-SiMT: GRPO on top of the warm-up" in page
    assert "| 3 |" in page and (results / "iwslt17_seqpo_bleu_al.png").stat().st_size > 1000
    assert (results / "seqpo_curves.png").is_file()
    # the training table lists the finetuned methods only (the RL card has no recipe)
    assert "| conversation | conversation" in page and "| seqpo |" not in page.split("## Training")[1].split("##")[0]


def _run(test, method, k, bleu, predictions, sources, references, policy="wait-k"):
    return {"test": test, "method": method, "run": f"{method}.wait-{k}", "BLEU": bleu, "gflops": 10.0,
            "config": {"policy": policy, "k": k, "n": None},
            "instances": [{"index": i, "source": s, "reference": r, "prediction": p}
                          for i, (s, r, p) in enumerate(zip(sources, references, predictions))]}


def test_orderings_report_failed_claims_with_lengths_and_an_example():
    """A claim that fails (here: ExPosST below w/o mask at wait-3) is listed as failing, BLEU is broken down by
    source length, and the sentence where the other method gains most is shown."""
    reproduce = load_script()
    sources = ["a b c", "a b c d e f g h i j k l", "one two three four five six seven eight nine ten eleven twelve"]
    references = ["Der Hund läuft.", "Eine Frau hält eine kleine weiße Statue im Park.", "Zwei Männer spielen Fußball."]
    good = references
    bad = ["Der Hund läuft.", "Ein Mann steht.", "Zwei Männer spielen Fußball."]
    runs = [_run("iwslt17", "expost", 3, 40.0, bad, sources, references),
            _run("iwslt17", "expost-nomask", 3, 90.0, good, sources, references),
            _run("iwslt17", "slotless", 3, 10.0, bad, sources, references)]
    page = "\n".join(reproduce._orderings(runs))
    assert "- wait-3 (iwslt17): ExPosST <= w/o mask; ExPosST > w/o slot" in page
    assert "| method | 1-10 words (1) | 11-20 words (2) |" in page
    assert "| expost-nomask | 100.00 | 100.00 |" in page
    assert "iwslt17, wait-3, ExPosST vs expost-nomask, line 2" in page
    assert "  - expost: Ein Mann steht." in page and "vs slotless" not in page  # only the failed claim
    assert "multi30k" not in page  # a test set without runs is left out


def test_a_method_for_one_k_and_a_results_folder_of_its_own(tmp_path):
    """Issue 42's E5: a model trained for one k is evaluated at that k only; results under another --results
    (a larger budget) get a page of their own beside it, whose figures link into that folder."""
    reproduce = load_script()
    plan = reproduce.Plan(results=str(tmp_path / "docs" / "results-320k"), ks="1,3,5,7")
    assert [spec.name for test, spec, _ in reproduce.run_specs(plan, "expost-k3")] == ["expost-slot16.wait-3"] * 2
    assert len(reproduce.run_specs(plan, "gpe")) == 8
    train = dict(reproduce.METHODS["expost-k3"].train)
    assert train == {"k": 3} and reproduce.METHODS["expost-k3"].recipe == "expost"
    # one committed run is enough for a page
    run = tmp_path / "docs" / "results-320k" / "runs" / "iwslt17" / "expost-k3" / "expost-slot16.wait-3"
    run.mkdir(parents=True)
    (run / "scores.json").write_text(json.dumps({"run": "expost-slot16.wait-3", "BLEU": 7.0, "chrF": 30.0, "AL": 2.0,
                                                 "LAAL": 3.0, "gflops": 20.0, "tokens_fed": 80.0, "sentences": 2}))
    (run / "config.json").write_text(json.dumps({"layout": "expost", "policy": "wait-k", "k": 3, "n": None,
                                                 "slot": 16, "lines": 2}))
    import gzip

    with gzip.open(run / "instances.log.gz", "wt", encoding="utf-8") as f:
        for i in range(2):
            f.write(json.dumps({"index": i, "source": "a b c", "reference": "x y z", "prediction": "x y z",
                                "delays": [1, 2, 3], "elapsed": [1.0, 2.0, 3.0], "source_length": 3}) + "\n")
    page = reproduce.write_report(plan).read_text()
    assert (tmp_path / "docs" / "results-320k.md").is_file() and not (tmp_path / "docs" / "results.md").exists()
    assert "](results-320k/iwslt17_bleu_laal.png)" in page and "](results/" not in page
