"""How the engine and its streams compute: switches that never change what is written.

Every switch here leaves the output the same (predictions, delays, logits: the tests named at each compare on and
off); they change how many forwards, rows and layers the same output costs. Their off values exist to measure what
each saves (benchmarks/) and to test that it saves nothing else. One value per model runner: the runner carries it
(``ModelRunner(model, Execution(...))``, ``Translator(..., execution=)``), every engine on that runner serves with
it, and a stream takes it when it joins an engine (a stream's own output never depends on it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Execution:
    speculate: bool = True  # feed guesses of what the layout places next (guesses.py; tests/test_speculation.py)
    alternatives: int = 0  # the model's next choices fed beside the guess (opt-in: 2 saves forwards for one live
    # stream; a forward shared by several streams feeds none, nor does an ALiBi model's: docs/speech-cascade.md)
    read_ahead: bool = True  # mid-word, feed what a READ would place when its source is here already (guesses.py)
    moved_guesses: bool = False  # read-ahead also where the READ moves the list's last token after what it places
    # (expost, gpe, naive): the guess places it again, and the row drops the first one if the guess is used (not
    # for an ALiBi model, whose key distances count cache slots). Opt-in: a read then costs no forward of its own
    # (8% fewer forwards for expost wait-3: a word's first token comes a forward sooner), but every token of a
    # word feeds the guess (5% fewer rounds for 40-65% more host time with a zero-cost model): docs/engine-speed.md
    stop_at_head: bool = True  # a policy head on an inner layer: a READ stops the forward there (layer_split.py;
    # tests/test_layer_split.py)
    inference_mode: bool = True  # serve in torch.inference_mode (False: torch.no_grad; engine.py)
    cuda_graphs: bool = True  # on a GPU, run forwards as replayed CUDA graphs (static_decoder.py); read when the
    # runner is made

    def __post_init__(self):
        if self.alternatives < 0:
            raise ValueError(f"alternatives must be 0 or more, got {self.alternatives}")


# ---- the process: Python's cyclic garbage collector ------------------------------------------------------------
COLLECTOR_THRESHOLDS = (50_000, 20, 10)  # Python's defaults: (700, 10, 10)


def tune_collector(thresholds: tuple[int, int, int] = COLLECTOR_THRESHOLDS) -> tuple[int, int, int]:
    """Collect cyclic garbage less often in a process that runs the engine; returns the thresholds it replaced.

    Process-wide, so applications call it, not the library: ``simulmt``'s commands (``cli.main``), and a program
    of your own that serves many streams. A loaded model and tokenizer are hundreds of thousands of long-lived
    objects, and the engine creates many small ones every round (placed tokens, requests); with Python's default
    thresholds the collector's full passes over that heap took 30-40% of the engine's own time at 64-256 streams
    (``benchmarks/engine_cost.py --collector default|tuned``; docs/engine-speed.md). With these thresholds a young collection
    runs every 50,000 allocations instead of 700, and a full one every 10,000,000 allocations: garbage in
    reference cycles lives longer (objects without cycles are freed at once either way), nothing leaks."""
    import gc

    previous = gc.get_threshold()
    gc.set_threshold(*thresholds)
    return previous
