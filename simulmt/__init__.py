"""simulmt: simultaneous machine translation with decoder-only LLMs (ExPosST position slots and baselines)."""

import warnings

from simulmt.errors import SimulmtError
from simulmt.core.examples import TrainingExample, build_examples
from simulmt.core.layouts import LAYOUTS, make_layout
from simulmt.core.policies import POLICIES, Action, Offline, ReadN, Scheduled, StreamState, WaitK, make_policy
from simulmt.core.session import DecodeConfig, StreamingSession, Translation, WrittenWord
from simulmt.translator import Translator

__version__ = "0.1.0"

# peft asks every model it wraps for transformers' deprecated ``is_gradient_checkpointing``: a FutureWarning at every
# adapter load and training run, about code that is neither the user's nor ours. That one warning is not shown.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning,
                        module="transformers")

__all__ = ["Action", "DecodeConfig", "LAYOUTS", "Offline", "POLICIES", "ReadN", "Scheduled", "SimulmtError",
           "StreamState", "StreamingSession", "TrainingExample", "Translation", "Translator", "WaitK",
           "WrittenWord", "build_examples", "make_layout", "make_policy", "__version__"]
