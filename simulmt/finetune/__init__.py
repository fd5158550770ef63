"""Policy-consistent fine-tuning (ExPosST §2.3): the training side of every layout, on the Hugging Face Trainer.

* ``schedules``: g(j) per target word for wait-k (fixed or a k-mix), read-n and offline;
* ``recipes``: a layout + a schedule (+ the ``expost-nomask`` transform) -> training examples, built by the
  layout code itself (``simulmt.core.examples.build_examples``), and how the trained model is served;
* ``data``: sentence pairs (text files, TSV, JSONL, a Hugging Face dataset) and the laid-out example dataset;
* ``collator``: right-padded batches with explicit positions, 4-D masks (a dict per attention type for
  sliding-window models) and aligned labels;
* ``trainer``: ``SimulTrainer`` (loss on labelled tokens, logits only there), ``finetune(options)``, the
  evaluation at the end (BLEU, LAAL through the streaming engine) and the ``training.json`` card;
* ``options``: ``FinetuneOptions``, the typed options of ``simulmt finetune`` (light: the trainer imports them,
  never the reverse);
* ``parity``: the check that training and streaming agree (the training forward's logits equal the streaming
  proposals' along the same schedule), for a new layout or architecture;
* ``speech/``: the speech model's training stages (``simulmt finetune-speech``) and the speech corpus synthesiser.

Importing this package is light; ``simulmt.finetune.trainer`` imports transformers and peft.
"""

from simulmt.finetune.options import FinetuneOptions
from simulmt.finetune.recipes import RECIPES, Recipe, source_first
from simulmt.finetune.schedules import Schedule, offline, read_n, wait_k

__all__ = ["FinetuneOptions", "RECIPES", "Recipe", "Schedule", "finetune", "offline", "read_n", "run_finetune",
           "source_first", "wait_k"]


def __getattr__(name: str):
    if name in ("finetune", "run_finetune"):  # heavy: transformers' Trainer and peft
        from simulmt.finetune import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'simulmt.finetune' has no attribute {name!r}")
