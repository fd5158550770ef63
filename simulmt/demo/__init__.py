"""``simulmt demo``: a few sentences streamed, every READ and WRITE shown as it happens.

* ``text``: English sentences arrive a word at a time and are translated into German;
* ``speech``: ``--audio`` (``--speech-model DIR``): spoken sentences (espeak-ng, or the shipped sample) arrive a
  piece at a time, with what the recogniser or the speech model heard.
"""
