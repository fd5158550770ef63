"""One forward pass of a Hugging Face causal LM over placed tokens: explicit positions, explicit masks, a cache.

The runner holds no stream state. It turns a boolean visibility matrix into the additive 4-D mask(s) the model
takes (one per attention type: models with sliding-window layers, e.g. Gemma 3, get a separate sliding mask as a
dict keyed by layer type), and counts the compute of every call (docs/design.md §4).

The KV cache is a ``transformers.DynamicCache`` made without a config, so sliding-window layers keep every key
(they are masked instead): cropping it to any length is exact.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace

import torch

from simulmt.errors import SimulmtError
from simulmt.core import layer_split
from simulmt.core.alibi import Alibi, adopt_alibi
from simulmt.core.execution import Execution
from simulmt.core.head_vocabulary import HeadVocabulary, ShortlistHead
from simulmt.core.packed_forward import PackedAnswer, PackedQueries, Wants
from simulmt.core.packed_linear import PackedLinear, packed_weight_count
from simulmt.core.static_decoder import StaticDecoder
from simulmt.core.visibility import Distance, additive, key_distances, sliding


@dataclass(frozen=True)
class ComputeModel:
    """FLOPs of a forward: 2 x non-embedding params per token, 4 x layers x attention width per (query, visible
    key) pair, and the LM head (2 x hidden x vocab) per row of logits computed."""

    non_embedding_params: int
    layers: int
    attention_width: int
    hidden: int
    vocab: int
    head_vocab: int | None = None  # rows of the LM head computed, when not the whole vocabulary (head_vocabulary.py)

    def flops(self, tokens: int, visible_pairs: int, logit_rows: int, layers: int | None = None) -> float:
        """``layers``: only that many of the decoder's layers ran (a forward stopped at a policy head's layer)."""
        share = 1.0 if layers is None else layers / self.layers
        return (share * (2.0 * self.non_embedding_params * tokens
                         + 4.0 * self.layers * self.attention_width * visible_pairs)
                + 2.0 * self.hidden * (self.head_vocab or self.vocab) * logit_rows)


def _text_config(model):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def compute_model(model) -> ComputeModel:
    config = _text_config(model)
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    total = sum(p.numel() for p in model.parameters()) + packed_weight_count(model)
    embedding = inp.weight.numel()
    if isinstance(out, PackedLinear):  # its own packed copy, counted in total even when it was tied
        head = out.weight_count
    else:
        head = 0 if out is None or out.weight is inp.weight else out.weight.numel()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return ComputeModel(non_embedding_params=total - embedding - head, layers=config.num_hidden_layers,
                        attention_width=config.num_attention_heads * head_dim, hidden=config.hidden_size,
                        vocab=inp.weight.shape[0])


def cache_argument(module) -> str:
    """The name under which ``module``'s forward takes the KV cache: ``cache`` since transformers renamed it (5.24
    warns that ``past_key_values`` goes away in 5.40), ``past_key_values`` before."""
    if hasattr(module, "get_base_model"):  # a PEFT wrapper passes its keywords on to the model it wraps
        module = module.get_base_model()
    return "cache" if "cache" in inspect.signature(type(module).forward).parameters else "past_key_values"


def attention_spec(model) -> tuple[list[str], int | None]:
    """(sorted attention types of the model's layers, sliding window or None), from its config."""
    config = _text_config(model)
    window = getattr(config, "sliding_window", None)
    types = list(getattr(config, "layer_types", None) or [])
    if not types:  # e.g. Mistral: every layer slides when sliding_window is set
        types = ["sliding_attention" if window else "full_attention"]
    return sorted(set(types)), window


def render_masks(visible: torch.Tensor, query_start: int, attention_types: list[str], window: int | None,
                 dtype: torch.dtype, device=None, alibi: Alibi | None = None, distances: torch.Tensor | None = None):
    """(B, Q, K) boolean, queries at key indices ``query_start`` .. -> the ``attention_mask`` argument (training
    batches and one stream)."""
    q_index = torch.arange(query_start, query_start + visible.shape[-2]).expand(visible.shape[:-1])
    return render_row_masks(visible, q_index, attention_types, window, dtype, device, alibi, distances)


def render_row_masks(visible: torch.Tensor, q_index: torch.Tensor, attention_types: list[str], window: int | None,
                     dtype: torch.dtype, device=None, alibi: Alibi | None = None,
                     distances: torch.Tensor | None = None):
    """(R, Q, K) boolean, ``q_index`` (R, Q) each query's key index -> a (R, 1, Q, K) float tensor, or a dict of
    them keyed by attention type when the layers differ (sliding layers also hide keys ``window`` or more indices
    back). ALiBi models: (R, H, Q, K), the bias of ``distances`` (R, Q, K) per head (``simulmt.core.alibi``)."""
    out = {}
    for kind in attention_types:
        v = sliding(visible, q_index, window) if kind == "sliding_attention" and window else visible
        if alibi is not None:
            if distances is None:
                raise ValueError("an ALiBi model's masks need the key distances")
            out[kind] = alibi.mask(v, distances, dtype).to(device)
        else:
            out[kind] = additive(v, dtype).unsqueeze(1).to(device)
    return out if len(out) > 1 else out[attention_types[0]]


class ModelRunner:
    def __init__(self, model, execution: Execution = Execution(), head_vocabulary: HeadVocabulary | None = None):
        """``execution``: how engines on this runner compute (execution.py); with ``cuda_graphs`` on a GPU, the
        engine's forwards run as replayed CUDA graphs (static_decoder.py). Elsewhere that changes nothing.
        ``head_vocabulary``: the engine's LM head computes only those tokens and each stream's source tokens read
        (head_vocabulary.py; opt-in: it changes the output where the full head's choice is outside them)."""
        self.model = model
        self.execution = execution
        config = _text_config(model)
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self.attention_types, self.window = attention_spec(model)
        self.alibi = adopt_alibi(model)  # None unless the model is an ALiBi model (its bias comes with the masks)
        self.compute = compute_model(model)
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        # the engine runs the decoder and applies the LM head to the rows it needs itself (see ``forward_packed``)
        self.decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
        self.head = model.get_output_embeddings()
        self.softcap = getattr(config, "final_logit_softcapping", None)
        self.model_cache_arg, self.decoder_cache_arg = cache_argument(model), cache_argument(self.decoder)
        self._check_head()
        self.shortlist = None
        if head_vocabulary is not None:  # (ids the tokenizer knows beyond the head's rows: none to compute)
            rows = getattr(self.head, "out_features", self.compute.vocab)
            self.shortlist = ShortlistHead(self.head, head_vocabulary.within(rows), rows, self.softcap,
                                           model.get_input_embeddings())
            self.compute = replace(self.compute, head_vocab=self.shortlist.size)
        graphs = execution.cuda_graphs and self.device.type == "cuda"
        self.static: StaticDecoder | None = StaticDecoder(self) if graphs else None  # engines then keep stable caches

    @torch.no_grad()
    def _check_head(self) -> None:
        """The engine runs the decoder and applies the LM head itself; make sure that gives the model's own logits
        (an architecture that scales its logits some other way would otherwise decode silently wrong)."""
        ids = torch.tensor([[1, 2]], device=self.device)
        own = self.model(input_ids=ids, use_cache=False).logits[0, -1].float()
        hidden = self.decoder(input_ids=ids, use_cache=False).last_hidden_state[0, -1:]
        mine = self.head(hidden)[0]
        if self.softcap:
            mine = torch.tanh(mine / self.softcap) * self.softcap
        if not torch.allclose(mine.float(), own, rtol=1e-2, atol=1e-2 * max(1.0, float(own.abs().max()))):
            raise SimulmtError(f"{type(self.model).__name__}: its logits are not its LM head applied to its decoder's "
                               f"last hidden state (max difference {float((mine.float() - own).abs().max()):.3g}); "
                               f"simulmt's engine does not support this architecture yet")

    def masks(self, visible: torch.Tensor, query_start: int, target_side: torch.Tensor | None = None,
              distance: Distance = Distance()):
        """(Q, K) boolean -> the ``attention_mask`` argument: a (1, 1, Q, K) float tensor, or a dict of them.
        ALiBi models also need every key's ``target_side`` flag (K,) and the layout's ``distance`` rule."""
        distances = None
        if self.alibi is not None:
            if target_side is None:
                raise ValueError("an ALiBi model's masks need the keys' target-side flags")
            q_index = torch.arange(query_start, query_start + visible.shape[0])[None]
            distances = key_distances(distance, visible[None], q_index, target_side[None, query_start:],
                                      target_side[None], torch.ones_like(target_side)[None].bool())
        return render_masks(visible[None], query_start, self.attention_types, self.window, self.dtype, self.device,
                            self.alibi, distances)

    @property
    def device_label(self) -> str:
        """Where forwards run, as benchmarks record it: the device, and ``+cuda-graphs`` when they are replayed."""
        return str(self.device) + ("+cuda-graphs" if self.static is not None and self.static.graphs else "")

    def row_masks(self, visible: torch.Tensor, q_index: torch.Tensor, distances: torch.Tensor | None = None,
                  on_device: bool = True):
        """(N, K) boolean, one query per row at key index ``q_index`` (N,) -> the decoder's ``attention_mask`` for a
        packed forward: (N, 1, 1, K), or a dict of them (``render_row_masks``); on the CPU unless ``on_device``."""
        return render_row_masks(visible[:, None, :], q_index[:, None], self.attention_types, self.window,
                                self.dtype, self.device if on_device else None, self.alibi,
                                None if distances is None else distances[:, None, :])

    def check_positions(self, positions: list[int]) -> None:
        if self.max_positions is not None and positions and max(positions) >= self.max_positions:
            raise ContextOverflowError(
                f"the stream needs position id {max(positions)}, beyond the model's context of {self.max_positions} "
                f"positions; split the input into shorter lines (or use a smaller slot / phi)")

    @torch.no_grad()
    def forward(self, ids: list[int], positions: list[int], visible: torch.Tensor, query_start: int,
                cache=None, logits_to_keep: int = 1, target_side: torch.Tensor | None = None,
                distance: Distance = Distance(), embedded: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
        """Feed ``ids`` (the queries, which follow ``query_start`` cached keys). Returns (logits of the last
        ``logits_to_keep`` queries, or all when 0; FLOPs). ``target_side``, ``distance``: see ``masks``;
        ``embedded``: see ``embed``."""
        self.check_positions(positions)
        keep: int | torch.Tensor = logits_to_keep
        if 0 < logits_to_keep < len(ids):
            # The rows as an index tensor: the model gathers them into a fresh tensor. An int slices a view whose
            # odd strides send torch's CPU bfloat16 linear (weights not requiring grad) to a path that copies the
            # LM head's weight on every call: 2.7 s instead of 45 ms per forward for Gemma 3's 262k vocabulary.
            keep = torch.arange(len(ids) - logits_to_keep, len(ids), device=self.device)
        ids_in = ({"inputs_embeds": self.embed(torch.tensor([ids]), embedded)} if min(ids) < 0
                  else {"input_ids": torch.tensor([ids], device=self.device)})
        out = self.model(
            **ids_in,
            position_ids=torch.tensor([positions], device=self.device),
            attention_mask=self.masks(visible, query_start, target_side, distance),
            **{self.model_cache_arg: cache},
            use_cache=cache is not None,
            logits_to_keep=keep,
        )
        rows = len(ids) if logits_to_keep == 0 else min(logits_to_keep, len(ids))
        flops = self.compute.flops(len(ids), int(visible.sum()), rows)
        return out.logits[0].float(), flops


    def embed(self, ids: torch.Tensor, embedded: torch.Tensor | None = None) -> torch.Tensor:
        """Input embeddings of ``ids`` (any shape); ids < 0 take the rows of ``embedded`` in order (speech frames:
        they enter the model as they are, after the model's own embedding scale, e.g. Gemma's sqrt(d))."""
        own = ids < 0
        has_own = bool(own.any())  # (asked before the copy: on a GPU the answer would wait for the device)
        ids = ids.to(self.device, non_blocking=True)
        out = self.model.get_input_embeddings()(ids.clamp(min=0))
        if has_own:
            own = own.to(self.device, non_blocking=True)
            if embedded is None or embedded.shape[0] != int(own.sum()):
                raise SimulmtError(f"{int(own.sum())} embedded tokens but "
                                   f"{0 if embedded is None else embedded.shape[0]} embeddings given")
            out = out.masked_scatter(own[..., None], embedded.to(device=self.device, dtype=out.dtype))
        return out

    @torch.no_grad()
    def hidden_states(self, ids: list[int], positions: list[int], visible: torch.Tensor,
                      embedded: torch.Tensor | None = None, layer: int | None = None) -> torch.Tensor:
        """The decoder's last hidden state (after its final norm: what the LM head and a policy head read) at every
        token of one training-style forward over placed tokens; (T, hidden) float32. ``layer``: the output of that
        decoder layer instead (what a policy head on that layer reads; the layers above are not computed)."""
        self.check_positions(positions)

        def call():
            return self.decoder(inputs_embeds=self.embed(torch.tensor([ids]), embedded),
                                position_ids=torch.tensor([positions], device=self.device),
                                attention_mask=self.masks(visible, 0), use_cache=False)
        if layer is not None:
            return layer_split.run_to(self.layers, layer, call).hidden[0].float()
        return call().last_hidden_state[0].float()

    @property
    def layers(self) -> torch.nn.ModuleList:
        return layer_split.decoder_layers(self.decoder)

    @torch.no_grad()
    def forward_packed(self, queries: PackedQueries, cache, wants: Wants = Wants()) -> PackedAnswer:
        """One forward for many streams (the batched engine), packed (packed_forward.py): ``cache`` a
        ``BatchKVCache`` prepared for these queries. Returns the logits (float32) of the queries ``queries.last``,
        of those ``wants.head_rows`` or ``wants.decisions`` leave in, and, when ``wants.features``, the features of
        every answered query: their last hidden states, or with ``wants.features_layer`` the output of that decoder
        layer (what a policy head on that layer reads). With a layer and ``decisions``, when every stream reads on
        the forward ends at that layer (layer_split.py): the logits are then None, and the cache holds the fed
        tokens' keys and values for the layers up to it only (the caller crops them and feeds them again). The
        tensors returned are ordinary even when the caller runs in inference mode (the engine does): the LM head
        runs with it off. With ``static`` (on a GPU) the decoder runs as a replayed CUDA graph when the forward
        allows it (static_decoder.py)."""
        q, layer, decisions = queries, wants.features_layer, wants.decisions
        hidden = feats = None
        if layer is None and self.static is not None and self.static.serves(cache, len(q.ids)):
            hidden = self.static(q, cache)  # (R, hidden)
        if hidden is None:
            tokens = ({"inputs_embeds": self.embed(q.ids[:, None], q.embedded)} if q.embedded is not None
                      else {"input_ids": q.ids[:, None].to(self.device)})
            masks = self.row_masks(q.visible, q.q_index, q.distances)

            def call():
                return self.decoder(**tokens, position_ids=q.positions[:, None].to(self.device), attention_mask=masks,
                                    use_cache=True, **{self.decoder_cache_arg: cache})
            rows = q.last.to(self.device, non_blocking=True)
            if layer is not None:
                part = layer_split.run_to(self.layers, layer, call)
                with torch.inference_mode(False), torch.no_grad():
                    feats = part.hidden[:, 0].index_select(0, rows).float()  # (R, hidden), an ordinary tensor
                if decisions is not None and decisions.all_read_on(feats):
                    return PackedAnswer(None, feats, None)
                out = layer_split.run_from(self.layers, part, call)
            else:
                out = call()
            hidden = out.last_hidden_state[:, 0].index_select(0, rows)  # (R, hidden), contiguous
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors out, whatever mode the caller is in
            hidden = hidden.clone()  # (R rows of hidden size; the logits, R rows of the vocabulary, need no copy)
            if feats is None and (wants.features or decisions is not None):
                feats = hidden.float()
            head_rows = decisions.head_rows(feats) if decisions is not None else wants.head_rows
            heads = hidden if head_rows is None else hidden.index_select(
                0, head_rows.nonzero()[:, 0].to(self.device, non_blocking=True))
            if self.shortlist is not None:  # (soft-capped inside)
                extras = q.head_extras
                if extras is not None and head_rows is not None:
                    extras = [e for e, wanted in zip(extras, head_rows.tolist()) if wanted]
                logits = self.shortlist(heads, extras)
            else:
                logits = self.head(heads)
                if self.softcap:
                    logits = torch.tanh(logits / self.softcap) * self.softcap
            return PackedAnswer(logits.float(), feats if wants.features else None, head_rows)


class ContextOverflowError(SimulmtError):
    """The stream does not fit in the model's context."""
