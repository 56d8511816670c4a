"""What gate-precision measures, on one rank: the dtype each parameter has where the forward uses it under FSDP2,
the log-probs' drift from a float32 reference, and the parameters transformers keeps in float32 when it loads.

Every function here takes what it needs and returns plain data (names, dtype strings, numbers), which
`verdicts` judges; nothing here decides a status.
"""
from __future__ import annotations

import contextlib
import copy
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

GATES = ("A_log", "dt_bias")  # the parameters; the trainer's list (parallelize.FP32_PARAMETERS) is judged
BATCH, LENGTH = 4, 128  # tokens per forward: long enough for the recurrence to carry state across chunks


@contextlib.contextmanager
def one_rank_mesh(device_type: str, backend: str) -> Iterator[Any]:
    """A one-rank device mesh on a process group of this process alone (an in-memory store: no port, no peer);
    a group already here is used where it has one rank, and left as it is."""
    from torch.distributed.device_mesh import init_device_mesh

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    elif dist.get_world_size() != 1:
        raise RuntimeError(f"gate-precision runs on one rank, but this process is in a group of "
                           f"{dist.get_world_size()}")
    try:
        yield init_device_mesh(device_type, (1,))
    finally:
        if owned:
            dist.destroy_process_group()


def gate_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Qualified name -> parameter, for the parameters named A_log or dt_bias."""
    return {name: param for name, param in model.named_parameters() if name.rsplit(".", 1)[-1] in GATES}


def off_the_bf16_grid(model: nn.Module, seed: int) -> None:
    """Give dt_bias values that bf16 cannot hold exactly, as a trained checkpoint's are: transformers initialises
    it to ones, which bf16 holds exactly, so a fresh model would hide its rounding (A_log starts as the log of a
    uniform draw, already off the grid)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, bias in gate_parameters(model).items():
            if name.endswith("dt_bias"):
                bias.copy_(1.0 + 0.5 * torch.randn(bias.shape, generator=generator).to(bias.device))


def token_batch(vocab_size: int, seed: int, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab_size, (BATCH, LENGTH), generator=generator).to(device)


def logprobs(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Each next token's log-probability, in float32."""
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float()
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]


def drift(got: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    error = (got - reference).abs()
    return {"max": float(error.max()), "mean": float(error.mean())}


class ForwardDtypes:
    """The dtype of each parameter where the forward uses it: at the start of every module's forward (after
    FSDP2's own pre-forward hooks, which come first), each parameter of its subtree that is unsharded there (a
    plain tensor, not the sharded DTensor) is recorded once. A parameter whose unit gathered it is seen at the
    latest when its owner's forward starts, whatever reads it (conv1d's weight is read without calling conv1d)."""

    def __init__(self, model: nn.Module):
        self.seen: dict[str, str] = {}
        self._handles = [module.register_forward_pre_hook(self._hook(prefix, module))
                         for prefix, module in model.named_modules()]

    def _hook(self, prefix: str, module: nn.Module) -> Callable[..., None]:
        def record(*_):
            for name, param in module.named_parameters():
                full = f"{prefix}.{name}" if prefix else name
                if full not in self.seen and not isinstance(param, DTensor):
                    self.seen[full] = str(param.dtype).removeprefix("torch.")
        return record

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def stored_dtypes(model: nn.Module) -> dict[str, str]:
    """Each parameter's dtype as FSDP2 keeps it (the sharded parameter the optimizer steps on)."""
    return {name: str(p.dtype).removeprefix("torch.") for name, p in model.named_parameters()}


def sharded_run(model: nn.Module, shard: Callable[[nn.Module], None], ids: torch.Tensor,
                reference: torch.Tensor) -> dict[str, Any]:
    """Shard a copy of `model` with `shard`, run one forward, and say what it saw: the dtypes in the forward and
    as stored, the FSDP2 units made, and the drift of the log-probs; or what sharding or the forward raised (FSDP2
    refuses a unit whose parameters differ in dtype, as one with a single gate cast to bf16)."""
    from torch.distributed.fsdp import FSDPModule

    sharded = copy.deepcopy(model)
    recorder = None
    try:
        shard(sharded)
        stored = stored_dtypes(sharded)  # before the forward: the root unit stays gathered after it
        recorder = ForwardDtypes(sharded)
        got = logprobs(sharded, ids)
    except Exception as exc:  # noqa: BLE001 - the measurement: the verdicts say whose failure it is
        return {"raised": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    finally:
        if recorder is not None:
            recorder.close()
    return {"units": sorted(n or "<root>" for n, m in sharded.named_modules() if isinstance(m, FSDPModule)),
            "forward": recorder.seen, "stored": stored, "drift": drift(got, reference)}


def cast_runs(model: nn.Module, ids: torch.Tensor, reference: torch.Tensor) -> dict[str, dict[str, float]]:
    """The drift of bf16 compute without FSDP2, with the gates rounded to bf16 and with them kept float32 (all else
    the same), and of float32 compute with only the gates rounded: the gates' own share of the drift."""
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    without = logprobs(bf16, ids)
    originals = gate_parameters(model)
    for name, param in gate_parameters(bf16).items():
        param.data = originals[name].data.clone()
    with_fp32_gates = logprobs(bf16, ids)
    rounded = copy.deepcopy(model)
    for param in gate_parameters(rounded).values():
        param.data = param.data.to(torch.bfloat16).to(param.dtype)
    return {"bf16_gates_bf16": drift(without, reference), "bf16_gates_fp32": drift(with_fp32_gates, reference),
            "fp32_gates_rounded": drift(logprobs(rounded, ids), reference)}


def loaded_dtypes(model: nn.Module, work_dir: Path) -> dict[str, Any]:
    """What transformers itself keeps in float32: its declarations on the model (`_keep_in_fp32_modules` and, where
    the release has it, `_keep_in_fp32_modules_strict`), and the dtype of each gate after `from_pretrained(...,
    dtype=torch.bfloat16)` of the model saved as a checkpoint."""
    declared = {attr: sorted(getattr(model, attr, None) or [])
                for attr in ("_keep_in_fp32_modules", "_keep_in_fp32_modules_strict")}
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir) as folder:
        model.save_pretrained(folder)
        loaded = type(model).from_pretrained(folder, dtype=torch.bfloat16)
    fp32 = sorted(n for n, p in loaded.named_parameters() if p.dtype == torch.float32)
    gates = {n: str(p.dtype).removeprefix("torch.") for n, p in loaded.named_parameters()
             if n.rsplit(".", 1)[-1] in GATES}
    return {"declared": declared, "fp32_after_bf16_load": fp32, "gates_after_bf16_load": gates}
