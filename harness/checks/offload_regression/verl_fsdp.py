"""The rank worker of offload-regression's verl verdicts: each tiny model set up by verl's own FSDP2 path, as verl's
FSDP engine sets a model up (FSDPEngine._build_module and _build_fsdp_module), then one step through verl's engine.

Per model type (harness.checks.support.verl_engine: qwen3_5, qwen3_5_moe, qwen3_5_text), on every rank:
rank 0 saves the zoo's model; every rank loads it through verl's get_hf_auto_model_class inside verl's
get_init_weight_context_manager (rank 0 on the host, the others on meta); verl's apply_monkey_patch; float32; the
full state dict; verl's apply_fsdp2 (mesh, MixedPrecisionPolicy, CPUOffloadPolicy, reshard after forward);
verl's fsdp2_load_full_state_dict with the offload policy. Recorded: the FSDP units apply_fsdp2 made; where verl's
load leaves each parameter and buffer (`PlacementRecorder`); then one step of verl's engine (forward_step with
remove-padding on the micro-batch verl's helpers make, a loss on its log-probs, backward), watching the vision
model's fast_pos_embed_interpolate (`pos_embed_watched`: its calls, and the devices of pos_embed's index and
weight); and the same step on the same weights without FSDP.

On CPU: ranks forked from the check's process (support.ranks), gloo, verl's device named cpu:0 through verl's
platform registry (support.verl.use_cpu_platform), CPUOffloadPolicy(pin_memory=False) and float32 parameters: verl's
pin_memory=True needs an accelerator, and its bf16 default would blur the comparison. On CUDA and NPU, under
torchrun: verl's own platform, verl's CPUOffloadPolicy(pin_memory=True) and its default mixed precision (bf16
parameters, fp32 reduce), the same on rank 0 and in the reference step (autocast, as verl's forward_step does).

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        -m harness.checks.offload_regression.verl_fsdp --out RESULT.json --device cuda
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from harness.checks.offload_regression.fsdp_worker import record_embedding_calls
from harness.checks.support import verl, verl_engine

CPU_DEVICE_ID = torch.device("cpu", 0)  # verl's device on a CPU: an index the host ("cpu") does not have


class PlacementRecorder(torch.overrides.TorchFunctionMode):
    """Where verl's load leaves each parameter and buffer: the target of the last Tensor.to that reached it,
    `device` for verl's device id, else `host`. A buffer is also known by its storage (`buf.data` is a new
    tensor object each time it is read)."""

    def __init__(self, model: torch.nn.Module, device_id: torch.device):
        super().__init__()
        self.device_id = device_id
        self.names = {id(t): f"parameter:{n}" for n, t in model.named_parameters()}
        self.names.update({id(t): f"buffer:{n}" for n, t in model.named_buffers()})
        self.storage = {b.data_ptr(): f"buffer:{n}" for n, b in model.named_buffers() if not b.is_meta}
        self.keep = list(model.parameters()) + list(model.buffers())  # their ids stay theirs while recording
        self.last: dict[str, str] = {}
        self.buffer_moves: list[str] = []

    def _target(self, args: tuple, kwargs: dict) -> torch.device | None:
        target = kwargs.get("device", next((a for a in args[1:] if isinstance(a, (torch.device, str, int))), None))
        if isinstance(target, int):
            return torch.device(self.device_id.type, target)
        return None if target is None else torch.device(target)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to and args:
            target = self._target(args, kwargs)
            name = self.names.get(id(args[0]))
            if name is None and target is not None:
                with contextlib.suppress(RuntimeError, NotImplementedError):  # DTensor and meta have no storage
                    name = self.storage.get(args[0].data_ptr())
            if name is not None and target is not None:
                self.last[name] = "device" if target == self.device_id else "host"
                if name.startswith("buffer:"):
                    self.buffer_moves.append(f"{name[7:]} -> {target}")
        return func(*args, **kwargs)

    def summary(self) -> dict[str, Any]:
        buffers = {k[7:]: v for k, v in self.last.items() if k.startswith("buffer:")}
        return {"buffers_on_device": sorted(k for k, v in buffers.items() if v == "device"),
                "buffers_on_host": sorted(k for k, v in buffers.items() if v == "host"),
                "parameters_last_moved_to": sorted({v for k, v in self.last.items() if k.startswith("parameter:")}),
                "buffer_moves": self.buffer_moves[:12]}


@contextlib.contextmanager
def pos_embed_watched(model) -> Iterator[dict[str, Any]]:
    """Count the calls of the vision model's fast_pos_embed_interpolate (whatever its class holds: verl's after
    apply_monkey_patch) and record each pos_embed call's devices (fsdp_worker.record_embedding_calls)."""
    visual = getattr(getattr(model, "model", None), "visual", None)
    seen: dict[str, Any] = {"vision": visual is not None}
    if visual is None:
        yield seen
        return
    owner = next((c for c in type(visual).__mro__ if "fast_pos_embed_interpolate" in vars(c)), None)
    method = vars(owner)["fast_pos_embed_interpolate"] if owner else None
    seen.update(method=verl.qualname(method) if method else None, method_calls=0,
                verl_method=bool(method and getattr(method, "__module__", "").startswith("verl.")))
    if method is not None:
        @functools.wraps(method)
        def counted(*args, **kwargs):
            seen["method_calls"] += 1
            return method(*args, **kwargs)

        owner.fast_pos_embed_interpolate = counted
    try:
        with record_embedding_calls(visual.pos_embed) as calls:
            yield seen
    finally:
        if method is not None:
            owner.fast_pos_embed_interpolate = method
        seen["embedding_calls"] = [c.to_dict() for c in calls][:4]
        seen["index_off_weight_device"] = any(c.mismatch for c in calls)


