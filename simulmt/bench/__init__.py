"""``simulmt bench``: what streaming costs, measured in one run with a real model.

* ``command``: the command and the text bench: every layout x policy against offline decoding, freely and on the
  same output (``simulmt bench --source FILE``);
* ``throughput``: many streams on one model, ``--streams 1,4,16``: throughput, per-stream latency and memory;
* ``speech``: the speech front end streamed over WAV files, ``--audio``: real-time factor, encoder and LLM cost.
"""
