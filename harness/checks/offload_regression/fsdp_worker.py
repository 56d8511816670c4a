"""One training step of each tiny model (text, VL, MoE), and a torchrun worker that runs it under
real FSDP2 with `CPUOffloadPolicy`, sharded as the trainer shards it (for VL, `visual.pos_embed` is
its own unit).

Used by the offload-regression check, in-process (the step and the patch selection), on 2 ranks
forked from the check's process on CPU (`worker`, through harness.checks.support.forked_ranks), and on accelerators as

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        -m harness.checks.offload_regression.fsdp_worker --out RESULT.json [--trainer-method project|stock]

For each model the worker runs four passes on fresh models with the same seed: `reference` (stock
code, no offload), `reference_trainer` (the trainer's patch set, no offload), `trainer` (offload, the
trainer's patch set) and `upstream` (offload, stock code), and rank 0 writes what each pass saw as
JSON (`models`: kind -> pass -> record). The device comes from `trainers.runtime.device.plan`,
so the same worker runs on cpu/gloo, cuda/nccl and npu/hccl.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import torch

TRAINER_METHODS = ("project", "stock")  # stock: a deliberately broken patch (the unpatched method)


OFFLOAD_FIXES = ("pos-embed-device:", "offload-device:")  # the trainer's fixes of offload device sites


def trainer_patches(method: str, device_type: str = "cpu") -> list:
    """The patches the trainer applies on `device_type` (trainers.patches.training), for this transformers.

    `stock` swaps in the unpatched method for each offload fix (a deliberately broken patch set): it
    shows the check fails where a site exists. Where no fix applies (upstream fixed the sites), both
    give the same set.
    """
    from trainers.patches.base import Patch, resolve
    from trainers.patches.training import selected

    if method not in TRAINER_METHODS:
        raise ValueError(f"unknown trainer method {method!r}; expected one of {TRAINER_METHODS}")
    applicable = [p for p in selected(device_type) if p.applicable()[0]]
    if method == "project":
        return applicable
    patches = []
    for patch in applicable:
        if patch.name.startswith(OFFLOAD_FIXES):
            owner, attr = resolve(patch.target)
            patch = Patch(f"{patch.name}:stock", patch.target, owner.__dict__[attr], versions=patch.versions)
        patches.append(patch)
    return patches


@contextlib.contextmanager
def patches_applied(patches: list) -> Any:
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch.applied_context())
        yield


def vision_batch(config, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Two images (one of two frames, not square) placed in one prompt, with labels."""
    vision = config.vision_config
    generator = torch.Generator().manual_seed(seed)
    grid = torch.tensor([[1, 8, 8], [2, 4, 8]])
    merge = vision.spatial_merge_size ** 2
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixels = torch.randn(int(grid.prod(-1).sum()), patch_dim, generator=generator)
    ids = torch.randint(3, config.image_token_id - 1, (4,), generator=generator).tolist()
    for image in grid:
        ids += [config.vision_start_token_id] + [config.image_token_id] * (int(image.prod()) // merge)
        ids += [config.vision_end_token_id, 5]
    input_ids = torch.tensor([ids])
    batch = {"input_ids": input_ids, "pixel_values": pixels, "image_grid_thw": grid,
             "mm_token_type_ids": (input_ids == config.image_token_id).int(), "labels": input_ids}
    return {k: v.to(device) for k, v in batch.items()}


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


def error_site(exc: BaseException) -> str:
    """`file:function:line` of the innermost frame in transformers or in the trainer's patches
    (where the offending tensor was built or used), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/transformers/" in f.filename or "/trainers/patches/" in f.filename]
    frame = (ours or frames or [None])[-1]
    return f"{Path(frame.filename).name}:{frame.name}:{frame.lineno}" if frame else "unknown"


def _grad_norm(model) -> float | None:
    """Norm of this rank's gradient shards over all parameters."""
    grads = [g.double().pow(2).sum() for g in (local_grad(p) for p in model.parameters()) if g is not None]
    return float(torch.stack(grads).sum().sqrt()) if grads else None


def _fsdp_pass(kind: str, name: str, args, plan, mesh, device) -> dict[str, Any]:
    """One step of the `kind` model sharded as the trainer shards it, with CPU offload unless `reference`.
    For VL it also records what `pos_embed` saw, inside its forward (`calls`) and before it (`outside`)."""
    from harness.checks.offload_regression.embedding_calls import record_embedding_calls
    from harness.checks.offload_regression.model_passes import model_batch
    from trainers.fsdp.parallelize import parallelize
    from trainers.models import build_model

    offload = not name.startswith("reference")
    patches = trainer_patches(args.trainer_method, plan.type) if name.endswith("trainer") else []
    result: dict[str, Any] = {"offload": offload, "patches": [p.name for p in patches], "outside": []}
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(patches_applied(patches))  # before the build: some targets are bound at build time
        model = build_model(kind, args.model_config, seed=args.seed)
        parallelize(model, plan, mesh=mesh, offload=offload)
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
        except Exception as exc:  # noqa: BLE001  (any failure is evidence: which class, where, what devices)
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
    from harness.checks.offload_regression.model_passes import MODEL_KINDS
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
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1))
        os.replace(tmp, args.out)
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
