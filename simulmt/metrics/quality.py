"""Corpus-level translation quality: BLEU and chrF with sacrebleu, COMET when installed locally.

``references`` is either one reference per hypothesis (a list of strings) or several reference
streams (a list of lists of strings, each as long as the hypotheses), as in sacrebleu's corpus API.
Each scorer returns ``(score, signature)`` where the signature is sacrebleu's reproducibility
string, e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``.

Note that sacrebleu's BLEU is 0 for a corpus without any matching 4-gram, even a tiny identical one
(e.g. a single three-word sentence), because of the geometric mean over 1- to 4-gram precisions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from simulmt.errors import SimulmtError

DEFAULT_COMET_MODEL = "Unbabel/wmt22-comet-da"


def _streams(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    if len(references) > 0 and isinstance(references[0], str):
        streams = [list(references)]
    else:
        streams = [list(stream) for stream in references]
    if not streams:
        raise ValueError("no references")
    for stream in streams:
        if len(stream) != len(hypotheses):
            raise ValueError(f"{len(hypotheses)} hypotheses but {len(stream)} references")
    return streams


def bleu(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
         tokenize: str = "13a", lowercase: bool = False) -> tuple[float, str]:
    """Corpus BLEU (sacrebleu ``BLEU(tokenize=...).corpus_score``) and its signature string.

    SimulEval's ``--quality-metrics BLEU`` computes the same thing (with ``--sacrebleu-tokenizer``).
    """
    from sacrebleu.metrics import BLEU

    streams = _streams(hypotheses, references)
    try:
        metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    except KeyError:
        raise SimulmtError(f"unknown sacrebleu tokenizer {tokenize!r}; known: {', '.join(BLEU.TOKENIZERS)}") from None
    score = metric.corpus_score(list(hypotheses), streams)
    return float(score.score), str(metric.get_signature())


def chrf(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
         word_order: int = 0, char_order: int = 6, lowercase: bool = False) -> tuple[float, str]:
    """Corpus chrF (``word_order=0``) or chrF++ (``word_order=2``) with sacrebleu, and its signature."""
    from sacrebleu.metrics import CHRF

    streams = _streams(hypotheses, references)
    metric = CHRF(char_order=char_order, word_order=word_order, lowercase=lowercase)
    score = metric.corpus_score(list(hypotheses), streams)
    return float(score.score), str(metric.get_signature())


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """Forbid Hugging Face Hub downloads (hub and transformers) for the duration of the block."""
    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({k: "1" for k in saved_env})
    constants = None
    try:
        import huggingface_hub.constants as constants
        saved_flag = constants.HF_HUB_OFFLINE
        constants.HF_HUB_OFFLINE = True
    except (ImportError, AttributeError):
        constants = None
    try:
        yield
    finally:
        if constants is not None:
            constants.HF_HUB_OFFLINE = saved_flag
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _local_comet_checkpoint(model: str) -> Path:
    """The checkpoint of ``model`` (a .ckpt file, a downloaded model folder or a cached hub id), never downloading."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        checkpoint = path / "checkpoints" / "model.ckpt"
        if checkpoint.is_file():
            return checkpoint
        raise SimulmtError(f"COMET model folder {path} has no checkpoints/model.ckpt")
    try:
        from huggingface_hub import snapshot_download

        with _hub_offline():
            folder = Path(snapshot_download(repo_id=model, local_files_only=True))
    except Exception as exc:  # not in the local cache (or not a valid repo id)
        raise SimulmtError(
            f"COMET model {model!r} is not available locally and simulmt does not download it. "
            f"Download it once yourself (e.g. `huggingface-cli download {model}`) or pass the path "
            f"of a checkpoint ({type(exc).__name__}: {exc})") from None
    checkpoint = folder / "checkpoints" / "model.ckpt"
    if not checkpoint.is_file():
        raise SimulmtError(f"COMET model {model!r} in the local cache has no checkpoints/model.ckpt")
    return checkpoint


def comet(hypotheses: Sequence[str], references: Sequence[str], sources: Sequence[str],
          model: str = DEFAULT_COMET_MODEL, batch_size: int = 16, gpus: int = 0) -> tuple[float, str]:
    """Corpus COMET (the system score of ``unbabel-comet``) and a signature ``model:...|version:...``.

    Needs the optional package ``unbabel-comet`` and the model (and its encoder) already on disk:
    nothing is downloaded.  Raises :class:`SimulmtError` otherwise.
    """
    output, signature = _comet_output(hypotheses, references, sources, model, batch_size, gpus)
    return float(output.system_score), signature


def comet_sentences(hypotheses: Sequence[str], references: Sequence[str], sources: Sequence[str],
                    model: str = DEFAULT_COMET_MODEL, batch_size: int = 16, gpus: int = 0) -> list[float]:
    """COMET of each sentence (same requirements as :func:`comet`)."""
    return [float(x) for x in _comet_output(hypotheses, references, sources, model, batch_size, gpus)[0].scores]


def _comet_output(hypotheses, references, sources, model, batch_size, gpus):
    if not (len(hypotheses) == len(references) == len(sources)):
        raise ValueError(f"{len(hypotheses)} hypotheses, {len(references)} references, {len(sources)} sources")
    try:
        import comet as comet_lib
    except ImportError:
        raise SimulmtError("COMET needs the optional package unbabel-comet (pip install unbabel-comet), "
                           "which is not installed") from None
    checkpoint = _local_comet_checkpoint(model)
    try:
        with _hub_offline():
            scorer = comet_lib.load_from_checkpoint(str(checkpoint))
    except Exception as exc:
        raise SimulmtError(f"could not load COMET model {model!r} from {checkpoint} without downloading "
                           f"(its encoder may be missing from the local cache): {type(exc).__name__}: {exc}") from None
    data = [{"src": s, "mt": h, "ref": r} for s, h, r in zip(sources, hypotheses, references)]
    output = scorer.predict(data, batch_size=batch_size, gpus=gpus, progress_bar=False)
    version = getattr(comet_lib, "__version__", "unknown")
    return output, f"model:{model}|version:{version}"
