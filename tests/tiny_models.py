"""Tiny, deterministic tokenizer and randomly initialised decoder-only models for tests.

Nothing here touches the network: the tokenizer is a small BPE trained in memory on an
embedded multilingual corpus, and the models are freshly initialised from a seed.

Public API:
    make_tokenizer(chat=False) -> transformers.PreTrainedTokenizerFast   (cached)
    ARCHS = ("llama", "qwen2", "gemma3", "mistral", "phi3")
ALIBI_ARCHS = ("bloom", "falcon")
    make_model(arch, vocab_size, seed=0, attn_implementation="eager") -> PreTrainedModel

Special token ids are fixed: <pad>=0, <unk>=1, <bos>=2, <eos>=3, <start_of_turn>=4,
<end_of_turn>=5.  The tokenizer does NOT add <bos> automatically (no post-processor);
callers (or the chat template) add it explicitly.
"""

from __future__ import annotations

import functools
import os

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = [
    "ARCHS",
    "ALIBI_ARCHS",
    "CORPUS",
    "SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "make_tokenizer",
    "make_model",
]

SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>")
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

TOKENIZER_VOCAB_SIZE = 300

CORPUS = (
    # English
    "The weather is nice today.",
    "I would like a cup of coffee, please.",
    "Where is the train station?",
    "My brother works in a hospital in Berlin.",
    "We are going to the cinema tonight.",
    "The children are playing in the garden.",
    "Can you help me with my homework?",
    "She reads a book every evening before sleeping.",
    "The meeting starts at nine o'clock tomorrow morning.",
    "Translation of speech in real time is difficult.",
    "Thank you very much for your patience.",
    "The government announced new measures yesterday.",
    "This restaurant serves excellent vegetarian food.",
    "Please close the window, it is getting cold.",
    "How much does the ticket cost?",
    "Our teacher explained the problem very clearly.",
    # German
    "Das Wetter ist heute schön.",
    "Ich hätte gern eine Tasse Kaffee, bitte.",
    "Wo ist der Bahnhof?",
    "Mein Bruder arbeitet in einem Krankenhaus in Berlin.",
    "Wir gehen heute Abend ins Kino.",
    "Die Kinder spielen im Garten.",
    "Kannst du mir bei meinen Hausaufgaben helfen?",
    "Sie liest jeden Abend vor dem Schlafen ein Buch.",
    "Die Besprechung beginnt morgen früh um neun Uhr.",
    "Die Übersetzung von Sprache in Echtzeit ist schwierig.",
    "Vielen Dank für Ihre Geduld.",
    "Die Regierung hat gestern neue Maßnahmen angekündigt.",
    "Dieses Restaurant serviert ausgezeichnetes vegetarisches Essen.",
    "Bitte schließ das Fenster, es wird kalt.",
    "Wie viel kostet die Fahrkarte?",
    "Unser Lehrer hat das Problem sehr deutlich erklärt.",
    # French
    "Il fait beau aujourd'hui.",
    "Je voudrais une tasse de café, s'il vous plaît.",
    "Où est la gare?",
    "Mon frère travaille dans un hôpital à Berlin.",
    "Nous allons au cinéma ce soir.",
    "Les enfants jouent dans le jardin.",
    "Merci beaucoup pour votre patience.",
    "La traduction simultanée est très difficile.",
)

# Characters that must always be representable even if absent from CORPUS.
_EXTRA_ALPHABET = list("\n0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!?'\":;-()")

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def _train_backend() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # Newlines are isolated tokens.  Metaspace with prepend_scheme="first": spaces become "▁"
    # and only the text at the very start of the input gets a dummy "▁" prefix (so text right
    # after a special token or a newline is not prefixed, and chat prompts round-trip exactly).
    # The decoder maps "▁" back to spaces and strips the leading one of the first token.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=_EXTRA_ALPHABET + ["▁"],
        show_progress=False,
    )
    tok.train_from_iterator(list(CORPUS), trainer=trainer)
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


