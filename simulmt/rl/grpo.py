"""GRPO over SeqPO trajectories (Shao et al.; SeqPO-SiMT eq. 3), with a KL penalty to the reference policy.

For a group of B trajectories of one sentence with rewards r_i, the advantage of every token of trajectory i is
A_i = (r_i - mean(r)) / std(r). Per token t of trajectory i (the tokens the model chose: the labelled positions
of its placed list)::

    loss_i,t = -A_i * exp(logp - logp.detach())  +  beta * KL_t,   KL_t = exp(ref - logp) - (ref - logp) - 1

averaged over the tokens of a trajectory, then over trajectories (DeepSeekMath's GRPO with one update per batch
of samples, so the ratio is 1 and its gradient is A_i * grad logp; KL_t is the unbiased, non-negative "k3"
estimator of KL(pi || ref)). ``logp`` comes from ONE training forward over each trajectory's placed list with the
layout's mask: the same numbers the stream sampled from (the parity invariant), not an approximation.

Why not TRL's ``GRPOTrainer``: its rollout is ``generate`` on a fixed prompt, while a SeqPO rollout interleaves
source chunks the model did not write and closes turns it did, with the cache reused across steps; the loss itself
is a dozen lines, and computing ``logp`` with the layout's own mask is what makes it exact.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from simulmt.core.alibi import adopt_alibi
from simulmt.core.examples import IGNORE, TrainingExample
from simulmt.core.layouts import SeqPO
from simulmt.core.runner import attention_spec
from simulmt.finetune import data
from simulmt.finetune.collator import SimulCollator
from simulmt.rl.reward import normalise


@dataclass
class GRPOStats:
    loss: float
    kl: float  # mean per-token KL (k3) to the reference
    tokens: int


def token_logprobs(model, examples: list[TrainingExample], pad_id: int) -> list[torch.Tensor]:
    """Per example, the log-probabilities of its labelled tokens, in order (one padded forward for all)."""
    from simulmt.finetune.trainer import label_logits

    types, window = attention_spec(model)
    collator = SimulCollator(SeqPO.visibility, types, window, pad_id, alibi=adopt_alibi(model))
    batch = collator([data.encode(ex) for ex in examples])
    batch.pop("real_tokens")
    dtype = next(p.dtype for p in model.parameters())
    logits, labels = label_logits(model, batch, dtype)
    logp = F.log_softmax(logits.float(), dim=-1).gather(1, labels[:, None])[:, 0]
    counts = [sum(label != IGNORE for label in ex.labels) for ex in examples]
    return list(torch.split(logp, counts))


def group_advantages(rewards: list[float]) -> list[float]:
    return normalise(rewards)


def grpo_loss(model, examples: list[TrainingExample], advantages: list[float], pad_id: int, beta: float = 0.02,
              reference=None) -> tuple[torch.Tensor, GRPOStats]:
    """The GRPO loss of trajectories (``advantages``: one per trajectory). ``reference``: a context manager under
    which ``model`` is the reference policy (default: PEFT's ``disable_adapter``, i.e. the weights the adapter
    being trained sits on, the warm-up model merged into them); beta = 0 skips it."""
    logps = token_logprobs(model, examples, pad_id)
    if beta > 0:
        context = reference() if reference is not None else model.disable_adapter()
        with torch.no_grad(), context:
            refs = token_logprobs(model, examples, pad_id)
    else:
        refs = [lp.detach() for lp in logps]
    losses, kls, tokens = [], [], 0
    for logp, ref, advantage in zip(logps, refs, advantages):
        if logp.numel() == 0:
            continue
        delta = ref - logp
        kl = torch.exp(delta) - delta - 1
        ratio = torch.exp(logp - logp.detach())
        losses.append((-advantage * ratio + beta * kl).mean())
        kls.append(kl.detach().mean())
        tokens += logp.numel()
    if not losses:
        zero = sum(lp.sum() for lp in logps) * 0.0
        return zero, GRPOStats(0.0, 0.0, 0)
    loss = torch.stack(losses).mean()
    return loss, GRPOStats(float(loss.detach()), float(torch.stack(kls).mean()), tokens)


def no_reference():
    """A ``reference`` for a model without an adapter to switch off (tests): the model itself."""
    return contextlib.nullcontext()
