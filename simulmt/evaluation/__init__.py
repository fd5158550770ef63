"""Evaluate a grid of layouts x policies on a line-aligned test set, resumably, and score it.

    simulmt evaluate --source tst.en --reference tst.de --layouts expost,prefix --ks 1,3,5 --output runs/x

    runs/x/
      expost-slot16.wait-1/  config.json  instances.log  scores.json     one directory per run
      prefix.wait-3/         ...
      offline/               ...                                         expost layout, Offline policy
      results.md  results.json  bleu_laal.png                            the whole grid

* A *run* is one (layout, policy, k or n) over the sentences. ``instances.log`` is SimulEval's JSON-lines log
  (``index, prediction, delays, elapsed, prediction_length, reference, source, source_length``, plus simulmt's
  cost counters). Each finished sentence is appended, flushed and fsynced at once, so a killed run loses at most
  the sentence in flight; rerunning continues after the last complete line (a torn last line is cut off and
  translated again). ``config.json`` says what produced the log; a rerun with other settings is refused.
* ``scores.json`` is a pure function of ``instances.log`` and the recorded settings (``simulmt score`` redoes it
  without the model): BLEU and chrF (sacrebleu, with signatures), the latency metrics of :mod:`simulmt.metrics`
  (SimulEval 1.1.4 definitions, in source words), their computation-aware variants ``*_CA`` in ms (delay x
  ``ms_per_word`` + wall time elapsed when the word was written), mean tokens fed, GFLOPs and wall ms.
* ``simuleval --score-only --output RUN`` reads the same log (a ``config.yaml`` saying text-to-text is written
  for it); it agrees on BLEU, AL, LAAL, AP, DAL and the offsets, not on ATD (it reports 0 for a text log) nor on
  the ``_CA`` variants (it would take ``elapsed`` for delays in source units).

Sharded (``--shard I/N``, or the rank under torchrun / accelerate launch): shard I translates its block of every
run's sentences (with ``--docids``, of its whole talks, balanced by source words) into ``DIR/shards/I-of-N/<run>/``
(resumable like any run); the shard that finds all N finished merges them into ``DIR/<run>/``, which is then what
one process writes (the same ``instances.log`` lines in the same order, timings aside; the same scores and
signatures), and writes the grid's reports. Rerunning any shard's command merges again.

Python: ``evaluate(translator, EvaluateOptions(...)) -> list[RunResult]``; ``score_path(path)`` rescores (both in
``simulmt.evaluation.grid``; import each name from the file that defines it).

Read it bottom up, each file one concept:

* ``runs``: one run of the grid (``RunSpec``: a layout, a policy, its k, n or tau; ``RunResult``);
* ``options``: ``EvaluateOptions`` and ``ScoreOptions``, the typed options of ``simulmt evaluate`` / ``score``;
* ``testset``: the line-aligned source (text, or a list of recordings) and references, with their hashes;
* ``run_dir``: a run directory: config.json, the resumable instances.log, its lock, ``translate_run``;
* ``scores``: scores.json, a pure function of the log and the recorded settings;
* ``reports``: the grid's results.md, results.json, bleu_laal.png (drawn by ``plots``) and the table on the terminal;
* ``grid``: ``evaluate`` (every run of the grid), its shards and their merge, ``score_path``;
* ``command``: ``simulmt evaluate`` and ``simulmt score``.

simulmt under the community's own harnesses (each module needs its harness installed; ``import simulmt`` imports
none of them):

* ``simuleval_agent``, ``simuleval_speech_agent``: SimulEval 1.1.4 agents, text-to-text and speech-to-text (the
  recogniser cascade, or a speech model);
* ``simulstream_processor``: a SimulStream speech processor (the IWSLT harness): the cascade on whole talks.
"""