@functools.lru_cache(maxsize=None)
def make_tokenizer(chat: bool = False) -> transformers.PreTrainedTokenizerFast:
    """Small in-memory BPE tokenizer (~300 tokens, Metaspace/SentencePiece style).

    Cached per ``chat`` value: the returned object is shared, do not mutate it in tests.
    """
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_train_backend(),
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok


ARCHS = ("llama", "qwen2", "gemma3", "mistral", "phi3")
ALIBI_ARCHS = ("bloom", "falcon")

_COMMON = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    pad_token_id=PAD_ID,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    tie_word_embeddings=False,
    use_cache=True,
)

# Default init (std 0.02) on a 32-dim model gives almost flat logits whose argmax is the same
# token at every position; a larger std makes greedy decoding produce varied tokens.
_INIT_STD = 0.25


def _config(arch: str, vocab_size: int) -> transformers.PretrainedConfig:
    kw = dict(_COMMON, vocab_size=vocab_size, initializer_range=_INIT_STD)
    if arch == "llama":
        return transformers.LlamaConfig(head_dim=8, **kw)
    if arch == "qwen2":
        return transformers.Qwen2Config(head_dim=8, use_sliding_window=False, **kw)
    # mistral: every layer slides (window 8, far shorter than the test sequences): the single-type sliding mask
    if arch == "mistral":
        return transformers.MistralConfig(head_dim=8, sliding_window=8, **kw)
    if arch == "phi3":
        return transformers.Phi3Config(sliding_window=None, **kw)
    if arch == "gemma3":
        # Real Gemma 3 ties lm_head to the (sqrt(hidden)-scaled) input embedding; in a tiny random
        # model that makes every position predict its own input token, so keep them untied.
        return transformers.Gemma3TextConfig(
            head_dim=8,
            query_pre_attn_scalar=8,
            sliding_window=6,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            **kw,
        )
    # ALiBi models (no position ids): Bloom, and Falcon in its RW form (falcon-rw-1b: alibi, no parallel attention)
    alibi = dict(vocab_size=vocab_size, hidden_size=32, initializer_range=_INIT_STD, pad_token_id=PAD_ID,
                 bos_token_id=BOS_ID, eos_token_id=EOS_ID, tie_word_embeddings=False, use_cache=True)
    if arch == "bloom":
        return transformers.BloomConfig(n_layer=3, n_head=4, **alibi)
    if arch == "falcon":
        return transformers.FalconConfig(num_hidden_layers=3, num_attention_heads=4, alibi=True, multi_query=False,
                                         new_decoder_architecture=False, parallel_attn=False, bias=True,
                                         max_position_embeddings=512, **alibi)
    raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS + ALIBI_ARCHS}")


# Where the tiny models run: the CPU (the default, and CI's), or ``SIMULMT_TEST_DEVICE=cuda`` to run the core's
# tests on a GPU in float32 (the files benchmarks/gpu_check.sh lists: parity, engine, speculation, decoding, learned
# policy, SimulMask; other tests may build CPU tensors of their own).
TEST_DEVICE = os.environ.get("SIMULMT_TEST_DEVICE", "cpu")

_MODEL_CLASSES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "bloom": "BloomForCausalLM",
    "falcon": "FalconForCausalLM",
}


def make_model(
    arch: str, vocab_size: int, seed: int = 0, attn_implementation: str = "eager"
) -> transformers.PreTrainedModel:
    """Tiny random float32 causal LM in eval mode (deterministic for a given seed), on ``TEST_DEVICE``."""
    config = _config(arch, vocab_size)
    cls = getattr(transformers, _MODEL_CLASSES[arch])
    torch.manual_seed(seed)
    model = cls._from_config(config, attn_implementation=attn_implementation, dtype=torch.float32)
    model.to(TEST_DEVICE)  # the weights are drawn on the CPU, so a seed gives the same model on every device
    model.eval()
    return model


def set_execution(monkeypatch, translator, **switches) -> None:
    """For this test, ``translator``'s engines compute with these switches (simulmt.core.execution: each keeps the
    output the same; a test compares on and off)."""
    from dataclasses import replace

    monkeypatch.setattr(translator.runner, "execution", replace(translator.runner.execution, **switches))
