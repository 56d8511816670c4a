"""The rank worker of offload-regression: one training step of each tiny model (text, VL, MoE) under
real FSDP2 with `CPUOffloadPolicy`, sharded as the trainer shards it (for VL, `visual.pos_embed` is
its own unit), with model_passes' patch sets and batches.

It runs on 2 ranks forked from the check's process on CPU (`worker`, through harness.checks.support.ranks),
and on accelerators as

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        -m harness.checks.offload_regression.fsdp_worker --out RESULT.json [--trainer-method project|stock]

For each model the worker runs four passes on fresh models with the same seed: `reference` (stock
code, no offload), `reference_trainer` (the trainer's patch set, no offload), `trainer` (offload, the
trainer's patch set) and `upstream` (offload, stock code), and rank 0 writes what each pass saw as
JSON (`models`: kind -> pass -> record). The device comes from `trainers.runtime.device.plan`,
so the same worker runs on cpu/gloo, cuda/nccl and npu/hccl.

For VL, `record_embedding_calls` records what each forward call of the position embedding saw: its input
devices and its weight's. Under FSDP2 with `CPUOffloadPolicy` a module that is its own FSDP unit keeps its
parameters as host shards between calls; FSDP2's forward pre-hook gathers them onto the compute device. The
recorder's hook is appended, so it runs after FSDP2's own (prepended) pre-hook: it sees the weight the kernel
will use, and the verdicts detect the position-embedding bug by behaviour (an index that is not on the
weight's device), not by the text of an error.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.checks.offload_regression.model_passes import (
    MODEL_KINDS,
    TRAINER_METHODS,
    error_site,
    model_batch,
    patches_applied,
    trainer_patches,
)
from harness.files import write_json_atomic


@dataclass
class ModuleCall:
    """The devices one forward call of a module saw, after the weight was put in place."""

    input_devices: list[str]
    weight_device: str
    weight_kind: str  # the weight's class: Parameter, or DTensor under FSDP2

    @property
    def mismatch(self) -> bool:
        return any(device != self.weight_device for device in self.input_devices)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mismatch": self.mismatch}


@contextlib.contextmanager
def record_embedding_calls(module: nn.Module) -> Iterator[list[ModuleCall]]:
    """Record the input and weight devices of every forward call of `module`."""
    calls: list[ModuleCall] = []

    def record(mod: nn.Module, args: tuple) -> None:
        weight = mod.weight
        devices = [str(a.device) for a in args if isinstance(a, torch.Tensor)]
        calls.append(ModuleCall(devices, str(weight.device), type(weight).__name__))

    handle = module.register_forward_pre_hook(record)
    try:
        yield calls
    finally:
        handle.remove()


def train_step(model, batch: dict[str, torch.Tensor]) -> float:
    """Forward (for VL through the vision tower into the language model) and backward."""
    loss = model(**batch).loss
    loss.backward()
    return float(loss.detach())


def local_grad(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight's gradient on this rank (the local shard of a DTensor)."""
    grad = weight.grad
    if grad is None:
        return None
    return grad.to_local() if hasattr(grad, "to_local") else grad


def _grad_norm(model) -> float | None:
    """Norm of this rank's gradient shards over all parameters."""
    grads = [g.double().pow(2).sum() for g in (local_grad(p) for p in model.parameters()) if g is not None]
    return float(torch.stack(grads).sum().sqrt()) if grads else None


def _fsdp_pass(kind: str, name: str, args, plan, mesh, device) -> dict[str, Any]:
    """One step of the `kind` model sharded as the trainer shards it, with CPU offload unless `reference`.
    For VL it also records what `pos_embed` saw, inside its forward (`calls`) and before it (`outside`)."""
    from harness.checks.offload_regression.offload_setup import model_override
    from trainers.fsdp.parallelize import parallelize
    from trainers.models import build_model

    offload = not name.startswith("reference")
    patches = trainer_patches(args.trainer_method, plan.type) if name.endswith("trainer") else []
    result: dict[str, Any] = {"offload": offload, "patches": [p.name for p in patches], "outside": []}
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(patches_applied(patches))  # before the build: some targets are bound at build time
        model = build_model(kind, model_override(kind, args.model_config), seed=args.seed)
        parallelize(model, plan, mesh=mesh, offload=offload)
        result["buffer_devices"] = sorted({str(b.device) for b in model.buffers()})  # where fully_shard left them
        calls: list = []
        if kind == "vl":
            pos_embed = model.model.visual.pos_embed

            def seen_outside(module, args_):  # what fast_pos_embed_interpolate reads, before pos_embed's forward
                result["outside"].append({"weight_kind": type(pos_embed.weight).__name__,
                                          "weight_device": str(pos_embed.weight.device)})

            stack.callback(model.model.visual.register_forward_pre_hook(seen_outside).remove)
            calls = stack.enter_context(record_embedding_calls(pos_embed))
        try:
            batch = {k: v.to(device) for k, v in model_batch(kind, model.config, args.seed).items()}
            result["loss"] = train_step(model, batch)
            result["grad_norm"] = _grad_norm(model)
            if kind == "vl":
                grad = local_grad(pos_embed.weight)
                result["pos_embed_grad_norm"] = None if grad is None else float(grad.double().norm())
            result["raised"] = False
        except Exception as exc:  # noqa: BLE001  (any failure is a finding: which class, where, what devices)
            result.update(raised=True, error_class=type(exc).__name__, error_site=error_site(exc),
                          error=str(exc).splitlines()[0][:300] if str(exc) else "")
    result["calls"] = [c.to_dict() for c in calls]
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def worker(out: Path, trainer_method: str = "project", seed: int = 0, model_config: str | None = None,
           device: str | None = None) -> None:
    """One rank: join the process group (torchrun's, or the check's forked ranks'), run the four
    passes of each model, and rank 0 writes `out`. The caller ends the process (os._exit)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from trainers.runtime.device import plan as device_plan
    from trainers.runtime.device import set_cpu_threads

    args = argparse.Namespace(out=Path(out), trainer_method=trainer_method, seed=seed, model_config=model_config)
    set_cpu_threads()
    plan = device_plan(device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if plan.type != "cpu":
        getattr(torch, plan.type).set_device(local_rank)
    dist.init_process_group(plan.dist_backend)
    mesh = init_device_mesh(plan.type, (dist.get_world_size(),))
    from trainers.models import Qwen35Unavailable, build_config

    models = {}
    for kind in MODEL_KINDS:
        try:
            build_config(kind, model_config)
        except Qwen35Unavailable:
            continue
        models[kind] = {name: _fsdp_pass(kind, name, args, plan, mesh, plan.device(local_rank))
                        for name in ("reference", "reference_trainer", "trainer", "upstream")}
    if dist.get_rank() == 0:
        import transformers

        report = {"device": plan.type, "world_size": dist.get_world_size(), "torch": torch.__version__,
                  "transformers": transformers.__version__, "models": models}
        write_json_atomic(args.out, report)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trainer-method", choices=TRAINER_METHODS, default="project")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-config", default=None)
    parser.add_argument("--device", default=None)
    worker(**vars(parser.parse_args(argv)))
    os._exit(0)  # an abort at interpreter exit was seen after teardown otherwise


if __name__ == "__main__":
    main()
