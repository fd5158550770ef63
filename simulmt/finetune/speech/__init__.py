"""The speech model's training side (EASiST's stages on a frozen LLM, ``simulmt finetune-speech``) and the speech
corpus it trains on.

* ``synth``: a reproducible speech corpus synthesised from parallel text (espeak-ng, sox) with exact word times
  (``python -m simulmt.finetune.speech.synth corpus ...``; the demo speaks its sentences with it too);
* ``options``: ``SpeechTrainOptions``, the typed options of ``simulmt finetune-speech`` (light);
* ``train``: the stages ctc, align, simul and policy, writing a speech model folder that
  ``simulmt.speech.model.SpeechTranslator`` loads.
"""
