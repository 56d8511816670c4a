"""A stand-in for a vLLM engine with sleep mode, over the trainer's Hugging Face engine (no vLLM needed).

Sleep as vLLM does it: level 1 keeps a host copy of the weights, level 2 drops them; either way the engine's own
tensors are then filled with NaN (device pages handed back hold anything). Waking the "weights" brings back the
host copy (level 1) or leaves the NaN for the weight sync to overwrite (level 2); waking the "kv_cache" calls
`on_kv_wake(model)`, where a broken wake is put.
"""
from __future__ import annotations

import torch

from trainers.rollout.hf import HFRollout

GDN_STATE = ("A_log", "dt_bias", "conv1d.weight")  # the Gated DeltaNet layers' state-space tensors


class SleepingStandIn(HFRollout):
    def __init__(self, policy, on_kv_wake=None):
        super().__init__(policy)
        self.on_kv_wake = on_kv_wake
        self.host_copy: dict[str, torch.Tensor] | None = None
        self.asleep: set[str] = set()
        self.calls: list[str] = []

    @torch.no_grad()
    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep({level})")
        state = self.model.state_dict()
        self.host_copy = {k: v.detach().clone() for k, v in state.items()} if level == 1 else None
        for tensor in state.values():
            if tensor.is_floating_point():
                tensor.fill_(float("nan"))
        self.asleep = {"weights", "kv_cache"}

    @torch.no_grad()
    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(f"wake_up({tags})")
        tags = sorted(self.asleep) if tags is None else tags
        if "weights" in tags and self.host_copy is not None:
            for key, tensor in self.model.state_dict().items():
                tensor.copy_(self.host_copy[key])
            self.host_copy = None
        if "kv_cache" in tags and self.on_kv_wake is not None:
            self.on_kv_wake(self.model)
        self.asleep -= set(tags)

    def generate(self, *args, **kwargs):
        if self.asleep:
            raise RuntimeError(f"generate while {sorted(self.asleep)} sleep")
        return super().generate(*args, **kwargs)


@torch.no_grad()
def zero_ssm_state(model) -> None:
    """What a broken wake does: the Gated DeltaNet layers' state-space tensors come back as zeros."""
    for name, tensor in model.named_parameters():
        if ".linear_attn." in name and name.endswith(GDN_STATE):
            tensor.zero_()


def standin_engines(on_kv_wake=None):
    """(start, fresh) for sleep_wake.sleep_wake_verdicts: the stand-in that sleeps, and a fresh HF engine."""
    return (lambda kind, policy: SleepingStandIn(policy, on_kv_wake),
            lambda kind, policy: HFRollout(policy))


def standin_verdicts(monkeypatch, on_kv_wake=None, cycle=None, kind: str = "text", cycles=(1, 2)) -> dict:
    """sleep_wake's verdicts of `kind` on the stand-in engines, by their last name part ("sleep-wake", ...); the
    stand-in sleeps on any platform."""
    from harness.checks import CheckOptions
    from harness.checks.support import vllm_engine
    from harness.checks.vllm_rollout import sleep_wake

    monkeypatch.setattr(vllm_engine, "sleep_mode_refusal", lambda: None)
    start, fresh = standin_engines(on_kv_wake)
    return {v.name.split("/")[1]: v for v in sleep_wake.sleep_wake_verdicts(
        kind, CheckOptions(), {"name": "stand-in", "version": "0"}, start=start, fresh=fresh,
        cycle=cycle or sleep_wake.default_cycle, cycles=cycles)}
