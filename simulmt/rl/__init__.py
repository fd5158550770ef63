"""Sequential policy optimisation (SeqPO-SiMT, Xu et al.): reinforcement learning over the whole simultaneous
process. ``reward``: the fused quality-latency reward of a group of trajectories (pure functions of plain lists);
``rollout``: B sampled trajectories per sentence through the batched engine (``seqpo`` layout, read-m);
``grpo``: the GRPO loss over those trajectories with a KL penalty to the reference (the warm-up adapter)."""
