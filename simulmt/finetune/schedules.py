"""Training schedules: for each target word j (1-based), g(j) = how many source words are read before it is written.

Source and target are whitespace words (as SimulEval and the streaming engine count them). |X| = source words,
|Y| = target words.

* wait-k:   g(j) = min(k + j - 1, |X|)                               (Ma et al., 2019; = ``policies.WaitK``)
* read-n:   g(j) = min(n * ceil(ceil(j * |X| / |Y|) / n), |X|)
            Without a word aligner, target word j is taken to cover the proportional source span
            ((j-1)|X|/|Y|, j|X|/|Y|]; it is written once the read-n policy has read a multiple of n words that
            covers the END of that span. So the source is read in chunks of n words, each followed by the target
            words proportional to it (a chunk may get none: its source then joins the next chunk's).
* offline:  g(j) = |X|                                                 (read everything, then write)

``--k-mix 1,3,5,7,9`` draws one k per sentence pair (seeded), so one model learns every k of the mix.
``--policy mixed`` draws the family too: half the pairs wait-k (``--k-mix``), half read-n (``--n-mix``). An
interleaved model served by a learned policy needs both: read-n's chunks of several words, and wait-k's long
tails after the last read (a policy that lags has a backlog to write once the source ends).

    wait-2, |X| = 5, |Y| = 4:   g = 2 3 4 5
    read-2, |X| = 5, |Y| = 4:   ceil(j*5/4) = 2 3 4 5  ->  g = 2 4 4 5
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from simulmt.errors import SimulmtError
from simulmt.core.policies import wait_k_delays


def wait_k(k: int, source_length: int, target_length: int) -> list[int]:
    if k < 1:
        raise SimulmtError(f"wait-k needs k >= 1, got {k}")
    return wait_k_delays(k, source_length, target_length)


def read_n(n: int, source_length: int, target_length: int) -> list[int]:
    if n < 1:
        raise SimulmtError(f"read-n needs n >= 1, got {n}")
    out = []
    for j in range(1, target_length + 1):
        covered = -(-j * source_length // target_length)  # ceil(j |X| / |Y|)
        out.append(min(n * -(-covered // n), source_length))
    return out


def offline(source_length: int, target_length: int) -> list[int]:
    return [source_length] * target_length


@dataclass(frozen=True)
class Schedule:
    """A schedule family: ``policy`` in wait-k | read-n | mixed | offline; ``ks`` (wait-k) has one k, or the
    k-mix; ``ns`` (read-n), when given, the n-mix (one n drawn per pair; ``n`` otherwise); mixed: wait-k or read-n
    drawn per pair, each as above."""

    policy: str
    ks: tuple[int, ...] = (3,)
    n: int = 3
    ns: tuple[int, ...] = ()

    def __post_init__(self):
        if self.policy not in ("wait-k", "read-n", "mixed", "offline"):
            raise SimulmtError(f"unknown training schedule {self.policy!r}; choose wait-k, read-n, mixed or offline")
        if self.policy in ("wait-k", "mixed") and (not self.ks or min(self.ks) < 1):
            raise SimulmtError(f"wait-k needs k >= 1, got {list(self.ks)}")
        if self.policy in ("read-n", "mixed") and min((self.n, *self.ns)) < 1:
            raise SimulmtError(f"read-n needs n >= 1, got {[self.n, *self.ns]}")

    def delays(self, source_length: int, target_length: int, rng: random.Random) -> tuple[list[int], str]:
        """(delays, the schedule's name, e.g. ``wait-3``) for one sentence pair; ``rng`` draws the k of a mix."""
        if self.policy == "offline":
            return offline(source_length, target_length), "offline"
        policy = self.policy if self.policy != "mixed" else rng.choice(("wait-k", "read-n"))
        if policy == "read-n":
            n = rng.choice(self.ns) if self.ns else self.n
            return read_n(n, source_length, target_length), f"read-{n}"
        k = self.ks[0] if len(self.ks) == 1 else rng.choice(self.ks)
        return wait_k(k, source_length, target_length), f"wait-{k}"

    def describe(self) -> str:
        if self.policy == "mixed":
            return (f"mixed: {Schedule('wait-k', self.ks).describe()} + "
                    f"{Schedule('read-n', n=self.n, ns=self.ns).describe()}")
        if self.policy == "wait-k":
            return f"wait-k mix {','.join(map(str, self.ks))}" if len(self.ks) > 1 else f"wait-{self.ks[0]}"
        if self.policy == "read-n" and self.ns:
            return f"read-n mix {','.join(map(str, self.ns))}"
        return f"read-{self.n}" if self.policy == "read-n" else "offline"
