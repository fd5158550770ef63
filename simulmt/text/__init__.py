"""The text front end: text as it reaches the core, from files and from a live stream.

* ``text_input``: files and standard input read as lines of strict UTF-8, by one rule for every command;
* ``live_text``: text as it arrives on a live stream (a service client) -> whole words -> sentences;
* ``segment``: a long line split into sentences of at most ``--max-words`` words.

Where a sentence ends is the core's rule (``simulmt.core.sentence_ends``), which the speech front end shares.
"""
