"""The core of simulmt: how a stream is laid out, decided, decoded and served, with nothing of the tools.

Read it bottom up, each file one concept:

* ``placed``: the placed token (id, position id, role, unit), shared by training and inference;
* ``visibility``: the one rule of who may attend to whom (a boolean matrix, for one stream or a batch of rows),
  and how far a key is from a query for ALiBi models;
* ``prompt_format``, ``vocabulary``: the token pieces of a prompt and what the decoder must know per token;
* ``markers``: the interleaved layout's marker tokens (end-of-read, end-of-write, end-of-translation), added to a
  model;
* ``layouts/``: where tokens go and which position ids they get (expost, prefix, naive, conversation, gpe,
  simulmask, seqpo, interleaved);
* ``decisions``, ``policies``, ``learned_policy``: READ or WRITE, as data, from a stream's state (a learned
  policy reads the model's hidden state, handed over as data too);
* ``examples``: a sentence pair laid out along a schedule, as training sees it;
* ``samplers``: greedy, seeded sampling, forced; each returns a token and its log-probability;
* ``stream_options``: a stream's layout, policy and their parameters, typed and checked once;
* ``best_tokens``, ``decoding``: every row's best allowed token at once; the decoding rules and their tables;
* ``head_scores``: every row's policy-head p(WRITE) at once (a learned policy's decisions, one product a forward);
* ``translation``, ``requests``: what a stream produces; what it asks of the engine and gets back;
* ``stream`` (+ ``stream_source``, its source side; ``proposals``, its proposal under the decoding rules;
  ``guesses``, its speculation): one sentence decoded while its source arrives, model-free (it says what it
  needs); its source units are token ids, or embeddings (speech blocks) that the engine feeds in place of token
  embeddings;
* ``sentence_ends``, ``talk``: where a sentence ends; a whole talk as one stream on one cache row, its sentences in
  turn, the last pairs as context;
* ``alibi``: ALiBi models (Bloom, Falcon-RW), their bias carried by the masks;
* ``execution``: the switches of how the engine computes (never what it writes), one value per runner;
* ``batch_cache``, ``packed_forward``, ``runner``, ``engine``: many streams served by one model, one packed
  forward per round, asked and answered as named tensors (``layer_split``, ``static_decoder``: a forward stopped
  at a layer; static shapes for CUDA graphs);
* ``prompt_cache``: a prompt's keys and values computed once and copied into every new stream that starts with it;
* ``packed_linear``: linear weights in float16 prepacked for fbgemm (CPU), a model-side option of the runner;
* ``fused_layers``: RMSNorms as one operation and gated MLPs as one product, for a model that only runs;
* ``model_patches``: the list of every change simulmt makes to a model (alibi, layer_split, fused, packed) and
  what undoes each;
* ``session``: one stream, or one talk, with an engine of its own (the live API).

Nothing here imports from the tools above it (translator, CLI, evaluation, benchmarks, fine-tuning, agent).
"""