def _step(module, param_dtype) -> tuple[float, list, dict[str, Any]]:
    """One step of verl's engine on `module`: the loss, the log-probs and what pos_embed saw."""
    with pos_embed_watched(module) as seen:
        td = verl_engine.micro_batch(module, verl_engine.make_rows(module), use_remove_padding=True)
        loss, logprobs = verl_engine.step(verl_engine.engine(module, param_dtype), td, verl_engine.log_prob_loss)
        loss.backward()
    return float(loss.detach()), logprobs, seen


def _verl_pass(model_type: str, folder: Path, mesh, plan, device_id, seed: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy
    from transformers import AutoConfig
    from verl.utils.fsdp_utils import apply_fsdp2, fsdp2_load_full_state_dict, get_init_weight_context_manager
    from verl.utils.model import get_hf_auto_model_class

    path, cpu = folder / model_type, plan.type == "cpu"
    record: dict[str, Any] = {"pin_memory": not cpu, "param_dtype": "float32" if cpu else "bfloat16"}
    start = time.perf_counter()
    if dist.get_rank() == 0:
        verl_engine.build_model(model_type, seed).save_pretrained(path)
    dist.barrier()
    param_dtype = torch.float32 if cpu else torch.bfloat16
    with verl_engine.patches_restored():
        try:
            config = AutoConfig.from_pretrained(path)
            with get_init_weight_context_manager(use_meta_tensor=not config.tie_word_embeddings, mesh=mesh)():
                module = get_hf_auto_model_class(config).from_pretrained(path, torch_dtype=torch.float32, config=config)
            verl_engine.apply_patch(module)
            module.to(torch.float32)
            offload = CPUOffloadPolicy(pin_memory=not cpu)
            fsdp_kwargs = {"mesh": mesh, "offload_policy": offload, "reshard_after_forward": True,
                           "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32,
                                                             cast_forward_inputs=True)}
            full_state = module.state_dict()
            apply_fsdp2(module, fsdp_kwargs, {})
            recorder = PlacementRecorder(module, device_id)
            with recorder:
                fsdp2_load_full_state_dict(module, full_state, mesh, offload)
            record["units"] = [n or "<root>" for n, m in module.named_modules() if isinstance(m, FSDPModule)]
            record["placement"] = recorder.summary()
            record["loss"], logprobs, record["pos_embed"] = _step(module, param_dtype)
            reference = verl_engine.build_model(model_type, seed).to(plan.device(int(os.environ.get("LOCAL_RANK", 0))))
            record["reference_loss"], reference_logprobs, _ = _step(reference, param_dtype)
            record["max_abs_logprob_err"] = max(float((a - b).abs().max()) for a, b in
                                                zip(logprobs, reference_logprobs, strict=True))
        except Exception as exc:  # noqa: BLE001 - verl's set-up or step failing is the finding
            record["failure"] = verl_engine.failure(exc)
    record["seconds"] = round(time.perf_counter() - start, 2)
    dist.barrier()
    return record


def worker(out: Path, seed: int = 0, device: str | None = None) -> None:
    """One rank: join the process group, set up and step each model type, rank 0 writes `out`."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from trainers.runtime.device import plan as device_plan
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    plan = device_plan(device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if plan.type == "cpu":
        device_id, platform = CPU_DEVICE_ID, verl.use_cpu_platform(CPU_DEVICE_ID)
    else:
        getattr(torch, plan.type).set_device(local_rank)
        device_id, platform = plan.device(local_rank), "verl's own platform"
    dist.init_process_group(plan.dist_backend)
    mesh = init_device_mesh(plan.type, (dist.get_world_size(),))
    out = Path(out)  # the check runs this part only where transformers has Qwen3.5
    models = {model_type: _verl_pass(model_type, out.parent / "verl_models", mesh, plan, device_id, seed)
              for model_type in verl_engine.MODEL_TYPES}
    if dist.get_rank() == 0:
        report = {"device": plan.type, "world_size": dist.get_world_size(), "platform": platform, "models": models}
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1, default=str))
        os.replace(tmp, out)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)
    worker(**vars(parser.parse_args(argv)))
    os._exit(0)  # as fsdp_worker: no interpreter teardown after the process group is gone


if __name__ == "__main__":
    main()
