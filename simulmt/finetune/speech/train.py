"""EASiST's speech stages on a frozen LLM: align the speech adapter, fine-tune it on interleaved chunks, fit the
policy head. (Stage one, the interleaved text format, is ``simulmt finetune --recipe interleaved``.)

* ``ctc``  (optional, before align): the adapter alone against the LLM's token embeddings of the transcript, with
  CTC (``simulmt.speech.ctc``): no LLM forward, about a tenth of an align step.
* ``align``  (stage II): offline speech -> text. Every block is read, then the model writes the transcript
  (``--align-target transcript``: the prompt asks to "translate English into English") or the translation. Only
  the adapter trains; the LLM (with its interleaved LoRA adapter merged) is frozen, so the adapter learns to
  speak its input language.
* ``simul``  (stage III): interleaved sequences, speech chunks and target chunks. Chunks are the source words'
  read-n chunks (n drawn per utterance from ``--n-mix``; with ``--k-mix``, half the utterances take wait-k
  instead, as ``finetune --policy mixed`` does for text), mapped onto blocks by the words' end times: target word
  j is written after the first block that holds the end of the last source word it needs. The adapter trains.
* ``policy``: the READ/WRITE head on the hidden states after each block (``simulmt.finetune.policy_head``),
  labelled by the same chunk schedule, or (``--head-labels oracle``) by the model itself: write a word after the
  first block from which the model predicts it right (``simulmt.finetune.oracle``).

``--encoder-layers N`` (ctc, align, simul) trains the speech encoder's top N layers with the adapter, as EASiST
trains its encoder (``simulmt.speech.encoder_top``): the corpus then caches each block window's state below those
layers instead of the blocks, and the speech model folder keeps the trained layers.

``--held-out N`` (ctc, align) keeps the corpus's last N utterances out of training; at the end the frozen LLM
reads each whole and writes its transcript, scored by token error rate (ctc also scores its own best path along
the run).

Training and streaming see the same inputs: a corpus utterance is encoded with ``encode_utterance`` (the blocks
streaming emits), the adapter maps each block alone, and the layout places the embeddings as streaming does
(tests/test_speech_stream.py holds the parity). Encoder blocks are computed once per utterance and cached in
``OUT/blocks`` (resumable). A run saves ``OUT/checkpoint.pt`` every ``save_steps`` steps and at a time limit;
``--resume`` continues it; the result is a speech model folder ``OUT/model`` (``SpeechTranslator.load``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from simulmt.core.examples import IGNORE, build_examples, decision_points
from simulmt.core.layouts import Interleaved
from simulmt.core.learned_policy import HEAD_FILE, PolicyHead
from simulmt.core.placed import embedded_units, embedding_row
from simulmt.core.prompt_format import build_format, text_ids, with_interleaved_markers
from simulmt.errors import SimulmtError
from simulmt.output_dir import check_output_dir
from simulmt.finetune.oracle import correct_matrix, oracle_delays
from simulmt.finetune.schedules import Schedule
from simulmt.finetune.speech.options import SpeechTrainOptions
from simulmt.speech.adapter import SpeechAdapter, SpeechAdapterConfig
from simulmt.speech.encoder_top import EncoderTop, apply_tuned, tuned_first_layer
from simulmt.speech.model import SPEECH_FILE, SpeechModelCard
from simulmt.speech.streaming_encoder import (StreamingEncoderConfig, encode_utterance, utterance_spans,
                                              window_states)

@dataclass
class SpeechItem:
    """One corpus utterance, encoded: encoder blocks (or, when the encoder's top trains, each block's window state
    below it and the block's frames in the window), when each became available, the text and word times."""

    id: str
    blocks: list[torch.Tensor]
    available_ms: list[float]
    source: str
    target: str
    word_end_ms: list[float]
    windows: Path | None = None  # the cached window states, read when needed (a corpus's are many GB)


def item_blocks(item: SpeechItem, top: EncoderTop | None) -> list[torch.Tensor]:
    """The utterance's encoder blocks: cached, or the trained top layers run on the cached window states."""
    if top is None:
        return item.blocks
    return [top(hidden, slice(*kept)) for hidden, kept in torch.load(item.windows)]


# ---- data ------------------------------------------------------------------------------------------------------
def load_items(options: SpeechTrainOptions, encoder, extractor, progress: bool = False, until_layer: int | None = None,
               tuned: str | None = None) -> list[SpeechItem]:
    """The corpus's utterances with their encoder blocks, computed once and cached under OUT/blocks; with
    ``until_layer``, each block's window state entering that layer instead (``window_states``). ``tuned``: the
    digest of trained encoder weights in ``encoder`` (``encoder_top.apply_tuned``), which names the cache."""
    from simulmt.finetune.speech.synth import read_manifest

    config = StreamingEncoderConfig(options.block_ms, options.left_context_ms)
    manifest = Path(options.corpus)
    utterances = read_manifest(manifest)[: options.limit]
    if not utterances:
        raise SimulmtError(f"{manifest}: no utterances")
    name = f"{Path(options.encoder).name}-{config.block_ms}-{config.left_context_ms}"
    name += ("" if until_layer is None else f"-below{until_layer}") + ("" if tuned is None else f"-{tuned}")
    cache = Path(options.output) / "blocks" / name
    cache.mkdir(parents=True, exist_ok=True)
    items = []
    for u in tqdm(utterances, desc="speech: encoder blocks", unit="utt", disable=not progress):
        path = cache / f"{u.id}.pt"
        if path.is_file() and until_layer is not None:
            cached = torch.load(path, mmap=True)  # only counted here: read again when used
        elif path.is_file():
            cached = torch.load(path)
        else:
            audio = u.read_audio()
            if until_layer is None:
                cached = encode_utterance(audio, config, encoder, extractor)
            else:
                cached = [(hidden, (span.kept.start, span.kept.stop))
                          for hidden, span in window_states(audio, config, encoder, extractor, until_layer)]
            torch.save(cached, path.with_suffix(".tmp"))
            path.with_suffix(".tmp").replace(path)
        n = int(round(u.duration_ms * 16))
        spans = utterance_spans(config, n)
        if len(spans) != len(cached):
            raise SimulmtError(f"{path}: {len(cached)} cached blocks, but the audio has {len(spans)}: delete the cache")
        blocks, windows = (cached, None) if until_layer is None else ([], path)
        items.append(SpeechItem(u.id, blocks, [s.available_ms for s in spans], u.source, u.target,
                                [w.end_ms for w in u.words], windows))
    return items


def block_delays(word_delays: list[int], word_end_ms: list[float], available_ms: list[float]) -> list[int]:
    """Word-level delays (source words read before each target word) -> blocks read: the first block available
    once the last needed word has ended (at least one block)."""
    out = []
    for g in word_delays:
        end = word_end_ms[g - 1] if g > 0 else 0.0
        b = next((i + 1 for i, t in enumerate(available_ms) if t >= end), len(available_ms))
        out.append(max(1, b))
    return out


def speech_example(item: SpeechItem, embeddings: list[torch.Tensor], stage: str, schedule: Schedule,
                   rng: random.Random, align_text: str):
    """The source units (embedded ids), target words and block delays of one utterance: all blocks then
    ``align_text`` (align), or the word schedule drawn from ``schedule`` mapped onto blocks (simul, policy)."""
    units = embedded_units([e.shape[0] for e in embeddings])
    if stage == "align":
        words = align_text.split()
        delays = [len(units)] * len(words)
    else:
        words = item.target.split()
        word_delays, _ = schedule.delays(len(item.source.split()), len(words), rng)
        delays = block_delays(word_delays, item.word_end_ms, item.available_ms)
    return units, words, delays


# ---- the loop ----------------------------------------------------------------------------------------------------
def train_speech(options: SpeechTrainOptions, *, translator=None, encoder=None, extractor=None,
                 progress: bool | None = None) -> dict:
    """Run one speech stage (see the module docstring); returns the card written to OUT/training.json.
    ``translator``/``encoder``/``extractor``: ready models instead of loading them (tests)."""
    progress = sys.stderr.isatty() if progress is None else progress
    out = check_output_dir(options.output)  # refused before the models load
    final = out / "model"
    if final.exists() and not options.resume:
        raise SimulmtError(f"{out} already holds a trained speech model: choose another --output (or --resume)")
    if translator is None:
        from simulmt.translator import Translator

        translator = Translator.load(options.model, adapter=options.adapter or "none", source_lang=options.source_lang,
                                     target_lang=options.target_lang, device="cpu")
    if translator.fmt.end_of_read is None:
        raise SimulmtError("the LLM has no interleaved marker tokens: pass --adapter, an adapter trained with "
                           "`simulmt finetune --recipe interleaved`")
    if encoder is None:
        from simulmt.speech.whisper_ct2 import whisper_encoder

        encoder, extractor = whisper_encoder(options.encoder)
    tuned_before = tuned_first_layer(options.speech_adapter)
    if tuned_before is not None or options.encoder_layers:
        encoder = copy.deepcopy(encoder)  # its weights change: never the caller's encoder
    tuned = apply_tuned(encoder, options.speech_adapter) if tuned_before is not None else None
    for p in [*translator.model.parameters(), *encoder.parameters()]:
        p.requires_grad_(False)
    top = None
    if options.encoder_layers:
        if options.encoder_layers > len(encoder.layers):
            raise SimulmtError(f"--encoder-layers {options.encoder_layers}: the speech encoder has "
                               f"{len(encoder.layers)} layers")
        top = EncoderTop(encoder, len(encoder.layers) - options.encoder_layers)
        top.requires_grad_(True)
    llm_dim = translator.model.get_input_embeddings().weight.shape[1]
    if options.speech_adapter is not None:
        adapter = SpeechAdapter.load(options.speech_adapter)
    else:
        torch.manual_seed(options.seed)
        adapter = SpeechAdapter(SpeechAdapterConfig(encoder.config.d_model, llm_dim, options.adapter_hidden))
    items = load_items(options, encoder, extractor, progress, None if top is None else top.first_layer, tuned)
    if options.held_out >= len(items):
        raise SimulmtError(f"--held-out {options.held_out} leaves no utterance to train on (the corpus has "
                           f"{len(items)})")
    held = items[len(items) - options.held_out:] if options.held_out else []
    items = items[: len(items) - len(held)]
    layout = Interleaved()
    transcript_fmt = with_interleaved_markers(
        build_format(translator.tokenizer, options.source_lang, options.source_lang), translator.tokenizer)
    fmt = transcript_fmt if options.stage == "align" and options.align_target == "transcript" else translator.fmt
    started, cpu_started = time.perf_counter(), time.process_time()
    card = {"stage": options.stage, "options": asdict(options), "utterances": len(items)}
    head = speller = None
    if options.stage == "policy":
        fitted, head = _fit_policy(options, translator, adapter, items, layout, fmt)
        card.update(fitted)
    elif options.stage == "ctc":
        fitted, scorer = _train_ctc(options, translator, adapter, top, items, held, progress)
        card.update(fitted)
        speller = scorer if scorer.head == "free" else None  # a free head's model reads the words it spells
    else:
        loss_of = lambda item, rng: _loss(translator, adapter, top, item, layout, fmt, options, rng)  # noqa: E731
        translator.model.eval()
        card.update(_train_adapter(options, adapter, items, loss_of, progress, encoder_top=top))
    if held and not card.get("stopped_by_time_limit") and speller is None:  # a free head's frames are not the LLM's
        card.update(_transcript_check(translator, transcript_fmt, adapter, top, held))
    card["seconds"] = round(time.perf_counter() - started, 1)
    card["cpu_seconds"] = round(time.process_time() - cpu_started, 1)
    if not card.get("stopped_by_time_limit"):
        firsts = [f for f in (tuned_before, None if top is None else top.first_layer) if f is not None]
        _save_model(options, adapter, final, head, EncoderTop(encoder, min(firsts)) if firsts else None, speller)
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def _rows(ids: list[int], embeddings: list[torch.Tensor]) -> torch.Tensor:
    """The embeddings the negative ids of a laid-out sequence carry, in their order."""
    return torch.cat(embeddings)[[embedding_row(i) for i in ids if i < 0]]


def _loss(translator, adapter, top, item: SpeechItem, layout, fmt, options, rng) -> tuple[torch.Tensor, int]:
    """(summed cross-entropy of the labelled tokens, their number) of one utterance's sequence."""
    embeddings = [adapter(b) for b in item_blocks(item, top)]
    text = item.source if options.stage == "align" and options.align_target == "transcript" else item.target
    units, words, delays = speech_example(item, embeddings, options.stage, options.schedule, rng, text)
    (example,) = build_examples(layout, fmt, translator.tokenizer, units, words, delays)
    runner = translator.runner
    ids = example.input_ids
    rows = _rows(ids.tolist(), embeddings)
    out = runner.decoder(inputs_embeds=runner.embed(ids[None], rows), position_ids=example.position_ids[None],
                         attention_mask=runner.masks(example.visible(layout), 0), use_cache=False)
    labels = torch.tensor(example.labels)
    where = labels != IGNORE
    logits = runner.head(out.last_hidden_state[0][where])
    if runner.softcap:
        logits = torch.tanh(logits / runner.softcap) * runner.softcap
    return torch.nn.functional.cross_entropy(logits.float(), labels[where], reduction="sum"), int(where.sum())


def _train_ctc(options, translator, adapter, top, train, held, progress):
    """The ctc stage: the adapter and a CTC scorer over the training transcripts' tokens (simulmt.speech.ctc).
    Returns (the training card's part, the scorer)."""
    from simulmt.speech.ctc import CTCScorer, token_error_rate

    tokenizer = translator.tokenizer
    ids = {item.id: list(text_ids(tokenizer, item.source)) for item in [*train, *held]}
    vocab = sorted({t for item in train for t in ids[item.id]})
    with torch.no_grad():  # the rows as the LLM sees them (Gemma scales its embeddings)
        rows = translator.model.get_input_embeddings()(torch.tensor(vocab)).float()
    torch.manual_seed(options.seed)  # the free head's initial weights, reproducible
    scorer = CTCScorer(vocab, rows, options.ctc_head)

    def loss(item, rng):
        embeddings = torch.cat([adapter(b) for b in item_blocks(item, top)])
        return scorer.loss(embeddings, ids[item.id]), len(ids[item.id])

    spelled: list[list[int]] = []  # the held-out best paths of the last evaluation (the run's end)

    def evaluate() -> dict:
        if not held:
            return {}
        with torch.no_grad():
            spelled[:] = [scorer.greedy(torch.cat([adapter(b) for b in item_blocks(item, top)])) for item in held]
        return {"held_out_token_error_rate": round(token_error_rate([ids[i.id] for i in held], spelled), 4)}

    card = _train_adapter(options, adapter, train, loss, progress, extra=scorer, evaluate=evaluate, encoder_top=top)
    card.update({"vocabulary": len(vocab), "held_out": len(held)})
    if held and not card["stopped_by_time_limit"]:
        card["held_out_examples"] = [{"reference": item.source, "adapter_spells": tokenizer.decode(path)}
                                     for item, path in zip(held[:5], spelled)]
    return card, scorer


def _transcript_check(translator, fmt, adapter, top, held: list[SpeechItem], batch_size: int = 16) -> dict:
    """What the frozen LLM writes after reading each held-out utterance whole, asked for the transcript (the align
    stage's format, greedy): its token error rate against the real transcripts, and a few examples. This is the
    question the align stage answers: does the LLM understand the adapter's embeddings?"""
    from simulmt.core.engine import Engine, run_ordered
    from simulmt.speech.ctc import token_error_rate

    def streams():
        for item in held:
            stream = translator.new_stream(Interleaved(), "offline", fmt=fmt)
            with torch.no_grad():
                stream.push_embedded([adapter(b).float() for b in item_blocks(item, top)], finished=True)
            yield stream

    written = [s.result().prediction for s in run_ordered(streams(), Engine(translator.runner), batch_size)]
    ids = lambda text: list(text_ids(translator.tokenizer, text))  # noqa: E731
    rate = token_error_rate([ids(item.source) for item in held], [ids(text) for text in written])
    return {"held_out_transcript_token_error_rate": round(rate, 4),
            "held_out_transcripts": [{"reference": item.source, "llm_writes": text}
                                     for item, text in zip(held[:5], written)]}


def _train_adapter(options, adapter, items, loss_of, progress, extra: torch.nn.Module | None = None,
                   evaluate=None, encoder_top: EncoderTop | None = None) -> dict:
    """The adapter's (and ``extra``'s parameters', and ``encoder_top``'s at ``--encoder-lr``) optimisation loop:
    ``loss_of(item, rng)`` gives an utterance's summed loss and its token count. Checkpoints every ``save_steps``
    and at the time limit; ``evaluate()`` (a dict of held-out figures) runs every tenth of the run and at its end,
    into the loss history."""
    out = Path(options.output)
    params = [*adapter.parameters(), *(extra.parameters() if extra is not None else [])]
    groups = [{"params": params, "peak_lr": options.lr}]
    if encoder_top is not None:
        groups.append({"params": list(encoder_top.parameters()), "peak_lr": options.encoder_lr})
        params = [*params, *groups[-1]["params"]]
    opt = torch.optim.AdamW(groups, lr=options.lr, weight_decay=0.01)
    step, history = 0, []
    checkpoint = out / "checkpoint.pt"
    if options.resume and checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        saved = {**asdict(SpeechTrainOptions(corpus=options.corpus)), **state["options"]}  # older runs lack new options
        if saved != {**asdict(options), "resume": saved["resume"], "max_minutes": saved["max_minutes"]}:
            raise SimulmtError("--resume with options that change the run: use the same options as the cut run")
        adapter.load_state_dict(state["adapter"])
        if extra is not None:
            extra.load_state_dict(state["extra"])
        if encoder_top is not None:
            encoder_top.load_state_dict(state["encoder_top"])
        opt.load_state_dict(state["optimizer"])
        step, history = state["step"], state["history"]
    warmup = max(1, options.steps // 10)
    schedule = lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / options.steps)))  # noqa: E731
    every = max(1, options.steps // 10)
    deadline = time.perf_counter() + 60 * options.max_minutes if options.max_minutes else None
    adapter.train()
    bar = tqdm(total=options.steps, initial=step, desc=f"speech {options.stage}", disable=not progress)
    stopped = False
    while step < options.steps:
        rng = random.Random(options.seed * 1_000_003 + step)  # the batch of step s does not depend on resuming
        batch = rng.sample(items, min(options.batch_size, len(items)))
        for group in opt.param_groups:
            group["lr"] = group["peak_lr"] * schedule(step)
        opt.zero_grad()
        total, count = 0.0, 0
        for item in batch:
            loss, n = loss_of(item, rng)
            loss.backward()
            total, count = total + float(loss.detach()), count + n
        for p in params:
            if p.grad is not None:
                p.grad /= max(1, count)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        history.append({"step": step, "loss": round(total / max(1, count), 5)})
        if evaluate is not None and (step % every == 0 or step == options.steps):
            adapter.eval()
            history[-1].update(evaluate())
            adapter.train()
        bar.update(1)
        bar.set_postfix({k: v for k, v in history[-1].items() if k != "step"})
        timed_out = deadline is not None and time.perf_counter() > deadline
        if step % options.save_steps == 0 or step == options.steps or timed_out:
            state = {"options": {k: v for k, v in asdict(options).items() if k not in ("resume", "max_minutes")},
                     "adapter": adapter.state_dict(), "optimizer": opt.state_dict(), "step": step, "history": history}
            if extra is not None:
                state["extra"] = extra.state_dict()
            if encoder_top is not None:
                state["encoder_top"] = encoder_top.state_dict()
            out.mkdir(parents=True, exist_ok=True)
            torch.save(state, out / "checkpoint.tmp")
            (out / "checkpoint.tmp").replace(checkpoint)
        if timed_out and step < options.steps:
            stopped = True
            break
    bar.close()
    adapter.eval()
    card = {"steps": step, "loss_history": history, "stopped_by_time_limit": stopped,
            "train_loss": history[-1]["loss"] if history else None}
    if history and "held_out_token_error_rate" in history[-1]:
        card["held_out_token_error_rate"] = history[-1]["held_out_token_error_rate"]
    return card


def _fit_policy(options, translator, adapter, items, layout, fmt) -> tuple[dict, PolicyHead]:
    from simulmt.finetune.policy_head import fit_head

    rng = random.Random(options.seed)
    hidden, labels = [], []
    with torch.no_grad():
        for item in items:
            embeddings = [adapter(b) for b in item.blocks]
            units, words, delays = speech_example(item, embeddings, "simul", options.schedule, rng, item.target)
            if options.head_labels == "oracle":
                delays = oracle_delays(correct_matrix(translator, layout, units, words, torch.cat(embeddings)))
            points = decision_points(layout, fmt, translator.tokenizer, units, words, delays)
            if not points.indices:
                continue
            ex = points.example
            rows = _rows(ex.input_ids.tolist(), embeddings)
            states = translator.runner.hidden_states(ex.input_ids.tolist(), ex.position_ids.tolist(),
                                                     ex.visible(layout), embedded=rows, layer=options.head_layer)
            hidden.append(states[points.indices])
            labels.append(torch.tensor(points.labels))
    if not hidden:
        raise SimulmtError("no decision points in the corpus (every utterance is one block)")
    head, fit = fit_head(torch.cat(hidden), torch.cat(labels), seed=options.seed,
                         info={"stage": "policy", "unit": f"{options.block_ms} ms block",
                               "labels": "oracle" if options.head_labels == "oracle" else options.schedule.describe(),
                               **({} if options.head_layer is None else {"layer": options.head_layer})})
    return {"fit": fit.to_json()}, head


def _relative(name: str, folder: Path) -> str:
    """A folder as a path relative to ``folder`` (what ``speech.json`` stores); anything else as given."""
    return os.path.relpath(Path(name).resolve(), folder.resolve()) if Path(name).is_dir() else name


def _save_model(options: SpeechTrainOptions, adapter: SpeechAdapter, final: Path, head: PolicyHead | None,
                top: EncoderTop | None = None, speller=None) -> None:
    """The speech model folder: the adapter, speech.json, the encoder's trained layers (``top``: this stage's and
    the starting model's), and the policy head (this stage's, or the one the starting speech model had). With
    ``speller`` (the ctc stage's free CTC head) the model reads the words the head spells (``reads="ctc-words"``,
    simulmt.speech.spelled_words) instead of the adapter's embeddings."""
    final.mkdir(parents=True, exist_ok=True)
    adapter.save(final)
    if speller is not None:
        speller.save(final)
    if top is not None:
        top.save(final)
    # folders relative to the speech model's own (it moves with a checkout or a copy); names stay names
    llm_adapter = None if options.adapter is None else _relative(options.adapter, final)
    model = _relative(options.model, final)
    # a model that reads spelled words keeps its LLM adapter's text head, never the starting model's block head
    if head is None and options.speech_adapter is not None and speller is None:
        previous = Path(options.speech_adapter) / HEAD_FILE
        if previous.is_file():
            (final / HEAD_FILE).write_bytes(previous.read_bytes())
    if head is not None:
        head.save(final)
    # the card says what the model was trained for: the interleaved layout, and the learned policy where a head
    # decides (its own, or, for a model that reads spelled words, its LLM adapter's text head)
    decides = (final / HEAD_FILE).is_file() or (speller is not None and _adapter_has_head(options.adapter))
    speech = SpeechModelCard(model=model, adapter=llm_adapter, encoder=options.encoder, block_ms=options.block_ms,
                             left_context_ms=options.left_context_ms, source_lang=options.source_lang,
                             target_lang=options.target_lang,
                             reads="embeddings" if speller is None else "ctc-words", layout="interleaved",
                             policy="learned" if decides else "wait-k")
    (final / SPEECH_FILE).write_text(json.dumps(asdict(speech), indent=2) + "\n")


def _adapter_has_head(adapter: str | None) -> bool:
    from simulmt.adapters import _shipped_path

    if adapter is None:
        return False
    folder = Path(adapter) if Path(adapter).is_dir() else _shipped_path(adapter)
    return folder is not None and (folder / HEAD_FILE).is_file()
