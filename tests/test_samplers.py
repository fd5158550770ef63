"""Greedy's argmax is torch's argmax (the first maximum), found blockwise for speed: the same index on vectors of
every length around the block size, with ties, -inf masks and NaN."""

from __future__ import annotations

import pytest
import torch

from simulmt.core.samplers import BLOCK, Greedy, first_argmax


@pytest.mark.parametrize("n", [1, 7, BLOCK, BLOCK + 1, 2 * BLOCK - 1, 49152, 262144, 262144 + 11])
def test_first_argmax_is_torchs_argmax(n):
    generator = torch.Generator().manual_seed(n)
    for trial in range(12):
        x = torch.randn(n, generator=generator)
        if trial % 3 == 0:  # most of the vocabulary masked, as the stream's rules do
            x[torch.rand(n, generator=generator) < 0.9] = float("-inf")
        if trial % 4 == 1:  # many ties: the first one wins
            x = torch.round(x)
        if trial == 5:
            x[n // 2] = float("nan")  # torch's argmax takes a NaN for the maximum
        assert first_argmax(x) == int(torch.argmax(x)), (n, trial)
    assert first_argmax(torch.full((n,), float("-inf"))) == 0
    strided = torch.randn(2 * n, generator=generator)[::2]  # not contiguous
    assert first_argmax(strided) == int(torch.argmax(strided))


def test_greedy_takes_the_first_best_token():
    scores = torch.full((3 * BLOCK + 5,), -1.0)
    scores[[BLOCK + 3, 2 * BLOCK, 3 * BLOCK + 4]] = 2.0
    token, logprob = Greedy().choose(scores, 0)
    assert token == BLOCK + 3
    assert logprob == pytest.approx(float(torch.log_softmax(scores, -1)[BLOCK + 3]))
