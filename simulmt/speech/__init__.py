"""The speech front end: speech as it reaches the core.

The streaming Whisper recogniser (``recognizer``, ``local_agreement``, ``whisper_ct2``) feeding the text model as one
talk per recording (``cascade``), or the end-to-end speech model (``model``: Whisper's streaming encoder,
``streaming_encoder``, ``encoder_top``; the speech ``adapter``; a CTC head, ``ctc``, and the words it spells,
``spelled_words``); ``loading`` builds either for every tool; ``wav`` reads recordings (any format, as 16 kHz mono) and
writes WAV files. The shipped speech model (``models/``) and sample (``samples/``) are package data. The tools that use
speech (fine-tuning, evaluation, bench, demo, the service) live with their own kind, and none of them is imported here.
"""
