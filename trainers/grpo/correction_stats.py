"""The truncated importance-sampling (TIS) statistics of one update, summed over its mini-batches
and reduced over data-parallel ranks, for the metrics line (objective.policy_loss computes them per
call). Without them a run whose correction is switched off looks like one whose correction is on."""
from __future__ import annotations

import torch.distributed as dist

from trainers.worst import worst

TOKEN_MEANS = ("is_weight_mean", "is_truncated_fraction", "is_ratio_mean")


class CorrectionStats:
    def __init__(self):
        self.sums = dict.fromkeys(TOKEN_MEANS, 0.0)
        self.tokens = 0.0
        self.ratio_max = 0.0
        self.seen = False  # the loss applied the correction (a loss setting: the same on every rank)

    def add(self, stats: dict[str, float]) -> None:
        """One policy_loss call's metrics (token means over its `tokens`)."""
        if "is_ratio_max" not in stats:
            return
        self.seen = True
        for key in TOKEN_MEANS:
            self.sums[key] += stats[key] * stats["tokens"]
        self.tokens += stats["tokens"]
        self.ratio_max = worst([self.ratio_max, stats["is_ratio_max"]])

    def record(self, all_reduce, group) -> dict[str, float]:
        """The update's token means and maximum over ranks ({} when the correction was not applied);
        `all_reduce(values, group, op)` is the loop's reduction."""
        if not self.seen:
            return {}
        *sums, tokens = all_reduce([*(self.sums[k] for k in TOKEN_MEANS), self.tokens], group)
        ratio_max, = all_reduce([self.ratio_max], None, dist.ReduceOp.MAX)
        return {**{k: v / max(tokens, 1.0) for k, v in zip(TOKEN_MEANS, sums)}, "is_ratio_max": ratio_max}
