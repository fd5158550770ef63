"""agreement_replay.py record, with the encoder window padded by silence (audio zeros) instead of log-mel zeros."""
import sys
import numpy as np
sys.path.insert(0, "/work/main/benchmarks")
import agreement_replay
from simulmt.speech import recognizer as R

orig_init = R.Whisper.__init__

def init(self, *a, **k):
    orig_init(self, *a, **k)
    fe = self.model.feature_extractor

    class FE:
        def __getattr__(self, name):
            return getattr(fe, name)

        def __call__(self, audio, *args, **kw):
            window = 16 * self.options_window
            return fe(np.pad(audio, (0, max(0, window - len(audio)))), *args, **kw)
    wrapped = FE()
    wrapped.options_window = self.options.window_ms
    self.model.feature_extractor = wrapped

R.Whisper.__init__ = init
sys.argv = ["agreement_replay.py", "record"] + sys.argv[1:]
agreement_replay.main()
