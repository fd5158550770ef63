"""Data-parallel fine-tuning (issue 16): ``simulmt finetune --num-processes 2`` runs two gloo processes (torchrun
underneath) that train exactly what one process trains with the same global batch, can be stopped and resumed,
and leave an adapter that translates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import save_tiny_model
from tiny_models import CORPUS

pytestmark = pytest.mark.slow  # several processes, each loading torch: about a minute in all


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("dist")
    save_tiny_model(folder / "model")
    (folder / "train.en").write_text("\n".join(CORPUS[:16]) + "\n", encoding="utf-8")
    (folder / "train.de").write_text("\n".join(CORPUS[16:32]) + "\n", encoding="utf-8")
    return {"folder": folder, "common": ["--model", str(folder / "model"), "--train-source", str(folder / "train.en"),
                                         "--train-target", str(folder / "train.de"), "--lora-rank", "4",
                                         "--lora-dropout", "0", "--max-steps", "6", "--save-steps", "3",
                                         "--logging-steps", "1", "--eval-lines", "0", "--lr", "1e-2",
                                         "--warmup-steps", "0", "--grad-accum", "1"]}


def finetune(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, "-m", "simulmt", "finetune", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def history(run: Path) -> list[tuple[float, float]]:
    """(loss, gradient norm) of every logged step, from the last checkpoint's trainer state."""
    last = max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((last / "trainer_state.json").read_text())
    return [(h["loss"], h["grad_norm"]) for h in state["log_history"] if "loss" in h]


def test_two_processes_train_what_one_process_trains(setup):
    one, two = setup["folder"] / "one", setup["folder"] / "two"
    a = finetune(*setup["common"], "--batch-size", "4", "--output", str(one))
    b = finetune(*setup["common"], "--batch-size", "2", "--num-processes", "2", "--output", str(two))
    assert a.returncode == 0, a.stderr[-2000:]
    assert b.returncode == 0, b.stderr[-2000:]
    assert "starting 2 processes" in b.stderr
    card = json.loads((two / "training.json").read_text())
    assert card["hyperparameters"]["world_size"] == 2 and card["hyperparameters"]["effective_batch"] == 4
    h1, h2 = history(one), history(two)
    assert len(h1) == len(h2) == 6  # two epochs: the second one's order is the same too
    for (l1, g1), (l2, g2) in zip(h1, h2):
        assert l1 == pytest.approx(l2, abs=1e-4) and g1 == pytest.approx(g2, rel=1e-3)
    assert h1[-1][0] < h1[0][0]

    from simulmt.translator import Translator

    base = Translator.load(str(setup["folder"] / "model"), adapter="none", device="cpu")
    tuned = Translator.load(str(setup["folder"] / "model"), adapter=str(two / "adapter"), device="cpu")
    moved = [name for (name, p), (_, q) in zip(base.model.named_parameters(), tuned.model.named_parameters())
             if not (p == q).all()]
    assert moved  # the adapter was merged into the weights
    result = tuned.translate(CORPUS[0], layout="expost", policy="wait-k", k=3, slot=16)
    assert result.error is None and result.tokens_fed > 0 and len(result.delays) == len(result.prediction.split())


def test_a_two_process_run_stops_together_and_resumes(setup):
    whole, cut = setup["folder"] / "two", setup["folder"] / "cut"
    if not (whole / "training.json").is_file():
        pytest.skip("needs the run of the test above")
    stopped = finetune(*setup["common"], "--batch-size", "2", "--num-processes", "2", "--max-minutes", "1e-6",
                       "--output", str(cut))
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert sorted(p.name for p in cut.glob("checkpoint-*")) == ["checkpoint-1"]  # both stopped after step 1
    refused = finetune(*setup["common"], "--batch-size", "2", "--resume", "--output", str(cut))
    assert refused.returncode == 1 and "trained on 2" in refused.stderr
    resumed = finetune(*setup["common"], "--batch-size", "2", "--num-processes", "2", "--resume", "--output", str(cut))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for (l1, g1), (l2, g2) in zip(history(whole), history(cut), strict=True):
        assert l1 == pytest.approx(l2, abs=1e-4) and g1 == pytest.approx(g2, rel=1e-3)


def test_shipped_launcher_configs_resolve_and_leave_the_batch_to_the_trainer():
    import yaml

    from simulmt.errors import SimulmtError
    from simulmt.finetune.configs import deepspeed_config, path

    for name, stage in (("zero2", 2), ("zero3", 3)):
        config = json.loads(Path(deepspeed_config(name)).read_text())
        assert config["zero_optimization"]["stage"] == stage
        for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                    "gradient_clipping"):
            assert config[key] == "auto"  # one simulmt command line means the same run with or without DeepSpeed
    fsdp = yaml.safe_load(path("fsdp").read_text())
    assert fsdp["distributed_type"] == "FSDP" and fsdp["fsdp_config"]["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    with pytest.raises(SimulmtError, match="shipped: zero2, zero3, fsdp"):
        path("zero4")
    with pytest.raises(SimulmtError, match="no such file"):
        deepspeed_config("missing.json")
    printed = subprocess.run([sys.executable, "-m", "simulmt.finetune.configs", "fsdp"], capture_output=True,
                             text=True)
    assert printed.returncode == 0 and Path(printed.stdout.strip()) == path("fsdp")
